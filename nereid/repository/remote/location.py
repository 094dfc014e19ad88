"""Remote model repository URLs and their credentials, read as Triton reads them.

`s3://[http(s)://host:port/]bucket/path`, `gs://bucket/path`, `as://account/container/path`; credentials
from the environment, or from the JSON file named by `TRITON_CLOUD_CREDENTIAL_PATH` (the entry whose name
is the longest prefix of the URL wins).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from nereid.errors import InvalidArgument

SCHEMES = ("s3", "gs", "as")

# Triton's rule: a host and port before the bucket name select a private S3 endpoint.
_S3_ENDPOINT = re.compile(r"([0-9a-zA-Z\-.]+):([0-9]+)/([0-9a-z.\-]+)((?:/.*)?)")


def is_remote(path: str) -> bool:
    """Whether a --model-repository value names object storage rather than a local folder."""
    return any(path.startswith(f"{scheme}://") for scheme in SCHEMES)


@dataclass(frozen=True)
class RemoteLocation:
    """Where a repository lives: `bucket` is the container for Azure; `prefix` has no slash at either end."""

    url: str
    scheme: str
    bucket: str
    prefix: str
    endpoint: str = ""  # S3: "http(s)://host:port" of a private instance; empty: AWS itself
    account: str = ""  # Azure storage account

    def key(self, relative: str) -> str:
        return f"{self.prefix}/{relative}" if self.prefix else relative

    def describe(self, key: str = "") -> str:
        """A key as a URL, for messages: names the bucket (and account) and the object."""
        head = (
            f"as://{self.account}/{self.bucket}" if self.scheme == "as" else f"{self.scheme}://{self.bucket}"
        )
        return f"{head}/{key}" if key else head


def _segments(text: str) -> list[str]:
    return [part for part in text.split("/") if part]


def parse_location(url: str) -> RemoteLocation:
    """A repository URL as a location; refused with a message when it names no bucket or container."""
    scheme, _, rest = url.partition("://")
    if scheme not in SCHEMES:
        raise InvalidArgument(f"'{url}' is not a model repository URL: use s3://, gs:// or as://")
    if scheme == "s3":
        protocol = ""
        for candidate in ("https://", "http://"):
            if rest.startswith(candidate):
                protocol, rest = candidate, rest[len(candidate) :]
        clean = "/".join(_segments(rest))
        match = _S3_ENDPOINT.fullmatch(clean)
        if match is not None:
            host, port, bucket, path = match.groups()
            return RemoteLocation(
                url, "s3", bucket, "/".join(_segments(path)), endpoint=f"{protocol or 'http://'}{host}:{port}"
            )
        if protocol:
            raise InvalidArgument(f"model repository '{url}': expected s3://{protocol}host:port/bucket/path")
        parts = _segments(rest)
        if not parts:
            raise InvalidArgument(f"model repository '{url}' names no bucket")
        return RemoteLocation(url, "s3", parts[0], "/".join(parts[1:]))
    parts = _segments(rest)
    if scheme == "gs":
        if not parts:
            raise InvalidArgument(f"model repository '{url}' names no bucket")
        return RemoteLocation(url, "gs", parts[0], "/".join(parts[1:]))
    if len(parts) < 2:
        raise InvalidArgument(f"model repository '{url}': expected as://account/container/path")
    return RemoteLocation(url, "as", parts[1], "/".join(parts[2:]), account=parts[0])


@dataclass(frozen=True)
class S3Credential:
    key_id: str = ""
    secret_key: str = ""
    region: str = ""
    session_token: str = ""
    profile: str = ""


@dataclass(frozen=True)
class GcsCredential:
    path: str = ""  # a service account JSON file; empty: the default credentials, else anonymous


@dataclass(frozen=True)
class AzureCredential:
    account: str = ""
    key: str = ""
    endpoint: str = ""  # blob service URL; empty: https://<account>.blob.core.windows.net


Credential = S3Credential | GcsCredential | AzureCredential


def resolve_credential(location: RemoteLocation, environ: Mapping[str, str]) -> Credential:
    """The credential for a location: the credential file's entry when TRITON_CLOUD_CREDENTIAL_PATH is
    set, the provider's environment variables otherwise."""
    file = environ.get("TRITON_CLOUD_CREDENTIAL_PATH")
    if file:
        return _from_file(location, file, environ)
    if location.scheme == "s3":
        return S3Credential(
            environ.get("AWS_ACCESS_KEY_ID", ""),
            environ.get("AWS_SECRET_ACCESS_KEY", ""),
            environ.get("AWS_DEFAULT_REGION", ""),
            environ.get("AWS_SESSION_TOKEN", ""),
            environ.get("AWS_PROFILE", ""),
        )
    if location.scheme == "gs":
        return GcsCredential(environ.get("GOOGLE_APPLICATION_CREDENTIALS", ""))
    return AzureCredential(
        environ.get("AZURE_STORAGE_ACCOUNT", ""),
        environ.get("AZURE_STORAGE_KEY", ""),
        environ.get("AZURE_STORAGE_ENDPOINT", ""),
    )


def _from_file(location: RemoteLocation, file: str, environ: Mapping[str, str]) -> Credential:
    try:
        with open(file, encoding="utf-8") as handle:
            document = json.load(handle)
    except (OSError, ValueError) as exc:
        raise InvalidArgument(
            f"cannot read the cloud credential file '{file}' (TRITON_CLOUD_CREDENTIAL_PATH): {exc}"
        ) from None
    section = document.get(location.scheme) if isinstance(document, dict) else None
    names = [name for name in (section or {}) if location.url.startswith(name)]
    if not names:
        raise InvalidArgument(
            f"the cloud credential file '{file}' has no '{location.scheme}' entry matching '{location.url}' "
            '(add one named "" to match every URL)'
        )
    entry = section[max(names, key=len)]  # type: ignore[index]
    if location.scheme == "gs":
        return GcsCredential(entry if isinstance(entry, str) else "")
    fields = entry if isinstance(entry, dict) else {}
    if location.scheme == "s3":
        return S3Credential(
            *(
                str(fields.get(name, ""))
                for name in ("key_id", "secret_key", "region", "session_token", "profile")
            )
        )
    return AzureCredential(
        str(fields.get("account_str", "")),
        str(fields.get("account_key", "")),
        environ.get("AZURE_STORAGE_ENDPOINT", ""),
    )
