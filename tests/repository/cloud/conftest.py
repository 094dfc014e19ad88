"""One server per storage protocol for the whole session, and a fresh bucket on it for each test."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass

import pytest

from tests.repository.cloud.servers import (
    AzureBucket,
    Bucket,
    GcsBucket,
    S3Bucket,
    azurite_command,
    azurite_server,
    gcs_server,
    moto_server,
)

PROVIDERS = ("s3", "gcs", "azure")


@dataclass(frozen=True)
class NotInstalled:
    reason: str


_names = itertools.count()


@pytest.fixture(scope="session")
def storage_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    """Started on first use; a provider whose server cannot start maps to the reason."""
    with ExitStack() as stack:
        started: dict[str, object] = {}
        started["s3"] = stack.enter_context(moto_server())
        started["gcs"] = stack.enter_context(gcs_server())
        if azurite_command() is None and not os.environ.get("CI"):
            started["azure"] = NotInstalled(
                "Azurite is not installed here: npm install azurite (CI installs it)"
            )
        else:
            started["azure"] = stack.enter_context(azurite_server(tmp_path_factory.mktemp("azurite")))
        yield started


@pytest.fixture(params=PROVIDERS)
def bucket(request: pytest.FixtureRequest, storage_servers: dict[str, object]) -> Bucket:
    server = storage_servers[request.param]
    if isinstance(server, NotInstalled):  # outside CI only; there, a missing server fails the tests
        pytest.skip(server.reason)
    name = f"nereid-test-{next(_names)}"
    if request.param == "s3":
        endpoint, key_id, secret = server  # type: ignore[misc]
        return S3Bucket(endpoint, name, key_id, secret)
    if request.param == "gcs":
        return GcsBucket(server, name)  # type: ignore[arg-type]
    return AzureBucket(server, name)  # type: ignore[arg-type]
