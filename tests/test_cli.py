from __future__ import annotations

from pathlib import Path

import pytest

from nereid.cli import parse_settings
from nereid.settings import ResourceLimit


def test_triton_flag_names_and_defaults() -> None:
    settings, warnings = parse_settings(["--model-repository=/a", "--model-store", "/b"])
    assert settings.model_repositories == (Path("/a"), Path("/b"))
    assert (settings.http_port, settings.grpc_port, settings.metrics_port) == (8000, 8001, 8002)
    assert settings.strict_readiness and settings.exit_on_error and settings.auto_complete_config
    assert settings.default_max_batch_size == 4 and settings.server_id == "triton"
    assert not settings.reuse_http_port
    assert not settings.allow_client_shm  # off by default, as in current Triton
    assert settings.allow_gpu_metrics and settings.allow_cpu_metrics
    assert settings.backend_directory is None
    assert warnings == []


def test_values_in_triton_style() -> None:
    settings, _ = parse_settings(
        [
            "--model-repository=/a",
            "--allow-http=false",
            "--http-port",
            "9000",
            "--reuse-http-port=true",
            "--exit-on-error=0",
            "--strict-model-config=true",
            "--backend-config=default-max-batch-size=16",
            "--backend-config=onnxruntime,enable-global-threadpool=1",
            "--id=mine",
            "--allow-client-shm=true",
            "--allow-gpu-metrics=false",
            "--backend-directory",
            "/opt/backends",
        ]
    )
    assert settings.allow_client_shm and settings.backend_directory == Path("/opt/backends")
    assert not settings.allow_gpu_metrics
    assert not settings.allow_http and settings.http_port == 9000 and not settings.exit_on_error
    assert settings.reuse_http_port
    assert not settings.auto_complete_config
    assert settings.default_max_batch_size == 16
    assert settings.backend_config["onnxruntime"] == {"enable-global-threadpool": "1"}
    assert settings.server_id == "mine"


def test_flags_of_later_versions_are_reported_not_ignored() -> None:
    _, warnings = parse_settings(["--model-repository=/a", "--host-policy=x", "--rate-limit-resource=R:1"])
    assert warnings == [
        "--host-policy is not supported yet and has no effect",
        "--rate-limit-resource has no effect unless --rate-limit=execution_count",
    ]


def test_rate_limit_flags() -> None:
    settings, _ = parse_settings(
        ["--model-repository=/a", "--rate-limit=execution_count", "--rate-limit-resource=R1:10:1"]
    )
    assert settings.rate_limit and settings.rate_limit_resources == (ResourceLimit("R1", 10, 1),)
    with pytest.raises(SystemExit, match="expected <name>:<count>"):
        parse_settings(["--model-repository=/a", "--rate-limit-resource=R1"])


def test_cache_flags_refused_with_tritons_texts(monkeypatch: pytest.MonkeyPatch) -> None:
    repo = "--model-repository=/a"
    settings, _ = parse_settings([repo, "--response-cache-byte-size=8192"])
    assert settings.response_cache is not None and settings.response_cache.size == 8192
    with pytest.raises(SystemExit, match="Incompatible flags --response-cache-byte-size and --cache-config"):
        parse_settings([repo, "--response-cache-byte-size=1", "--cache-config=local,size=2"])
    with pytest.raises(SystemExit, match="found multiple cache configurations"):
        parse_settings([repo, "--cache-config=local,size=2", "--cache-config=redis,key=value"])
    with pytest.raises(SystemExit, match="Must at a minimum specify 'host' and 'port'"):
        parse_settings([repo, "--cache-config=redis,port=6379"])
    # a port that is no number is 0 (C's atoi, as in Triton): the start then fails to connect
    settings, _ = parse_settings(
        [repo, "--cache-config=redis,host=h", "--cache-config=redis,port=nonexistent"]
    )
    assert settings.response_cache is not None and settings.response_cache.port == 0
    # credentials from Triton's environment variables, unless the flags give them
    monkeypatch.setenv("TRITONCACHE_REDIS_USERNAME", "default")
    monkeypatch.setenv("TRITONCACHE_REDIS_PASSWORD", "from-env")
    redis = [repo, "--cache-config=redis,host=h", "--cache-config=redis,port=1"]
    settings, _ = parse_settings(redis)
    assert settings.response_cache is not None
    assert (settings.response_cache.user, settings.response_cache.password) == ("default", "from-env")
    settings, _ = parse_settings([*redis, "--cache-config=redis,password=flag"])
    assert settings.response_cache is not None and settings.response_cache.password == "flag"


