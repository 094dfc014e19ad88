"""The engine's typed answers as the JSON bodies Triton's HTTP/REST API sends."""

from __future__ import annotations

from typing import Any

from nereid.core.engine_client import (
    CudaSharedMemoryRegion,
    ModelMetadata,
    RepositoryIndexEntry,
    ServerMetadata,
    SystemSharedMemoryRegion,
    TensorMetadata,
)


def server_metadata_json(metadata: ServerMetadata) -> dict[str, Any]:
    return {"name": metadata.name, "version": metadata.version, "extensions": list(metadata.extensions)}


def model_metadata_json(metadata: ModelMetadata) -> dict[str, Any]:
    return {
        "name": metadata.name,
        "versions": list(metadata.versions),
        "platform": metadata.platform,
        "inputs": [_tensor_json(t) for t in metadata.inputs],
        "outputs": [_tensor_json(t) for t in metadata.outputs],
    }


def _tensor_json(tensor: TensorMetadata) -> dict[str, Any]:
    return {"name": tensor.name, "datatype": tensor.datatype, "shape": list(tensor.shape)}


def repository_index_json(entries: list[RepositoryIndexEntry]) -> list[dict[str, Any]]:
    """Rows as Triton writes them: a member only when it has a value (READY rows carry no reason)."""
    rows = []
    for entry in entries:
        row: dict[str, Any] = {"name": entry.name}
        if entry.version is not None:
            row["version"] = entry.version
        if entry.state is not None:
            row["state"] = entry.state
        if entry.reason is not None:
            row["reason"] = entry.reason
        rows.append(row)
    return rows


def system_regions_json(regions: list[SystemSharedMemoryRegion]) -> list[dict[str, Any]]:
    return [{"name": r.name, "key": r.key, "offset": r.offset, "byte_size": r.byte_size} for r in regions]


def cuda_regions_json(regions: list[CudaSharedMemoryRegion]) -> list[dict[str, Any]]:
    return [{"name": r.name, "device_id": r.device_id, "byte_size": r.byte_size} for r in regions]
