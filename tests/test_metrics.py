"""Statistics and metrics agree with each other and with the requests that were served."""

from __future__ import annotations

import asyncio
import re
import shutil
import threading
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from nereid.frontends.metrics import Family, MetricsExporter
from nereid.server import build_engine
from nereid.settings import MetricsConfig, ServerSettings
from nereid.types import InferRequest, InferTensor
from tests.conftest import EXAMPLES, free_port, start_nereid, stop


def _request(rows: int) -> InferRequest:
    a = np.arange(16 * rows, dtype=np.int32).reshape(rows, 16)
    tensors = [InferTensor("INPUT0", "INT32", a.shape, a), InferTensor("INPUT1", "INT32", a.shape, a)]
    return InferRequest("simple", "", tensors)


def _samples(text: str) -> dict[str, float]:
    return {
        f"{name}{{{labels}}}": float(value)
        for name, labels, value in re.findall(r"^(\w+)\{(.*)\} (\S+)$", text, re.M)
    }


def test_statistics_and_metrics_after_requests() -> None:
    engine = build_engine(ServerSettings(model_repositories=(EXAMPLES,)))
    try:
        for rows in (1, 1, 3):
            asyncio.run(engine.infer(_request(rows)))
        (stats,) = engine.statistics("simple")["model_stats"]
        assert stats["inference_count"] == 5 and stats["execution_count"] == 3
        assert stats["inference_stats"]["success"]["count"] == 3
        assert [b["batch_size"] for b in stats["batch_stats"]] == [1, 3]
        assert stats["batch_stats"][0]["compute_infer"]["count"] == 2
        assert stats["last_inference"] > 0
        text = MetricsExporter(engine).render().decode()
        samples = _samples(text)
        assert samples['nv_inference_count{model="simple",version="1"}'] == 5
        # no pinned memory pool, as on Triton without a GPU
        lines = text.splitlines()
        assert (
            "nv_pinned_memory_pool_total_bytes 0" in lines and "nv_pinned_memory_pool_used_bytes 0" in lines
        )
        assert samples['nv_inference_exec_count{model="simple",version="1"}'] == 3
        assert samples['nv_inference_request_success{model="simple",version="1"}'] == 3
        assert samples['nv_inference_request_failure{model="simple",reason="BACKEND",version="1"}'] == 0
        assert samples['nv_inference_pending_request_count{model="simple",version="1"}'] == 0
        duration_us = stats["inference_stats"]["success"]["ns"] // 1000
        assert samples['nv_inference_request_duration_us{model="simple",version="1"}'] == duration_us
    finally:
        engine.shutdown()


def test_summaries_replace_counters_when_configured() -> None:
    settings = ServerSettings(
        model_repositories=(EXAMPLES,),
        metrics_config=MetricsConfig(
            counter_latencies=False, summary_latencies=True, summary_quantiles=(0.5, 1.0)
        ),
    )
    engine = build_engine(settings)
    try:
        for rows in (1, 2, 3):
            asyncio.run(engine.infer(_request(rows)))
        (stats,) = engine.statistics("simple")["model_stats"]
        text = MetricsExporter(engine, config=settings.metrics_config).render().decode()
        samples = _samples(text)
        assert (
            "nv_inference_request_duration_us" not in text
            and "nv_inference_compute_infer_duration_us" not in text
        )
        assert samples['nv_inference_count{model="simple",version="1"}'] == 6  # counts stay
        assert "# TYPE nv_inference_compute_infer_summary_us summary" in text
        for family in ("request", "queue", "compute_input", "compute_infer", "compute_output"):
            assert samples[f'nv_inference_{family}_summary_us_count{{model="simple",version="1"}}'] == 3
        infer_sum = samples['nv_inference_compute_infer_summary_us_sum{model="simple",version="1"}']
        assert infer_sum == pytest.approx(stats["inference_stats"]["compute_infer"]["ns"] / 1000)
        median = samples['nv_inference_compute_infer_summary_us{model="simple",version="1",quantile="0.5"}']
        largest = samples['nv_inference_compute_infer_summary_us{model="simple",version="1",quantile="1.0"}']
        assert 0 < median <= largest <= infer_sum
    finally:
        engine.shutdown()


