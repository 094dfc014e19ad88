"""Remote repositories against real S3, GCS and Azure Blob servers: loading, polling, uploads in progress,
refused credentials, missing buckets."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from nereid.errors import Forbidden, InvalidArgument, NotFound, PollFailed, Unavailable
from nereid.repository import ModelManager
from nereid.repository.remote.stores import ObjectInfo
from nereid.settings import ServerSettings
from tests.conftest import EXAMPLES
from tests.repository.cloud.servers import Bucket

ONNX = (EXAMPLES / "simple" / "1" / "model.onnx").read_bytes()
CONFIG = b'platform: "onnxruntime_onnx"\nmax_batch_size: 8\n'


def upload(bucket: Bucket, name: str, *versions: int) -> None:
    bucket.put(f"{name}/config.pbtxt", CONFIG)
    for version in versions:
        bucket.put(f"{name}/{version}/model.onnx", ONNX)


def manager_for(url: str, environ: dict[str, str], mode: str = "none", **settings: object) -> ModelManager:
    return ModelManager(
        ServerSettings(
            model_repositories=(),
            remote_repositories=(url,),
            model_control_mode=mode,
            repository_poll_secs=3600,  # the tests call poll() themselves
            **settings,  # type: ignore[arg-type]
        ),
        environ,
    )


@pytest.fixture
def started(request: pytest.FixtureRequest) -> Iterator[list[ModelManager]]:
    managers: list[ModelManager] = []
    yield managers
    for manager in managers:
        manager.stop()


def start(managers: list[ModelManager], manager: ModelManager) -> ModelManager:
    managers.append(manager)
    manager.start()
    return manager


def test_models_load_from_the_bucket(bucket: Bucket, started: list[ModelManager]) -> None:
    upload(bucket, "alpha", 1)
    upload(bucket, "beta", 1, 2)
    bucket.put("README.md", b"files beside the models are ignored")
    manager = start(started, manager_for(bucket.url, bucket.environ))
    assert manager.get("alpha").version == 1
    assert manager.get("beta").version == 2
    assert [(row["name"], row.get("version"), row.get("state")) for row in manager.index()] == [
        ("alpha", "1", "READY"),
        ("beta", "2", "READY"),
    ]


def test_poll_loads_a_new_version_once_its_upload_holds_still(
    bucket: Bucket, started: list[ModelManager]
) -> None:
    upload(bucket, "alpha", 1)
    manager = start(started, manager_for(bucket.url, bucket.environ, "poll"))
    first = manager.get("alpha")
    bucket.put("alpha/2/model.onnx", ONNX)
    manager.poll()  # seen changed once: it may still be uploading
    assert manager.get("alpha") is first
    manager.poll()  # the same objects a second time: swapped in and loaded
    assert manager.get("alpha").version == 2
    manager.poll()  # nothing changed: nothing reloads
    assert manager.get("alpha").version == 2


def test_a_rewritten_object_reloads_the_model(bucket: Bucket, started: list[ModelManager]) -> None:
    upload(bucket, "alpha", 1)
    manager = start(started, manager_for(bucket.url, bucket.environ, "poll"))
    first = manager.get("alpha")
    bucket.put("alpha/config.pbtxt", CONFIG + b"# changed\n")
    manager.poll()
    manager.poll()
    assert manager.get("alpha") is not first
    assert manager.get("alpha").version == 1


def test_objects_changing_during_the_download_are_not_swapped_in(
    bucket: Bucket, started: list[ModelManager]
) -> None:
    upload(bucket, "alpha", 1)
    manager = start(started, manager_for(bucket.url, bucket.environ, "poll"))
    first = manager.get("alpha")
    bucket.put("alpha/2/model.onnx", ONNX)
    mirror = manager._mirrors[0]
    store = mirror.store()
    real_download = store.download
    # One rewrite, made while the first object downloads.
    uploads = iter([lambda: bucket.put("alpha/config.pbtxt", CONFIG + b"# rewritten\n")])

    def download_while_uploading(obj: ObjectInfo, target: Path) -> None:
        for rewrite in uploads:
            rewrite()
        real_download(obj, target)

    store.download = download_while_uploading  # type: ignore[method-assign]
    manager.poll()
    manager.poll()  # the listing held still, but an object changed under the download: not swapped in
    assert manager.get("alpha") is first
    assert sorted(p.name for p in (mirror.root / "alpha").iterdir()) == ["1", "config.pbtxt"]
    manager.poll()
    manager.poll()
    assert manager.get("alpha").version == 2


def test_poll_unloads_a_model_removed_from_the_bucket(bucket: Bucket, started: list[ModelManager]) -> None:
    upload(bucket, "alpha", 1)
    upload(bucket, "beta", 1)
    manager = start(started, manager_for(bucket.url, bucket.environ, "poll"))
    bucket.delete("beta/config.pbtxt")
    bucket.delete("beta/1/model.onnx")
    manager.poll()
    with pytest.raises(NotFound):
        manager.get("beta")
    assert manager.get("alpha").version == 1


def test_explicit_load_reads_the_bucket_as_it_is_now(bucket: Bucket, started: list[ModelManager]) -> None:
    manager = start(started, manager_for(bucket.url, bucket.environ, "explicit"))
    with pytest.raises(PollFailed, match="no model folder named 'alpha'"):
        manager.load("alpha")
    upload(bucket, "alpha", 1)
    manager.load("alpha")  # no settling: the user asked for it now
    assert manager.get("alpha").version == 1
    bucket.put("alpha/3/model.onnx", ONNX)
    manager.load("alpha")
    assert manager.get("alpha").version == 3


def test_load_errors_name_the_object_in_the_bucket(bucket: Bucket, started: list[ModelManager]) -> None:
    bucket.put("alpha/config.pbtxt", b"max_batch_size: x\n")
    bucket.put("alpha/1/model.onnx", ONNX)
    manager = start(started, manager_for(bucket.url, bucket.environ, exit_on_error=False))
    (row,) = manager.index()
    assert row["state"] == "UNAVAILABLE"
    assert row["reason"].startswith(f"{bucket.url.split('://')[0]}://")
    assert "models/alpha/config.pbtxt:1:" in row["reason"] and "nereid-repository-" not in row["reason"]


@pytest.mark.parametrize("bucket", ["s3"], indirect=True)
def test_a_key_that_is_a_file_and_a_folder_is_named(bucket: Bucket, started: list[ModelManager]) -> None:
    upload(bucket, "alpha", 1)
    upload(bucket, "beta", 1)
    bucket.put("beta/1", b"a file where a folder must be")
    manager = manager_for(bucket.url, bucket.environ, "explicit")
    start(started, manager)
    with pytest.raises(
        InvalidArgument, match=r"cannot copy s3://nereid-test-[0-9]+/models/beta/1.* local mirror"
    ):
        manager.load("beta")
    manager.load("alpha")
    assert manager.get("alpha").version == 1


@pytest.mark.parametrize("bucket", ["s3", "azure"], indirect=True)
def test_refused_credentials_name_the_bucket(bucket: Bucket, started: list[ModelManager]) -> None:
    upload(bucket, "alpha", 1)
    assert bucket.refused_environ is not None
    manager = manager_for(bucket.url, bucket.refused_environ)
    started.append(manager)
    with pytest.raises(Forbidden) as refused:
        manager.start()
    bucket_name = bucket.url.split("/")[-2]
    assert f"{bucket_name}/models/" in refused.value.message
    assert "was refused (check the credentials)" in refused.value.message


def test_a_missing_bucket_is_named(bucket: Bucket, started: list[ModelManager]) -> None:
    url = bucket.url.replace("/nereid-test-", "/no-such-bucket-")
    manager = manager_for(url, bucket.environ)
    started.append(manager)
    with pytest.raises(NotFound, match="no-such-bucket-[0-9]+/models/ does not exist"):
        manager.start()


@pytest.mark.parametrize("bucket", ["s3"], indirect=True)
def test_credential_file_longest_prefix_wins(
    bucket: Bucket, started: list[ModelManager], tmp_path: Path
) -> None:
    upload(bucket, "alpha", 1)
    host_and_bucket = bucket.url.rsplit("/", 1)[0]
    good = {
        "key_id": bucket.environ["AWS_ACCESS_KEY_ID"],
        "secret_key": bucket.environ["AWS_SECRET_ACCESS_KEY"],
    }
    credentials = {"s3": {"": {**good, "secret_key": "wrong"}, host_and_bucket: good}}
    file = tmp_path / "cloud_credential.json"
    file.write_text(json.dumps(credentials))
    manager = start(started, manager_for(bucket.url, {"TRITON_CLOUD_CREDENTIAL_PATH": str(file)}))
    assert manager.get("alpha").version == 1


@pytest.mark.parametrize("bucket", ["s3"], indirect=True)
def test_mirror_goes_to_the_mount_directory(
    bucket: Bucket, started: list[ModelManager], tmp_path: Path
) -> None:
    upload(bucket, "alpha", 1)
    manager = start(
        started, manager_for(bucket.url, {**bucket.environ, "TRITON_AWS_MOUNT_DIRECTORY": str(tmp_path)})
    )
    (mirror,) = tmp_path.iterdir()  # one folder per repository URL
    assert (mirror / "repository" / "alpha" / "1" / "model.onnx").read_bytes() == ONNX
    assert manager.get("alpha").version == 1
    manager.stop()
    started.remove(manager)
    assert (mirror / "repository" / "alpha").exists()  # the user's folder: left for them, not removed
    (mirror / "repository" / "stale").mkdir()
    start(started, manager_for(bucket.url, {**bucket.environ, "TRITON_AWS_MOUNT_DIRECTORY": str(tmp_path)}))
    assert sorted(p.name for p in (mirror / "repository").iterdir()) == ["alpha"]  # a new start starts clean


def test_gcs_credential_file_that_cannot_be_read_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-key.json"
    manager = manager_for("gs://bucket/models", {"GOOGLE_APPLICATION_CREDENTIALS": str(missing)})
    try:
        with pytest.raises(Forbidden, match="cannot read the GCS credential file .*no-such-key.json"):
            manager.start()
    finally:
        manager.stop()


@pytest.mark.parametrize(
    ("url", "module", "extra"),
    [
        ("s3://bucket/models", "boto3", "s3"),
        ("gs://bucket/models", "google.cloud.storage", "gcs"),
        ("as://account/container/models", "azure.storage.blob", "azure"),
    ],
)
def test_a_missing_client_library_names_its_extra(
    url: str, module: str, extra: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # what an absent package looks like to import
    manager = manager_for(url, {})
    try:
        with pytest.raises(Unavailable, match=rf"pip install 'nereid\[{extra}\]'"):
            manager.start()
    finally:
        manager.stop()
