"""The GPU gauges' arithmetic and text, from NVML readings given by a stand-in for the library (a real
device's gauges are checked in tests/e2e/test_gpu.py on a CUDA host)."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest

from nereid.frontends.metrics import MetricsExporter
from nereid.gpu_metrics import GpuSampler
from nereid.server import build_engine
from nereid.settings import ServerSettings
from tests.conftest import EXAMPLES


class RecordedNvml:
    """Answers NVML's calls from a script of readings, one per sample; None where the device refuses."""

    class NVMLError(Exception):
        pass

    def __init__(self, energies_mj: list[int], power_limit_mw: int | None) -> None:
        self._energies = iter(energies_mj)
        self._power_limit = power_limit_mw

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        return SimpleNamespace(gpu=37, memory=5)

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any:
        return SimpleNamespace(total=80 * 1024**3 + 12345, used=3 * 1024**2 + 1, free=0)

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        return 71_500

    def nvmlDeviceGetPowerManagementLimit(self, handle: Any) -> int:
        if self._power_limit is None:
            raise self.NVMLError("Not Supported")
        return self._power_limit

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any) -> int:
        return next(self._energies)


def _samples(text: str) -> dict[str, str]:
    return {line.rsplit(" ", 1)[0]: line.rsplit(" ", 1)[1] for line in text.splitlines() if line[:1] != "#"}


def test_gauges_in_triton_units_and_energy_counted_from_the_start() -> None:
    sampler = GpuSampler(RecordedNvml([5_000_000, 5_002_500], 700_000), [("GPU-1234", object())])
    engine = build_engine(ServerSettings(model_repositories=(EXAMPLES,)))
    try:
        exporter = MetricsExporter(engine, gpu=sampler)
        sampler.sample()
        first = _samples(exporter.render().decode())
        assert first['nv_energy_consumption{gpu_uuid="GPU-1234"}'] == "0"
        sampler.sample()
        text = exporter.render().decode()
    finally:
        engine.shutdown()
    samples = _samples(text)
    label = '{gpu_uuid="GPU-1234"}'
    assert samples[f"nv_gpu_utilization{label}"] == "0.37"
    assert samples[f"nv_gpu_memory_total_bytes{label}"] == str(80 * 1024**3)  # whole MiB, as Triton's
    assert samples[f"nv_gpu_memory_used_bytes{label}"] == str(3 * 1024**2)
    assert samples[f"nv_gpu_power_usage{label}"] == "71.5"
    assert samples[f"nv_gpu_power_limit{label}"] == "700"
    assert samples[f"nv_energy_consumption{label}"] == "2.5"  # joules since the first sample
    assert "# TYPE nv_energy_consumption counter" in text and "# TYPE nv_gpu_utilization gauge" in text


def test_a_reading_the_device_refuses_reads_zero_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    sampler = GpuSampler(RecordedNvml([1, 1, 1], None), [("GPU-a", object())])
    with caplog.at_level(logging.WARNING, logger="nereid.gpu_metrics"):
        for _ in range(3):
            sampler.sample()
    (reading,) = sampler.readings
    assert reading.power_limit == 0 and reading.power_usage == 71.5
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings == ["Unable to get power limit for GPU GPU-a: Not Supported"]


def test_no_sampler_without_a_visible_gpu(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A host without GPUs gets no sampler and no warning: NVML is not even tried."""
    monkeypatch.setattr("nereid.gpu_metrics.pci_bus_ids", lambda: [])
    monkeypatch.setattr("nereid.gpu_metrics.importlib", None)  # any attempt to load NVML would fail here
    with caplog.at_level(logging.INFO, logger="nereid.gpu_metrics"):
        assert GpuSampler.open() is None
    assert caplog.records == []
