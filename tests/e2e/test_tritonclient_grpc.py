"""Triton's gRPC client (sync, async callback, aio, streaming) against a real `nereid` process."""

from __future__ import annotations

import asyncio
import datetime
import queue
import shutil
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from tritonclient.utils import InferenceServerException

from tests.conftest import EXAMPLES, RunningServer, start_nereid, stop

# pygrpc-native (which serves only when deflate requests are refused), and grpc.aio with responses
# compressed as a client accepts (the native core has no response compression): every test below runs on
# both.
CORES = {
    "native": ("--grpc-core=native",),
    "aio": ("--grpc-core=aio", "--grpc-infer-response-compression-level=high"),
}


@pytest.fixture(scope="module", params=sorted(CORES))
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    base = tmp_path_factory.mktemp("grpc_e2e")
    shutil.copytree(EXAMPLES, base / "model_repository")
    running = start_nereid(
        base / "model_repository",
        base / "nereid.log",
        *CORES[request.param],
        "--grpc-keepalive-time=10000",
        "--allow-client-shm=true",
        grpc=True,
    )
    running.core = request.param  # type: ignore[attr-defined]
    try:
        yield running
    finally:
        stop(running.process)


def _inputs(
    module: Any, dtype: type = np.int32, datatype: str = "INT32"
) -> tuple[list[Any], np.ndarray, np.ndarray]:
    a = np.arange(16, dtype=dtype).reshape(1, 16)
    b = np.ones((1, 16), dtype=dtype)
    inputs = [module.InferInput("INPUT0", [1, 16], datatype), module.InferInput("INPUT1", [1, 16], datatype)]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs, a, b


def test_startup_output_names_the_grpc_port_and_core(server: RunningServer) -> None:
    assert f"Started GRPCInferenceService at 127.0.0.1:{server.grpc_port}" in server.log()
    core = "gRPC served by pygrpc-native" if server.core == "native" else "gRPC served by grpc.aio"  # type: ignore[attr-defined]
    assert core in server.log()


def test_health_metadata_and_config(server: RunningServer) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("simple") and not client.is_model_ready("simple", "2")
    metadata = client.get_server_metadata(as_json=True)
    assert metadata["name"] == "triton" and "classification" in metadata["extensions"]
    model = client.get_model_metadata("simple", as_json=True)
    assert model["inputs"][0] == {"name": "INPUT0", "datatype": "INT32", "shape": ["-1", "16"]}
    config = client.get_model_config("simple_string").config
    assert config.name == "simple_string" and config.max_batch_size == 8
    assert [m.name for m in client.get_model_repository_index().models] == [
        "simple",
        "simple_classifier",
        "simple_int8",
        "simple_string",
    ]
    with pytest.raises(InferenceServerException) as info:
        client.get_model_metadata("no_such_model")
    assert info.value.status() == "StatusCode.NOT_FOUND"
    assert info.value.message() == "Request for unknown model: 'no_such_model' is not found"


@pytest.mark.parametrize(
    ("model", "dtype", "datatype"), [("simple", np.int32, "INT32"), ("simple_int8", np.int8, "INT8")]
)
def test_sync_infer(server: RunningServer, model: str, dtype: type, datatype: str) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    inputs, a, b = _inputs(grpcclient, dtype, datatype)
    outputs = [grpcclient.InferRequestedOutput("OUTPUT1")]
    result = client.infer(model, inputs, outputs=outputs, request_id="r-9", model_version="1")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    assert result.as_numpy("OUTPUT0") is None
    response = result.get_response()
    assert (response.id, response.model_name, response.model_version) == ("r-9", model, "1")


def test_strings_and_classification(server: RunningServer) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    text = np.array([[str(i).encode() for i in range(16)]], dtype=np.object_)
    inputs = [
        grpcclient.InferInput("INPUT0", [1, 16], "BYTES"),
        grpcclient.InferInput("INPUT1", [1, 16], "BYTES"),
    ]
    inputs[0].set_data_from_numpy(text)
    inputs[1].set_data_from_numpy(np.full((1, 16), b"1", dtype=np.object_))
    result = client.infer("simple_string", inputs)
    assert [int(x) for x in result.as_numpy("OUTPUT0")[0]] == list(range(1, 17))
    scores = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
    scores.set_data_from_numpy(np.array([[0.1, 0.7, 0.2, 0.5]], dtype=np.float32))
    top = client.infer(
        "simple_classifier", [scores], outputs=[grpcclient.InferRequestedOutput("OUTPUT0", class_count=2)]
    )
    assert [c.split(b":")[1:] for c in top.as_numpy("OUTPUT0")[0]] == [[b"1", b"dog"], [b"3", b"fish"]]


