"""The GPU gauges Triton serves (utilization, memory, power, energy), read through NVML (nvidia-ml-py, in
the `cuda` extras) for the CUDA devices this process sees, labelled with each device's UUID."""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass
from typing import Any

from nereid.gpus import pci_bus_ids

log = logging.getLogger(__name__)

MIB = 1024 * 1024


@dataclass(frozen=True)
class GpuReading:
    uuid: str
    utilization: float = 0.0  # 0.0 to 1.0
    memory_total: int = 0  # bytes, in whole MiB as Triton reports them
    memory_used: int = 0
    power_usage: float = 0.0  # watts
    power_limit: float = 0.0
    energy: float = 0.0  # joules since the server started


class GpuSampler:
    """Reads each device once per --metrics-interval-ms. A reading NVML refuses (a field the device does
    not support) reads 0, with one warning per device and field, as Triton leaves such a gauge at 0."""

    def __init__(self, nvml: Any, handles: list[tuple[str, Any]]) -> None:
        self._nvml = nvml
        self._handles = handles  # (uuid, NVML handle), in CUDA's order
        self._first_energy: dict[str, int] = {}
        self._warned: set[tuple[str, str]] = set()
        self.readings = [GpuReading(uuid) for uuid, _ in handles]

    @classmethod
    def open(cls) -> GpuSampler | None:
        """A sampler for the visible devices; None on a host without any, or without NVML (a warning)."""
        bus_ids = pci_bus_ids()
        if not bus_ids:
            return None
        try:
            nvml = importlib.import_module("pynvml")
            nvml.nvmlInit()
            handles = []
            for bus_id in bus_ids:
                handle = nvml.nvmlDeviceGetHandleByPciBusId(bus_id)
                handles.append((nvml.nvmlDeviceGetUUID(handle), handle))
        except ImportError:
            log.warning(
                "GPU metrics will not be available: they need nvidia-ml-py (pip install 'nereid[cuda]')"
            )
            return None
        except Exception as exc:  # NVMLError: no NVML library, or the driver refused
            log.warning("GPU metrics will not be available: NVML: %s", exc)
            return None
        for index, (uuid, _) in enumerate(handles):
            log.info("Collecting metrics for GPU %d: %s", index, uuid)
        return cls(nvml, handles)

    def sample(self) -> None:
        self.readings = [self._read(uuid, handle) for uuid, handle in self._handles]

    def _read(self, uuid: str, handle: Any) -> GpuReading:
        nvml = self._nvml
        utilization = self._field(uuid, "utilization", lambda: nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
        memory = self._field(uuid, "memory usage", lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
        power_usage = self._field(uuid, "power usage", lambda: nvml.nvmlDeviceGetPowerUsage(handle))
        power_limit = self._field(uuid, "power limit", lambda: nvml.nvmlDeviceGetPowerManagementLimit(handle))
        energy = self._field(
            uuid, "energy consumption", lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        )
        return GpuReading(
            uuid,
            utilization=(utilization or 0) * 0.01,
            memory_total=memory.total // MIB * MIB if memory is not None else 0,
            memory_used=memory.used // MIB * MIB if memory is not None else 0,
            power_usage=(power_usage or 0) / 1000,  # NVML answers in milliwatts and millijoules
            power_limit=(power_limit or 0) / 1000,
            energy=(energy - self._first_energy.setdefault(uuid, energy)) / 1000
            if energy is not None
            else 0.0,
        )

    def _field(self, uuid: str, what: str, read: Any) -> Any:
        try:
            return read()
        except Exception as exc:  # NVMLError, for a field this device or driver does not give
            if (uuid, what) not in self._warned:
                self._warned.add((uuid, what))
                log.warning("Unable to get %s for GPU %s: %s", what, uuid, exc)
            return None
