from __future__ import annotations

from pathlib import Path

import pytest

from nereid.cli import parse_settings


def test_triton_flag_names_and_defaults() -> None:
    settings, warnings = parse_settings(["--model-repository=/a", "--model-store", "/b"])
    assert settings.model_repositories == (Path("/a"), Path("/b"))
    assert (settings.http_port, settings.grpc_port, settings.metrics_port) == (8000, 8001, 8002)
    assert settings.strict_readiness and settings.exit_on_error and settings.auto_complete_config
    assert settings.default_max_batch_size == 4 and settings.server_id == "triton"
    assert warnings == []


def test_values_in_triton_style() -> None:
    settings, _ = parse_settings(
        [
            "--model-repository=/a",
            "--allow-http=false",
            "--http-port",
            "9000",
            "--exit-on-error=0",
            "--strict-model-config=true",
            "--backend-config=default-max-batch-size=16",
            "--backend-config=onnxruntime,enable-global-threadpool=1",
            "--id=mine",
        ]
    )
    assert not settings.allow_http and settings.http_port == 9000 and not settings.exit_on_error
    assert not settings.auto_complete_config
    assert settings.default_max_batch_size == 16
    assert settings.backend_config["onnxruntime"] == {"enable-global-threadpool": "1"}
    assert settings.server_id == "mine"


def test_flags_of_later_versions_are_reported_not_ignored() -> None:
    _, warnings = parse_settings(["--model-repository=/a", "--log-file=x.log", "--allow-client-shm=true"])
    assert warnings == [
        "--allow-client-shm is not supported yet and has no effect",
        "--log-file is not supported yet and has no effect",
    ]


@pytest.mark.parametrize(
    "argv",
    [
        ["--model-repository=/a", "--model-control-mode=explicit"],
        ["--model-repository=/a", "--load-model=simple"],
        ["--model-repository=/a", "--backend-config=novalue"],
        ["--model-repository=/a", "--allow-http=maybe"],
    ],
)
def test_unsupported_or_malformed_flags_stop_the_server(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        parse_settings(argv)
