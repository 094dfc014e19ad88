"""The gRPC server's core, options and binding."""

from __future__ import annotations

import asyncio
import importlib.util
import socket

import grpc
import pytest

from nereid.errors import Status, Unavailable
from nereid.frontends.grpc import start_grpc_server
from nereid.frontends.grpc.server import MAX_MESSAGE_BYTES, NATIVE_WHY, choose_core, server_options
from nereid.frontends.grpc.status import GRPC_STATUS
from nereid.settings import GrpcOptions, ServerSettings
from tests.conftest import EXAMPLES
from tests.frontends.grpc.conftest import InProcessServer


def test_options_follow_the_flags() -> None:
    defaults = dict(server_options(GrpcOptions()))
    assert (
        defaults["grpc.max_receive_message_length"] == defaults["grpc.max_send_message_length"] == 2**31 - 1
    )
    assert MAX_MESSAGE_BYTES == 2**31 - 1
    assert defaults["grpc.so_reuseport"] == 0
    assert defaults["grpc.keepalive_time_ms"] == 7_200_000 and defaults["grpc.http2.max_ping_strikes"] == 2
    assert "grpc.default_compression_level" not in defaults and "grpc.max_connection_age_ms" not in defaults
    assert "grpc.compression_enabled_algorithms_bitset" not in defaults  # grpc's default: every algorithm
    tuned = dict(
        server_options(
            GrpcOptions(infer_response_compression_level="high", max_connection_age_ms=5, reuse_port=True)
        )
    )
    assert tuned["grpc.default_compression_level"] == 3
    assert tuned["grpc.max_connection_age_ms"] == 5 and tuned["grpc.so_reuseport"] == 1
    # identity (bit 0) and gzip (bit 2): grpc refuses deflate requests, as the native core does
    gzip_only = dict(server_options(GrpcOptions(request_compression=frozenset({"gzip"}))))
    assert gzip_only["grpc.compression_enabled_algorithms_bitset"] == 0b101


def test_a_port_in_use_is_a_clear_error(grpc_server: InProcessServer) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        settings = ServerSettings(model_repositories=(EXAMPLES,), grpc_address="127.0.0.1", grpc_port=port)
        # Triton's words, which tools look for in its log
        with pytest.raises(
            Unavailable,
            match=f"^failed to start GRPC service: Unavailable - Socket '127.0.0.1:{port}' already in use",
        ):
            asyncio.run(start_grpc_server(grpc_server.engine, settings))


def test_tls_files_that_cannot_be_read_are_a_clear_error(grpc_server: InProcessServer) -> None:
    options = GrpcOptions(
        use_ssl=True, server_cert=EXAMPLES / "missing.crt", server_key=EXAMPLES / "missing.key"
    )
    settings = ServerSettings(
        model_repositories=(EXAMPLES,), grpc_address="127.0.0.1", grpc_port=0, grpc=options
    )
    with pytest.raises(Unavailable, match="gRPC TLS: cannot read .*missing"):
        asyncio.run(start_grpc_server(grpc_server.engine, settings))


def test_every_status_has_a_grpc_code() -> None:
    assert set(GRPC_STATUS) == set(Status)
    assert GRPC_STATUS[Status.UNSUPPORTED] == grpc.StatusCode.UNIMPLEMENTED
    assert GRPC_STATUS[Status.INVALID_ARG] == grpc.StatusCode.INVALID_ARGUMENT


def test_the_native_core_serves_by_default_unless_an_option_needs_grpc_aio() -> None:
    assert choose_core(GrpcOptions()) == ("native", NATIVE_WHY)
    assert choose_core(GrpcOptions(request_compression=frozenset({"gzip"})))[0] == "native"
    assert choose_core(GrpcOptions(core="aio")) == ("aio", "grpc.aio, as --grpc-core=aio asks")
    core, why = choose_core(GrpcOptions(use_ssl=True, infer_response_compression_level="low"))
    assert core == "aio" and why == "grpc.aio, since the native core lacks TLS and response compression"
    core, why = choose_core(GrpcOptions(max_connection_age_ms=10, request_compression=frozenset({"deflate"})))
    assert why == (
        "grpc.aio, since the native core lacks connection ageing (--grpc-max-connection-age) and "
        "deflate-compressed requests (--grpc-request-compression names deflate)"
    )
    with pytest.raises(Unavailable, match="--grpc-core=native cannot serve this endpoint: it lacks TLS"):
        choose_core(GrpcOptions(core="native", use_ssl=True))


def test_the_log_line_of_the_native_core_says_deflate_is_refused_and_how_to_serve_it() -> None:
    assert "refuses deflate-compressed requests with UNIMPLEMENTED" in NATIVE_WHY
    assert "--grpc-core=aio serves them" in NATIVE_WHY


def test_request_compressions_follow_the_core_unless_named() -> None:
    native_bits = dict(server_options(GrpcOptions(), "native"))
    assert native_bits["grpc.compression_enabled_algorithms_bitset"] == 0b101  # identity and gzip
    assert "grpc.compression_enabled_algorithms_bitset" not in dict(server_options(GrpcOptions(), "aio"))
    named = GrpcOptions(request_compression=frozenset({"deflate"}))
    assert dict(server_options(named, "aio"))["grpc.compression_enabled_algorithms_bitset"] == 0b011


def test_without_the_native_package_grpc_aio_serves(monkeypatch: pytest.MonkeyPatch) -> None:
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "pygrpc_native" else real_find_spec(name, *a),
    )
    assert choose_core(GrpcOptions()) == (
        "aio",
        "grpc.aio, since the pygrpc-native package is not installed on this platform",
    )
    with pytest.raises(Unavailable, match="publishes wheels for Linux x86_64 and macOS arm64 only"):
        choose_core(GrpcOptions(core="native"))


@pytest.mark.parametrize(("cpus", "threads"), [({0}, 1), ({0, 1}, 1), ({0, 1, 2}, 2), (set(range(16)), 2)])
def test_the_native_core_takes_one_io_thread_on_two_cpus_or_fewer(
    monkeypatch: pytest.MonkeyPatch, cpus: set[int], threads: int
) -> None:
    from nereid.frontends.grpc import native

    monkeypatch.setattr(native, "available_cpus", lambda: len(cpus))
    assert native.io_threads() == threads
    server = native.native_server(object())  # type: ignore[arg-type]
    assert server._io_threads == threads