def test_errors_keep_status_and_message(server: RunningServer) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    inputs, _, _ = _inputs(grpcclient)
    with pytest.raises(InferenceServerException) as info:
        client.infer("simple", inputs[:1], request_id="x")
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert info.value.message().startswith(
        "[request id: x] expected 2 inputs but got 1 inputs for model 'simple'"
    )
    with pytest.raises(InferenceServerException) as info:
        client.get_inference_statistics("nope")
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert info.value.message() == "requested model 'nope' is not available"
    (stats,) = client.get_inference_statistics("simple", as_json=True)["model_stats"]
    assert stats["name"] == "simple" and stats["version"] == "1" and "inference_stats" in stats


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_compressed_requests(server: RunningServer, algorithm: str) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    inputs, a, b = _inputs(grpcclient)
    if algorithm == "deflate" and server.core == "native":  # type: ignore[attr-defined]
        # The native core refuses deflate with a clear status (README).
        with pytest.raises(InferenceServerException, match="deflate"):
            client.infer("simple", inputs, compression_algorithm=algorithm)
        return
    result = client.infer("simple", inputs, compression_algorithm=algorithm)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)


def test_the_default_core_is_native_and_refuses_only_deflate(tmp_path: Path) -> None:
    running = start_nereid(EXAMPLES, tmp_path / "nereid.log", "--grpc-core=auto", grpc=True)
    try:
        assert (
            "gRPC served by pygrpc-native, the native core (HTTP/2 and per-call work outside the GIL); it "
            "refuses deflate-compressed requests with UNIMPLEMENTED, and --grpc-core=aio serves them"
        ) in running.log()
        client = grpcclient.InferenceServerClient(running.grpc_url)
        inputs, a, b = _inputs(grpcclient)
        for algorithm in ("gzip", None):
            result = client.infer("simple", inputs, compression_algorithm=algorithm)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
        with pytest.raises(InferenceServerException, match="deflate") as info:
            client.infer("simple", inputs, compression_algorithm="deflate")
        assert info.value.status() == "StatusCode.UNIMPLEMENTED"
    finally:
        stop(running.process)


def test_naming_deflate_serves_every_compression_with_grpc_aio(tmp_path: Path) -> None:
    running = start_nereid(
        EXAMPLES,
        tmp_path / "nereid.log",
        "--grpc-core=auto",
        "--grpc-request-compression=gzip,deflate",
        grpc=True,
    )
    try:
        assert (
            "gRPC served by grpc.aio, since the native core lacks deflate-compressed requests "
            "(--grpc-request-compression names deflate)"
        ) in running.log()
        client = grpcclient.InferenceServerClient(running.grpc_url)
        inputs, a, b = _inputs(grpcclient)
        for algorithm in ("gzip", "deflate", None):
            result = client.infer("simple", inputs, compression_algorithm=algorithm)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    finally:
        stop(running.process)


def test_async_infer_with_callback(server: RunningServer) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    inputs, a, b = _inputs(grpcclient)
    results: queue.Queue[tuple[Any, Any]] = queue.Queue()
    for i in range(4):
        client.async_infer(
            "simple", inputs, lambda result, error: results.put((result, error)), request_id=str(i)
        )
    answers = [results.get(timeout=30) for _ in range(4)]
    assert all(error is None for _, error in answers)
    assert sorted(result.get_response().id for result, _ in answers) == ["0", "1", "2", "3"]
    for result, _ in answers:
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)


def test_streaming_keeps_order_and_reports_errors_in_the_stream(server: RunningServer) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    inputs, a, b = _inputs(grpcclient)
    results: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        client.async_stream_infer("simple", inputs, request_id="1")
        client.async_stream_infer("simple", inputs[:1], request_id="2")
        client.async_stream_infer("no_such_model", inputs, request_id="3")
        client.async_stream_infer("simple", inputs, request_id="4")
        answers = [results.get(timeout=30) for _ in range(4)]
    finally:
        client.stop_stream()
    assert [error is None for _, error in answers] == [True, False, False, True]
    assert answers[1][1].message().startswith("[request id: 2] expected 2 inputs but got 1 inputs")
    assert answers[2][1].message() == "Request for unknown model: 'no_such_model' is not found"
    for result, _ in (answers[0], answers[3]):
        response = result.get_response()
        assert response.parameters["triton_final_response"].bool_param
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    assert [answers[0][0].get_response().id, answers[3][0].get_response().id] == ["1", "4"]


