"""Real servers of the three object-storage protocols, on loopback ports of their own.

S3: moto's server, with authentication switched on so that wrong keys are refused. Azure Blob: Azurite
(Node.js), which checks shared-key signatures. GCS: gcp-storage-emulator, which does not check
credentials at all, so refused credentials are tested on the other two.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from tests.conftest import ROOT, free_port, stop

# Azurite's well-known development account (published in Azure's documentation for the emulator).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


class Bucket(Protocol):
    """One empty bucket (or container) on a running server, and how a test writes to it."""

    url: str  # the --model-repository URL of the repository inside it
    environ: dict[str, str]  # credentials and endpoints a server needs to read it
    refused_environ: dict[str, str] | None  # credentials the server refuses; None: it checks none

    def put(self, key: str, data: bytes) -> None: ...

    def delete(self, key: str) -> None: ...


def _wait_for_port(port: int, process: subprocess.Popen[bytes] | None = None, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the server exited with code {process.returncode} before it listened")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


# S3 ----------------------------------------------------------------------------------------------------
@dataclass
class S3Bucket:
    endpoint: str
    name: str
    key_id: str
    secret: str
    url: str = ""
    environ: dict[str, str] = field(default_factory=dict)
    refused_environ: dict[str, str] | None = None

    def __post_init__(self) -> None:
        host = self.endpoint.removeprefix("http://")
        self.url = f"s3://{host}/{self.name}/models"
        base = {"AWS_DEFAULT_REGION": "us-east-1"}
        self.environ = {**base, "AWS_ACCESS_KEY_ID": self.key_id, "AWS_SECRET_ACCESS_KEY": self.secret}
        self.refused_environ = {**base, "AWS_ACCESS_KEY_ID": self.key_id, "AWS_SECRET_ACCESS_KEY": "wrong"}
        self._client = _s3_client(self.endpoint, self.key_id, self.secret)
        self._client.create_bucket(Bucket=self.name)

    def put(self, key: str, data: bytes) -> None:
        self._client.put_object(Bucket=self.name, Key=f"models/{key}", Body=data)

    def delete(self, key: str) -> None:
        self._client.delete_object(Bucket=self.name, Key=f"models/{key}")


def _s3_client(endpoint: str, key_id: str, secret: str) -> Any:
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=key_id,
        aws_secret_access_key=secret,
        region_name="us-east-1",
    )


@contextmanager
def moto_server() -> Iterator[tuple[str, str, str]]:
    """moto's S3 server with a user allowed s3:*, authentication on; yields (endpoint, key id, secret)."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        import boto3

        iam = boto3.client(
            "iam",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="setup",
            aws_secret_access_key="setup",
        )
        iam.create_user(UserName="nereid")
        policy = {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}],
        }
        iam.put_user_policy(UserName="nereid", PolicyName="s3", PolicyDocument=json.dumps(policy))
        key = iam.create_access_key(UserName="nereid")["AccessKey"]
        # From here on, every request must be signed with a key that IAM knows.
        request = urllib.request.Request(
            f"{endpoint}/moto-api/reset-auth",
            data=b"0",
            method="POST",
            headers={"Content-Type": "text/plain"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()
        yield endpoint, key["AccessKeyId"], key["SecretAccessKey"]
    finally:
        server.stop()


# Google Cloud Storage ----------------------------------------------------------------------------------
@dataclass
class GcsBucket:
    host: str
    name: str
    url: str = ""
    environ: dict[str, str] = field(default_factory=dict)
    refused_environ: dict[str, str] | None = None

    def __post_init__(self) -> None:
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        self.url = f"gs://{self.name}/models"
        self.environ = {"STORAGE_EMULATOR_HOST": self.host}
        client = storage.Client(
            project="test", credentials=AnonymousCredentials(), client_options={"api_endpoint": self.host}
        )
        self._bucket = client.create_bucket(self.name)

    def put(self, key: str, data: bytes) -> None:
        self._bucket.blob(f"models/{key}").upload_from_string(data)

    def delete(self, key: str) -> None:
        self._bucket.blob(f"models/{key}").delete()


@contextmanager
def gcs_server() -> Iterator[str]:
    from gcp_storage_emulator.server import create_server

    port = free_port()
    server = create_server("127.0.0.1", port, in_memory=True)
    server.start()
    try:
        _wait_for_port(port)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


# Azure Blob --------------------------------------------------------------------------------------------
@dataclass
class AzureBucket:
    endpoint: str
    name: str
    url: str = ""
    environ: dict[str, str] = field(default_factory=dict)
    refused_environ: dict[str, str] | None = None

    def __post_init__(self) -> None:
        from azure.storage.blob import BlobServiceClient

        self.url = f"as://{AZURITE_ACCOUNT}/{self.name}/models"
        base = {"AZURE_STORAGE_ACCOUNT": AZURITE_ACCOUNT, "AZURE_STORAGE_ENDPOINT": self.endpoint}
        self.environ = {**base, "AZURE_STORAGE_KEY": AZURITE_KEY}
        self.refused_environ = {**base, "AZURE_STORAGE_KEY": "AAAA" + AZURITE_KEY[4:]}
        credential = {"account_name": AZURITE_ACCOUNT, "account_key": AZURITE_KEY}
        service = BlobServiceClient(self.endpoint, credential=credential)
        self._container = service.create_container(self.name)

    def put(self, key: str, data: bytes) -> None:
        self._container.upload_blob(f"models/{key}", data, overwrite=True)

    def delete(self, key: str) -> None:
        self._container.delete_blob(f"models/{key}")


def azurite_command() -> str | None:
    local = ROOT / "node_modules" / ".bin" / "azurite-blob"
    return str(local) if local.exists() else shutil.which("azurite-blob")


@contextmanager
def azurite_server(workdir: Path) -> Iterator[str]:
    command = azurite_command()
    if command is None:
        raise RuntimeError("azurite-blob is not installed: npm install azurite (as .ci/run does)")
    port = free_port()
    log = (workdir / "azurite.log").open("wb")
    process = subprocess.Popen(
        [
            command,
            "--blobHost",
            "127.0.0.1",
            "--blobPort",
            str(port),
            "--inMemoryPersistence",
            "--skipApiVersionCheck",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=workdir,
    )
    try:
        _wait_for_port(port, process)
        yield f"http://127.0.0.1:{port}/{AZURITE_ACCOUNT}"
    finally:
        stop(process)
        log.close()