def test_a_cached_model_has_no_request_summary_as_in_triton() -> None:
    """Triton leaves the request-duration summary out for a model whose responses are cached, and keeps
    its other summaries."""
    from nereid.core.engine_client import ModelMetrics
    from nereid.statistics import ModelStatistics

    class Models:
        def model_metrics(self) -> list[ModelMetrics]:
            return [
                ModelMetrics("cached", "1", {}, 0, 0, ModelStatistics(summaries=True), response_cache=True),
                ModelMetrics("plain", "1", {}, 0, 0, ModelStatistics(summaries=True)),
            ]

    config = MetricsConfig(summary_latencies=True)
    text = MetricsExporter(Models(), cpu_metrics=False, config=config).render().decode()  # type: ignore[arg-type]
    samples = _samples(text)
    assert 'nv_inference_request_summary_us_count{model="plain",version="1"}' in samples
    assert 'nv_inference_request_summary_us_count{model="cached",version="1"}' not in samples
    assert 'nv_inference_queue_summary_us_count{model="cached",version="1"}' in samples

    class Cached(Models):
        def model_metrics(self) -> list[ModelMetrics]:
            return super().model_metrics()[:1]

    text = MetricsExporter(Cached(), cpu_metrics=False, config=config).render().decode()  # type: ignore[arg-type]
    assert "nv_inference_request_summary" not in text and "nv_inference_queue_summary_us" in text


def test_cache_summaries_for_the_models_whose_responses_are_cached() -> None:
    from nereid.core.engine_client import ModelMetrics
    from nereid.statistics import ModelStatistics

    cached = ModelStatistics(summaries=True)
    cached.record_cache_miss(3_000)
    cached.record_cache_hit(5_000, 0, 2_000)

    class Models:
        def model_metrics(self) -> list[ModelMetrics]:
            return [
                ModelMetrics("cached", "1", {}, 0, 0, cached, response_cache=True),
                ModelMetrics("plain", "1", {}, 0, 0, ModelStatistics(summaries=True)),
            ]

    config = MetricsConfig(summary_latencies=True, summary_quantiles=(0.5,))
    samples = _samples(MetricsExporter(Models(), cpu_metrics=False, config=config).render().decode())  # type: ignore[arg-type]
    assert samples['nv_cache_hit_summary_us_count{model="cached",version="1"}'] == 1
    assert samples['nv_cache_hit_summary_us{model="cached",version="1",quantile="0.5"}'] == 2.0
    assert samples['nv_cache_miss_summary_us_sum{model="cached",version="1"}'] == 3.0
    assert not any(key.startswith("nv_cache_") and 'model="plain"' in key for key in samples)
    plain = MetricsExporter(Models(), cpu_metrics=False, config=MetricsConfig()).render().decode()  # type: ignore[arg-type]
    assert "nv_cache_hit_summary_us" not in plain  # summaries off


def test_batch_size_and_queue_delay_histograms() -> None:
    engine = build_engine(ServerSettings(model_repositories=(EXAMPLES,)))
    try:
        for rows in (1, 1, 3):
            asyncio.run(engine.infer(_request(rows)))
        samples = _samples(MetricsExporter(engine).render().decode())
        label = 'model="simple",version="1"'
        buckets = {le: samples[f'nereid_inference_batch_size_bucket{{{label},le="{le}"}}'] for le in "1248"}
        assert buckets == {"1": 2, "2": 2, "4": 3, "8": 3}  # `simple` has max_batch_size 8
        assert samples[f'nereid_inference_batch_size_bucket{{{label},le="+Inf"}}'] == 3
        assert samples[f"nereid_inference_batch_size_sum{{{label}}}"] == 5
        assert samples[f"nereid_inference_batch_size_count{{{label}}}"] == 3
        assert samples[f"nereid_inference_queue_delay_us_count{{{label}}}"] == 3
        assert samples[f'nereid_inference_queue_delay_us_bucket{{{label},le="+Inf"}}'] == 3
        assert samples[f'nereid_inference_request_duration_us_bucket{{{label},le="+Inf"}}'] == 3
        assert samples[f'nereid_inference_request_duration_us_bucket{{{label},le="10000000"}}'] == 3
        assert samples[f'nereid_inference_request_duration_us_bucket{{{label},le="25"}}'] <= 3
        assert samples[f"nereid_inference_request_duration_us_count{{{label}}}"] == 3
    finally:
        engine.shutdown()


def test_family_text_format() -> None:
    family = Family("x_total_like", "help text", "counter", [({"model": 'a"b\\c'}, 2), ({}, 1.5)])
    assert family.render() == (
        '# HELP x_total_like help text\n# TYPE x_total_like counter\nx_total_like{model="a\\"b\\\\c"} 2\nx_total_like 1.5'
    )