def test_aio_client_infer_and_stream(server: RunningServer) -> None:
    async def main() -> None:
        async with aioclient.InferenceServerClient(server.grpc_url) as client:
            assert await client.is_server_ready()
            inputs, a, b = _inputs(aioclient)
            results = await asyncio.gather(
                *(client.infer("simple", inputs, request_id=str(i)) for i in range(8))
            )
            assert [r.get_response().id for r in results] == [str(i) for i in range(8)]
            np.testing.assert_array_equal(results[0].as_numpy("OUTPUT0"), a + b)

            async def requests() -> Any:
                for i in range(3):
                    yield {"model_name": "simple", "inputs": inputs, "request_id": f"s{i}"}

            streamed = [
                (result.get_response().id, error)
                async for result, error in client.stream_infer(requests())  # type: ignore[attr-defined]
            ]
            assert streamed == [("s0", None), ("s1", None), ("s2", None)]

    asyncio.run(main())


def test_aio_cancellation_leaves_the_server_serving(server: RunningServer) -> None:
    async def main() -> None:
        async with aioclient.InferenceServerClient(server.grpc_url) as client:
            inputs, a, b = _inputs(aioclient)
            pending = [asyncio.ensure_future(client.infer("simple", inputs)) for _ in range(16)]
            for task in pending[::2]:
                task.cancel()
            done = await asyncio.gather(*pending, return_exceptions=True)
            assert all(isinstance(d, asyncio.CancelledError) for d in done[::2])
            assert all(not isinstance(d, BaseException) for d in done[1::2])
            result = await client.infer("simple", inputs)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)

    asyncio.run(main())


def test_http_and_grpc_from_one_process_at_once(server: RunningServer) -> None:
    """Both protocols busy together: each answers all its requests while the other is loaded."""
    errors: list[BaseException] = []
    counts = {"grpc": 0, "http": 0}

    def load(module: Any, url: str, protocol: str) -> None:
        try:
            client = module.InferenceServerClient(url)
            inputs, _, _ = _inputs(module)
            for _ in range(100):
                client.infer("simple", inputs)
                counts[protocol] += 1
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=load, args=(grpcclient, server.grpc_url, "grpc")),
        threading.Thread(target=load, args=(httpclient, server.url, "http")),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors and counts == {"grpc": 100, "http": 100}


# TLS


def _certificate(
    subject: str, key: ec.EllipticCurvePrivateKey, issuer: tuple[x509.Name, ec.EllipticCurvePrivateKey] | None
) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    issuer_name, issuer_key = issuer if issuer is not None else (name, key)
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
    )
    if issuer is None:
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
    else:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False
        )
    return builder.sign(issuer_key, hashes.SHA256())


