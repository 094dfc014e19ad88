"""Repository URLs and credentials read as Triton reads them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nereid.cli import parse_settings
from nereid.errors import InvalidArgument
from nereid.repository.remote.location import (
    AzureCredential,
    GcsCredential,
    RemoteLocation,
    S3Credential,
    is_remote,
    parse_location,
    resolve_credential,
)


@pytest.mark.parametrize(
    ("url", "bucket", "prefix", "endpoint"),
    [
        ("s3://bucket/path/to/repo", "bucket", "path/to/repo", ""),
        ("s3://bucket", "bucket", "", ""),
        ("s3://bucket//path///repo/", "bucket", "path/repo", ""),
        ("s3://minio.local:9000/bucket/repo", "bucket", "repo", "http://minio.local:9000"),
        ("s3://http://10.0.0.1:9000/bucket", "bucket", "", "http://10.0.0.1:9000"),
        ("s3://https://s3.example.com:443/bucket/a/b", "bucket", "a/b", "https://s3.example.com:443"),
        ("gs://bucket/models", "bucket", "models", ""),
    ],
)
def test_s3_and_gcs_urls(url: str, bucket: str, prefix: str, endpoint: str) -> None:
    location = parse_location(url)
    assert (location.bucket, location.prefix, location.endpoint) == (bucket, prefix, endpoint)


def test_azure_url_names_account_and_container() -> None:
    location = parse_location("as://account/container/path/repo")
    assert location == RemoteLocation(
        "as://account/container/path/repo", "as", "container", "path/repo", account="account"
    )
    assert location.describe("path/repo/m/config.pbtxt") == "as://account/container/path/repo/m/config.pbtxt"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("s3://", "names no bucket"),
        ("gs:///", "names no bucket"),
        ("as://account", "expected as://account/container/path"),
        ("s3://https://nohost/bucket", "expected s3://https://host:port/bucket/path"),
    ],
)
def test_urls_without_a_bucket_are_refused(url: str, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        parse_location(url)


def test_cli_keeps_local_folders_and_urls_apart() -> None:
    settings, _ = parse_settings(["--model-repository=/models", "--model-repository=s3://bucket/models"])
    assert settings.model_repositories == (Path("/models"),)
    assert settings.remote_repositories == ("s3://bucket/models",)
    assert is_remote("gs://b") and is_remote("as://a/c") and not is_remote("/s3://x")


def test_credentials_from_the_environment() -> None:
    environ = {
        "AWS_ACCESS_KEY_ID": "id",
        "AWS_SECRET_ACCESS_KEY": "secret",
        "AWS_DEFAULT_REGION": "eu-west-1",
        "AWS_SESSION_TOKEN": "token",
        "AWS_PROFILE": "prof",
        "GOOGLE_APPLICATION_CREDENTIALS": "/keys/sa.json",
        "AZURE_STORAGE_ACCOUNT": "acct",
        "AZURE_STORAGE_KEY": "key",
    }
    assert resolve_credential(parse_location("s3://b/p"), environ) == S3Credential(
        "id", "secret", "eu-west-1", "token", "prof"
    )
    assert resolve_credential(parse_location("gs://b/p"), environ) == GcsCredential("/keys/sa.json")
    assert resolve_credential(parse_location("as://acct/c/p"), environ) == AzureCredential("acct", "key")


def test_credential_file_takes_the_longest_matching_name(tmp_path: Path) -> None:
    file = tmp_path / "cloud_credential.json"
    file.write_text(
        json.dumps(
            {
                "gs": {"": "/keys/default.json", "gs://special": "/keys/special.json"},
                "s3": {
                    "": {"key_id": "a", "secret_key": "b"},
                    "s3://bucket-2": {"key_id": "c", "secret_key": "d"},
                },
                "as": {"as://acct/c": {"account_str": "acct", "account_key": "k"}},
            }
        )
    )
    environ = {"TRITON_CLOUD_CREDENTIAL_PATH": str(file), "AWS_ACCESS_KEY_ID": "ignored"}
    assert resolve_credential(parse_location("gs://special/m"), environ) == GcsCredential(
        "/keys/special.json"
    )
    assert resolve_credential(parse_location("gs://other/m"), environ) == GcsCredential("/keys/default.json")
    assert resolve_credential(parse_location("s3://bucket-2/m"), environ) == S3Credential("c", "d")
    assert resolve_credential(parse_location("s3://bucket-1/m"), environ) == S3Credential("a", "b")
    assert resolve_credential(parse_location("as://acct/c/m"), environ) == AzureCredential("acct", "k")
    with pytest.raises(InvalidArgument, match="no 'as' entry matching 'as://acct/other'"):
        resolve_credential(parse_location("as://acct/other"), environ)


def test_unreadable_credential_file_is_named(tmp_path: Path) -> None:
    file = tmp_path / "broken.json"
    file.write_text("{not json")
    with pytest.raises(InvalidArgument, match="cannot read the cloud credential file .*broken.json"):
        resolve_credential(parse_location("s3://b"), {"TRITON_CLOUD_CREDENTIAL_PATH": str(file)})