def test_metrics_port_under_concurrent_clients(tmp_path: Path) -> None:
    metrics_port = free_port()
    server = start_nereid(
        EXAMPLES, tmp_path / "nereid.log", "--allow-metrics=true", f"--metrics-port={metrics_port}",
        "--metrics-address=127.0.0.1",
    )  # fmt: skip
    try:

        def client_loop() -> None:
            client = httpclient.InferenceServerClient(server.url.removeprefix("http://"))
            a = np.ones((1, 16), dtype=np.int32)
            inputs = [httpclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
            for tensor in inputs:
                tensor.set_data_from_numpy(a)
            for _ in range(25):
                client.infer("simple", inputs)
            client.close()

        threads = [threading.Thread(target=client_loop) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
        samples = _samples(text)
        assert samples['nv_inference_count{model="simple",version="1"}'] == 100
        assert "# TYPE nv_cpu_utilization gauge" in text and "nv_cpu_memory_total_bytes " in text
        client = httpclient.InferenceServerClient(server.url.removeprefix("http://"))
        stats = client.get_inference_statistics("simple")["model_stats"][0]
        client.close()
        assert stats["inference_count"] == 100 == stats["inference_stats"]["success"]["count"]
        with pytest.raises(urllib.error.HTTPError, match="404"):
            urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/nothing", timeout=10)
    finally:
        stop(server.process)


def test_first_response_histogram_only_when_histograms_are_on(tmp_path: Path) -> None:
    engine = build_engine(ServerSettings(model_repositories=(EXAMPLES,)))
    try:
        asyncio.run(engine.infer(_request(1)))
        assert "nv_inference_first_response_histogram_ms" not in MetricsExporter(engine).render().decode()
    finally:
        engine.shutdown()
    # a model's `model_metrics` may name the buckets, as in Triton
    shutil.copytree(EXAMPLES / "simple", tmp_path / "simple")
    config = tmp_path / "simple" / "config.pbtxt"
    config.write_text(
        config.read_text() + "\nmodel_metrics { metric_control [ { metric_identifier { family: "
        '"nv_inference_first_response_histogram_ms" } histogram_options { buckets: [ 10, 1, 60000 ] } } ] }\n'
    )
    settings = ServerSettings(
        model_repositories=(tmp_path,), metrics_config=MetricsConfig(histogram_latencies=True)
    )
    engine = build_engine(settings)
    try:
        for _ in range(2):
            asyncio.run(engine.infer(_request(1)))
        text = MetricsExporter(engine).render().decode()
        assert "# TYPE nv_inference_first_response_histogram_ms histogram" in text
        samples = _samples(text)
        label = 'model="simple",version="1"'
        assert samples[f"nv_inference_first_response_histogram_ms_count{{{label}}}"] == 2
        assert samples[f'nv_inference_first_response_histogram_ms_bucket{{{label},le="60000"}}'] == 2
        assert samples[f'nv_inference_first_response_histogram_ms_bucket{{{label},le="+Inf"}}'] == 2
        assert re.findall(r'first_response_histogram_ms_bucket\{[^}]*le="([^"]+)"', text) == [
            "1",
            "10",
            "60000",
            "+Inf",
        ]
        assert samples[f"nv_model_load_duration_secs{{{label}}}"] > 0
    finally:
        engine.shutdown()


def test_a_decoupled_model_counts_its_first_response_once(tmp_path: Path) -> None:
    (tmp_path / "repeat" / "1").mkdir(parents=True)
    (tmp_path / "repeat" / "config.pbtxt").write_text(
        'backend: "repeat"\nmax_batch_size: 0\nmodel_transaction_policy { decoupled: true }\n'
        'input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] },\n'
        '  { name: "DELAY" data_type: TYPE_UINT32 dims: [ -1 ] },\n'
        '  { name: "WAIT" data_type: TYPE_UINT32 dims: [ 1 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] },\n'
        '  { name: "IDX" data_type: TYPE_UINT32 dims: [ 1 ] } ]\n'
    )
    settings = ServerSettings(
        model_repositories=(tmp_path,), metrics_config=MetricsConfig(histogram_latencies=True)
    )
    engine = build_engine(settings)
    values = {"IN": ("INT32", [4, 5, 6]), "DELAY": ("UINT32", [0, 0, 0]), "WAIT": ("UINT32", [0])}
    tensors = [
        InferTensor(
            name, datatype, (len(data),), np.array(data, dtype=np.int32 if datatype == "INT32" else np.uint32)
        )
        for name, (datatype, data) in values.items()
    ]

    async def stream() -> int:
        return len([event async for event in engine.infer_stream(InferRequest("repeat", "", tensors))])

    try:
        assert asyncio.run(stream()) >= 3
        samples = _samples(MetricsExporter(engine).render().decode())
        assert samples['nv_inference_first_response_histogram_ms_count{model="repeat",version="1"}'] == 1
    finally:
        engine.shutdown()
