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
    _, warnings = parse_settings(["--model-repository=/a", "--log-file=x.log", "--rate-limit=off"])
    assert warnings == [
        "--log-file is not supported yet and has no effect",
        "--rate-limit is not supported yet and has no effect",
    ]


@pytest.mark.parametrize(
    "argv",
    [
        ["--model-repository=/a", "--model-control-mode=sometimes"],
        ["--model-repository=/a", "--model-control-mode=explicit", "--load-model=*", "--load-model=a"],
        ["--model-repository=/a", "--http-restricted-api=nonsense:key=value"],
        ["--model-repository=/a", "--http-restricted-api=model-repository"],
        ["--model-repository=/a", "--backend-config=novalue"],
        ["--model-repository=/a", "--allow-http=maybe"],
    ],
)
def test_unsupported_or_malformed_flags_stop_the_server(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        parse_settings(argv)


def test_model_control_flags() -> None:
    settings, warnings = parse_settings(
        [
            "--model-repository=/a",
            "--model-control-mode=explicit",
            "--load-model=x",
            "--load-model=y",
            "--repository-poll-secs=3",
            "--http-restricted-api=model-repository,statistics:Admin-Key=s3cret",
        ]
    )
    assert settings.model_control_mode == "explicit" and settings.load_models == ("x", "y")
    assert settings.repository_poll_secs == 3 and not warnings
    (rule,) = settings.http_restricted_api
    assert rule.groups == {"model-repository", "statistics"} and (rule.header, rule.value) == (
        "admin-key",
        "s3cret",
    )
    _, warnings = parse_settings(["--model-repository=/a", "--load-model=x"])
    assert warnings == ["--load-model has no effect unless --model-control-mode=explicit"]