def _write_pair(folder: Path, stem: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> None:
    (folder / f"{stem}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / f"{stem}.key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA, a server certificate for localhost and a client certificate, all signed by the CA."""
    folder = tmp_path_factory.mktemp("tls")
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _certificate("nereid test CA", ca_key, None)
    _write_pair(folder, "ca", ca, ca_key)
    for stem in ("server", "client"):
        key = ec.generate_private_key(ec.SECP256R1())
        _write_pair(folder, stem, _certificate(f"nereid test {stem}", key, (ca.subject, ca_key)), key)
    return folder


def _tls_server(tmp_path: Path, certificates: Path, *flags: str) -> RunningServer:
    shutil.copytree(EXAMPLES / "simple", tmp_path / "repository" / "simple")
    return start_nereid(
        tmp_path / "repository",
        tmp_path / "nereid.log",
        f"--grpc-server-cert={certificates / 'server.crt'}",
        f"--grpc-server-key={certificates / 'server.key'}",
        f"--grpc-root-cert={certificates / 'ca.crt'}",
        *flags,
        grpc=True,
    )


def _tls_client(
    server: RunningServer, certificates: Path, with_client_cert: bool
) -> grpcclient.InferenceServerClient:
    client_files = (
        {
            "private_key": str(certificates / "client.key"),
            "certificate_chain": str(certificates / "client.crt"),
        }
        if with_client_cert
        else {}
    )
    return grpcclient.InferenceServerClient(
        f"localhost:{server.grpc_port}",
        ssl=True,
        root_certificates=str(certificates / "ca.crt"),
        **client_files,
    )


def test_tls(tmp_path: Path, certificates: Path) -> None:
    server = _tls_server(tmp_path, certificates, "--grpc-use-ssl=true")
    try:
        client = _tls_client(server, certificates, with_client_cert=False)
        inputs, a, b = _inputs(grpcclient)
        np.testing.assert_array_equal(client.infer("simple", inputs).as_numpy("OUTPUT0"), a + b)
        plain = grpcclient.InferenceServerClient(server.grpc_url)
        with pytest.raises(InferenceServerException) as info:
            plain.is_server_live(client_timeout=10)
        assert info.value.status() == "StatusCode.UNAVAILABLE"
    finally:
        stop(server.process)


def test_mutual_tls_requires_a_client_certificate(tmp_path: Path, certificates: Path) -> None:
    server = _tls_server(tmp_path, certificates, "--grpc-use-ssl-mutual=true")
    try:
        assert _tls_client(server, certificates, with_client_cert=True).is_server_live()
        with pytest.raises(InferenceServerException) as info:
            _tls_client(server, certificates, with_client_cert=False).is_server_live(client_timeout=10)
        assert info.value.status() == "StatusCode.UNAVAILABLE"
    finally:
        stop(server.process)


# features the engine shares with HTTP


def test_system_shared_memory(server: RunningServer) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    key = f"/nereid_grpc_{uuid.uuid4().hex[:8]}"
    regions = {"in": shm.create_shared_memory_region("in", f"{key}_in", 128)}
    regions["out"] = shm.create_shared_memory_region("out", f"{key}_out", 64)
    try:
        a, b = np.arange(16, dtype=np.int32).reshape(1, 16), np.full((1, 16), 3, dtype=np.int32)
        shm.set_shared_memory_region(regions["in"], [a, b])
        client.register_system_shared_memory("in", f"{key}_in", 128)
        client.register_system_shared_memory("out", f"{key}_out", 64)
        status = client.get_system_shared_memory_status(as_json=True)["regions"]
        assert status["in"] == {"name": "in", "key": f"{key}_in", "byte_size": "128"}
        inputs = [
            grpcclient.InferInput("INPUT0", [1, 16], "INT32"),
            grpcclient.InferInput("INPUT1", [1, 16], "INT32"),
        ]
        inputs[0].set_shared_memory("in", 64)
        inputs[1].set_shared_memory("in", 64, offset=64)
        in_region = grpcclient.InferRequestedOutput("OUTPUT0")
        in_region.set_shared_memory("out", 64)
        result = client.infer(
            "simple", inputs, outputs=[in_region, grpcclient.InferRequestedOutput("OUTPUT1")]
        )
        np.testing.assert_array_equal(shm.get_contents_as_numpy(regions["out"], np.int32, [1, 16]), a + b)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
        with pytest.raises(InferenceServerException, match="already"):
            client.register_system_shared_memory("in", f"{key}_in", 128)
        client.unregister_system_shared_memory()
        assert not client.get_system_shared_memory_status().regions
        # Triton's statuses and words, which its clients match on
        with pytest.raises(
            InferenceServerException, match=r"^\[StatusCode\.INTERNAL\] Unable to open shared"
        ):
            client.register_system_shared_memory("absent", f"{key}_absent", 16)
        with pytest.raises(
            InferenceServerException, match="failed to register shared memory region.*invalid args"
        ):
            client.register_cuda_shared_memory("", b"", 0, 0)
    finally:
        client.unregister_system_shared_memory()
        for handle in regions.values():
            shm.destroy_shared_memory_region(handle)


def test_explicit_model_control(tmp_path: Path) -> None:
    shutil.copytree(EXAMPLES, tmp_path / "repository")
    explicit = start_nereid(
        tmp_path / "repository",
        tmp_path / "nereid.log",
        "--model-control-mode=explicit",
        "--load-model=simple",
        grpc=True,
    )
    try:
        client = grpcclient.InferenceServerClient(explicit.grpc_url)
        assert client.is_model_ready("simple") and not client.is_model_ready("simple_int8")
        client.load_model("simple_int8")
        assert client.is_model_ready("simple_int8")
        client.unload_model("simple")
        assert not client.is_model_ready("simple")
        ready = {m.name for m in client.get_model_repository_index().models if m.state == "READY"}
        assert ready == {"simple_int8"}
        with pytest.raises(InferenceServerException) as info:
            client.load_model("no_such_model")
        assert info.value.status() == "StatusCode.INTERNAL"  # Triton's status for it
        assert "failed to load 'no_such_model', failed to poll from model repository" in info.value.message()
    finally:
        stop(explicit.process)