@pytest.mark.parametrize(
    "argv",
    [
        ["--model-repository=/a", "--model-control-mode=sometimes"],
        ["--model-repository=/a", "--model-control-mode=explicit", "--load-model=*", "--load-model=a"],
        ["--model-repository=/a", "--http-restricted-api=nonsense:key=value"],
        ["--model-repository=/a", "--http-restricted-api=model-repository"],
        ["--model-repository=/a", "--grpc-restricted-protocol=openai:key=value"],
        ["--model-repository=/a", "--backend-config=novalue"],
        ["--model-repository=/a", "--allow-http=maybe"],
        ["--model-repository=/a", "--grpc-use-ssl=true", "--grpc-server-cert=c.pem"],
        [
            "--model-repository=/a",
            "--grpc-use-ssl-mutual=true",
            "--grpc-server-cert=c",
            "--grpc-server-key=k",
        ],
        ["--model-repository=/a", "--grpc-infer-response-compression-level=max"],
        ["--model-repository=/a", "--grpc-request-compression=gzip,br"],
        ["--model-repository=/a", "--grpc-request-compression="],
        ["--model-repository=/a", "--metrics-config=summary_latencies=maybe"],
        ["--model-repository=/a", "--metrics-config=summary_quantiles=0.5:0.05,1.5:0.01"],
        ["--model-repository=/a", "--metrics-config=summary_quantiles=x:0.01"],
        ["--model-repository=/a", "--metrics-config=summary_latencies"],
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


def test_openai_flags() -> None:
    settings, _ = parse_settings(["--model-repository=/a", "--http-restricted-api=openai,health:k=v"])
    assert settings.allow_openai and settings.openai_port is None
    assert settings.http_restricted_api[0].groups == {"openai", "health"}
    settings, _ = parse_settings(["--model-repository=/a", "--openai-port=9000", "--allow-openai=false"])
    assert settings.openai_port == 9000 and not settings.allow_openai


def test_model_namespacing_flag() -> None:
    settings, warnings = parse_settings(["--model-repository=/a", "--model-namespacing=true"])
    assert settings.model_namespacing and not warnings
    settings, _ = parse_settings(["--model-repository=/a"])
    assert not settings.model_namespacing


@pytest.mark.parametrize(("given", "mode"), [("POLL", "poll"), ("Explicit", "explicit"), ("NONE", "none")])
def test_the_model_control_mode_is_taken_in_any_case(given: str, mode: str) -> None:
    settings, _ = parse_settings(["--model-repository=/a", f"--model-control-mode={given}"])
    assert settings.model_control_mode == mode


def test_grpc_flags() -> None:
    settings, warnings = parse_settings(
        [
            "--model-repository=/a",
            "--grpc-port=9001",
            "--grpc-address=127.0.0.1",
            "--grpc-use-ssl-mutual=true",
            "--grpc-server-cert=server.crt",
            "--grpc-server-key=server.key",
            "--grpc-root-cert=ca.crt",
            "--grpc-infer-response-compression-level=low",
            "--grpc-keepalive-time=1000",
            "--grpc-keepalive-permit-without-calls=true",
            "--grpc-max-connection-age=60000",
            "--reuse-grpc-port=1",
            "--grpc-infer-allocation-pool-size=8",
            "--grpc-request-compression= GZIP",
        ]
    )
    assert not settings.reuse_http_port  # each port has its own flag
    assert (settings.grpc_port, settings.grpc_address, settings.allow_grpc) == (9001, "127.0.0.1", True)
    options = settings.grpc
    assert options.use_ssl and options.use_ssl_mutual  # mutual TLS is TLS too
    assert (options.server_cert, options.server_key, options.root_cert) == (
        Path("server.crt"),
        Path("server.key"),
        Path("ca.crt"),
    )
    assert options.infer_response_compression_level == "low"
    assert (options.keepalive_time_ms, options.keepalive_timeout_ms) == (1000, 20_000)
    assert options.keepalive_permit_without_calls and options.reuse_port
    assert (options.max_connection_age_ms, options.max_connection_age_grace_ms) == (60000, None)
    assert options.request_compression == {"gzip"}
    # tritonserver takes both compressions a client may send
    assert parse_settings(["--model-repository=/a"])[0].grpc.request_compression == {"gzip", "deflate"}
    assert warnings == [
        "--grpc-infer-allocation-pool-size has no effect: sizes a memory pool of Triton's that Nereid does "
        "not have"
    ]


def test_metrics_config() -> None:
    settings, warnings = parse_settings(["--model-repository=/a"])
    assert settings.metrics_config.counter_latencies and not settings.metrics_config.summary_latencies
    assert settings.metrics_config.summary_quantiles == (0.5, 0.9, 0.95, 0.99)
    settings, warnings = parse_settings(
        [
            "--model-repository=/a",
            "--metrics-config=summary_latencies=true",
            "--metrics-config=counter_latencies=false",
            "--metrics-config=summary_quantiles=0.5:0.05,0.999:0.0001",
            "--metrics-config=histogram_latencies=true",
            "--metrics-config=gauge_latencies=true",
        ]
    )
    config = settings.metrics_config
    assert config.summary_latencies and not config.counter_latencies and config.histogram_latencies
    assert config.summary_quantiles == (0.5, 0.999)
    # each number is read from its start, as tritonserver reads it: an error of `0.0.1` is taken
    settings, _ = parse_settings(
        ["--model-repository=/a", "--metrics-config=summary_quantiles=0.1:0.0.1,0.7:0.01,0.75:0.01"]
    )
    assert settings.metrics_config.summary_quantiles == (0.1, 0.7, 0.75)
    assert warnings == ["--metrics-config gauge_latencies is not a setting Nereid acts on; it has no effect"]


def test_every_triton_flag_is_accepted_and_those_without_effect_are_named() -> None:
    _, warnings = parse_settings(
        [
            "--model-repository=/a",
            "--allow-sagemaker=false",
            "--allow-vertex-ai=false",
            "--model-load-gpu-limit=0:0.5",
            "--repoagent-directory=/r",
            "--cache-directory=/c",
            "--enable-peer-access=true",
        ]
    )
    assert warnings == [
        "--repoagent-directory is not supported yet and has no effect",
        "--cache-directory is not supported yet and has no effect",
        "--model-load-gpu-limit has no effect: Nereid does not track GPU memory per device",
        "--enable-peer-access has no effect: Nereid does not manage CUDA peer access",
    ]


def test_model_load_gpu_limit_is_checked_even_given_as_a_separate_value() -> None:
    base = ["--model-repository=/a", "--model-load-gpu-limit"]
    with pytest.raises(SystemExit, match=r"expects device ID >= 0, got -1$"):
        parse_settings([*base, "-1:0.6"])
    with pytest.raises(SystemExit, match=r"expects limit fraction to be in range \[0.0, 1.0\], got -0.4$"):
        parse_settings([*base, "0:-0.4"])
    with pytest.raises(SystemExit, match="expects <device ID>:<fraction>"):
        parse_settings([*base, "half"])
    settings, _ = parse_settings([*base, "0:0.6", "--exit-timeout-secs", "5"])
    assert settings.exit_timeout_secs == 5


def test_help_describes_every_flag_with_its_default() -> None:
    from nereid.cli import build_parser

    parser = build_parser()
    assert all(action.help for action in parser._actions), [
        a.option_strings for a in parser._actions if not a.help
    ]
    text = parser.format_help()
    assert "(default: 8000)" in text and "(default: 30)" in text
    assert "accepted, no effect: Nereid has no SageMaker endpoint" in text


def test_a_misspelled_flag_is_named_with_the_closest_one(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_settings(["--model-repositry=/a"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.strip() == (
        "nereid: unknown flag --model-repositry; did you mean --model-repository? (nereid --help lists every flag)"
    )


def test_a_repository_given_twice_is_one_repository() -> None:
    settings, _ = parse_settings(
        ["--model-repository=/a", "--model-repository=/b", "--model-repository", "/a"]
    )
    assert settings.model_repositories == (Path("/a"), Path("/b"))


@pytest.mark.parametrize("count", ["-1", "0", "1", "129", "two"])
def test_grpc_infer_thread_count_outside_tritons_range_stops_the_start(count: str) -> None:
    with pytest.raises(SystemExit, match="--grpc_infer_thread_count. Must be in the range 2 to 128"):
        parse_settings(["--model-repository=/m", f"--grpc-infer-thread-count={count}"])


def test_grpc_infer_thread_count_in_range_is_accepted_without_effect() -> None:
    _, warnings = parse_settings(["--model-repository=/m", "--grpc-infer-thread-count=128"])
    assert any(w.startswith("--grpc-infer-thread-count has no effect") for w in warnings)
