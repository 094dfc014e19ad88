"""Object stores behind remote repositories: list objects under a prefix, download one as listed.

Each provider's client library is an optional extra, imported only when a repository of its kind is used.
Provider errors become Nereid errors that name the bucket and key.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from nereid.errors import Forbidden, NotFound, Unavailable
from nereid.repository.remote.location import (
    AzureCredential,
    GcsCredential,
    RemoteLocation,
    S3Credential,
    resolve_credential,
)

_EXTRAS = {
    "s3": ("boto3", "s3"),
    "gs": ("google-cloud-storage", "gcs"),
    "as": ("azure-storage-blob", "azure"),
}


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int
    tag: str  # ETag (S3, Azure) or generation (GCS): changes whenever the object is written


class ObjectChanged(Exception):
    """An object was rewritten or removed after it was listed: its model is still being uploaded."""


class ObjectStore(Protocol):
    location: RemoteLocation

    def list(self, prefix: str) -> list[ObjectInfo]: ...

    def download(self, obj: ObjectInfo, target: Path) -> None:
        """Write the object as listed to `target`; ObjectChanged if it is no longer that version."""
        ...


def open_store(location: RemoteLocation, environ: Mapping[str, str]) -> ObjectStore:
    credential = resolve_credential(location, environ)
    if isinstance(credential, S3Credential):
        return S3Store(location, credential)
    if isinstance(credential, GcsCredential):
        return GcsStore(location, credential, environ.get("STORAGE_EMULATOR_HOST", ""))
    return AzureStore(location, credential)


def _require(module: str, scheme: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError:
        package, extra = _EXTRAS[scheme]
        raise Unavailable(
            f"{scheme}:// model repositories need the {package} package: pip install 'nereid[{extra}]'"
        ) from None


def _refused(location: RemoteLocation, key: str, detail: str) -> Forbidden:
    return Forbidden(f"access to {location.describe(key)} was refused (check the credentials): {detail}")


class S3Store:
    def __init__(self, location: RemoteLocation, credential: S3Credential) -> None:
        boto3 = _require("boto3", "s3")
        from botocore.config import Config

        self.location = location
        if credential.key_id and credential.secret_key:
            session = boto3.session.Session(
                aws_access_key_id=credential.key_id,
                aws_secret_access_key=credential.secret_key,
                aws_session_token=credential.session_token or None,
                region_name=credential.region or None,
            )
        elif credential.profile:
            session = boto3.session.Session(profile_name=credential.profile)
        else:  # the default chain: config files, container and instance roles, web identity
            session = boto3.session.Session(region_name=credential.region or None)
        self._client = session.client(
            "s3",
            endpoint_url=location.endpoint or None,
            region_name=session.region_name or "us-east-1",
            config=Config(
                s3={"addressing_style": "path"},  # as Triton: bucket names in the path, not the host
                retries={"max_attempts": 3, "mode": "standard"},
                connect_timeout=10,
                read_timeout=60,
            ),
        )

    @contextlib.contextmanager
    def _errors(self, key: str) -> Iterator[None]:
        from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

        try:
            yield
        except ClientError as exc:
            error = exc.response.get("Error", {})
            code = str(error.get("Code", ""))
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
            detail = f"{code}: {error.get('Message', '')}"
            if code in ("PreconditionFailed", "NoSuchKey") or status == 412:
                raise ObjectChanged(key) from None
            if status in (401, 403):
                raise _refused(self.location, key, detail) from None
            if code == "NoSuchBucket" or status == 404:
                raise NotFound(f"{self.location.describe(key)} does not exist: {detail}") from None
            raise Unavailable(f"cannot read {self.location.describe(key)}: {detail}") from None
        except NoCredentialsError:
            raise _refused(self.location, key, "no AWS credentials were found") from None
        except BotoCoreError as exc:
            raise Unavailable(f"cannot reach {self.location.describe(key)}: {exc}") from None

    def list(self, prefix: str) -> list[ObjectInfo]:
        with self._errors(prefix):
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.location.bucket, Prefix=prefix
            )
            return [
                ObjectInfo(item["Key"], int(item["Size"]), str(item["ETag"]))
                for page in pages
                for item in page.get("Contents", [])
            ]

    def download(self, obj: ObjectInfo, target: Path) -> None:
        with self._errors(obj.key):
            response = self._client.get_object(Bucket=self.location.bucket, Key=obj.key, IfMatch=obj.tag)
            with open(target, "wb") as out:
                for chunk in response["Body"].iter_chunks(1 << 20):
                    out.write(chunk)


class GcsStore:
    def __init__(self, location: RemoteLocation, credential: GcsCredential, emulator_host: str) -> None:
        storage = _require("google.cloud.storage", "gs")
        self.location = location
        credentials: Any
        options = None
        if emulator_host:  # the variable Google's own clients honour for a local emulator
            from google.auth.credentials import AnonymousCredentials

            credentials = AnonymousCredentials()
            host = emulator_host if "://" in emulator_host else f"http://{emulator_host}"
            options = {"api_endpoint": host}
        elif credential.path:
            from google.oauth2 import service_account

            try:
                credentials = service_account.Credentials.from_service_account_file(credential.path)
            except (OSError, ValueError) as exc:
                raise Forbidden(f"cannot read the GCS credential file '{credential.path}': {exc}") from None
        else:
            import google.auth
            from google.auth.credentials import AnonymousCredentials
            from google.auth.exceptions import DefaultCredentialsError

            try:
                credentials, _ = google.auth.default()
            except DefaultCredentialsError:  # as Triton: public buckets need no credentials
                credentials = AnonymousCredentials()
        project = getattr(credentials, "project_id", None) or "-"
        self._client = storage.Client(project=project, credentials=credentials, client_options=options)
        self._bucket = self._client.bucket(location.bucket)

    @contextlib.contextmanager
    def _errors(self, key: str) -> Iterator[None]:
        from google.api_core import exceptions as api
        from google.auth.exceptions import GoogleAuthError

        try:
            yield
        except (api.PreconditionFailed, api.NotFound) as exc:
            if key.endswith("/") or not key:
                raise NotFound(f"{self.location.describe(key)} does not exist: {exc.message}") from None
            raise ObjectChanged(key) from None
        except (api.Forbidden, api.Unauthorized) as exc:
            raise _refused(self.location, key, str(exc.message)) from None
        except GoogleAuthError as exc:
            raise _refused(self.location, key, str(exc)) from None
        except (api.GoogleAPIError, OSError) as exc:
            raise Unavailable(f"cannot read {self.location.describe(key)}: {exc}") from None

    def list(self, prefix: str) -> list[ObjectInfo]:
        with self._errors(prefix or "/"):
            blobs = self._client.list_blobs(self.location.bucket, prefix=prefix)
            return [ObjectInfo(blob.name, int(blob.size or 0), str(blob.generation)) for blob in blobs]

    def download(self, obj: ObjectInfo, target: Path) -> None:
        with self._errors(obj.key):
            blob = self._bucket.blob(obj.key)
            blob.download_to_filename(str(target), if_generation_match=int(obj.tag))


class AzureStore:
    def __init__(self, location: RemoteLocation, credential: AzureCredential) -> None:
        blob = _require("azure.storage.blob", "as")
        self.location = location
        account = credential.account or location.account
        endpoint = credential.endpoint or f"https://{location.account}.blob.core.windows.net"
        key = {"account_name": account, "account_key": credential.key} if credential.key else None
        service = blob.BlobServiceClient(endpoint, credential=key, retry_total=2)
        self._container = service.get_container_client(location.bucket)

    @contextlib.contextmanager
    def _errors(self, key: str) -> Iterator[None]:
        from azure.core import exceptions as az

        try:
            yield
        except az.ResourceModifiedError:
            raise ObjectChanged(key) from None
        except az.ResourceNotFoundError as exc:
            if key.endswith("/") or not key:
                raise NotFound(f"{self.location.describe(key)} does not exist: {exc.message}") from None
            raise ObjectChanged(key) from None
        except az.ClientAuthenticationError as exc:
            raise _refused(self.location, key, str(exc.message).splitlines()[0]) from None
        except az.HttpResponseError as exc:
            if exc.status_code in (401, 403):
                raise _refused(self.location, key, str(exc.message).splitlines()[0]) from None
            raise Unavailable(f"cannot read {self.location.describe(key)}: {exc.message}") from None
        except az.AzureError as exc:
            raise Unavailable(f"cannot reach {self.location.describe(key)}: {exc}") from None

    def list(self, prefix: str) -> list[ObjectInfo]:
        with self._errors(prefix or "/"):
            items = self._container.list_blobs(name_starts_with=prefix or None)
            return [ObjectInfo(item.name, int(item.size), str(item.etag)) for item in items]

    def download(self, obj: ObjectInfo, target: Path) -> None:
        from azure.core import MatchConditions

        with self._errors(obj.key):
            stream = self._container.download_blob(
                obj.key, etag=obj.tag, match_condition=MatchConditions.IfNotModified
            )
            with open(target, "wb") as out:
                stream.readinto(out)
