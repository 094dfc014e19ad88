"""Running several requests as one execution: concatenate along the batch dimension, split the outputs.

Backends whose framework takes one batched tensor per input (ONNX Runtime, PyTorch, ...) call
`execute_batched` from `execute`; the dynamic batcher decides which requests arrive together.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from nereid.backends.base import BackendRequest, BackendResult, Outputs
from nereid.errors import InternalError, NereidError


def execute_batched(
    requests: Sequence[BackendRequest], run: Callable[[BackendRequest], Outputs]
) -> list[BackendResult]:
    """One result per request, in order. Requests whose inputs have the same names, data types and
    shapes after the batch dimension run as one call of `run`; a failed call fails each of its requests."""
    if len(requests) == 1:
        return [_run_one(requests[0], run)]
    results: list[BackendResult | None] = [None] * len(requests)
    for group in _groups(requests):
        members = [requests[i] for i in group]
        if len(members) == 1:
            results[group[0]] = _run_one(members[0], run)
            continue
        for index, result in zip(group, _run_group(members, run), strict=True):
            results[index] = result
    return results  # type: ignore[return-value]  # every position is filled by its group


def _run_one(request: BackendRequest, run: Callable[[BackendRequest], Outputs]) -> BackendResult:
    try:
        return run(request)
    except NereidError as exc:
        return exc


def _key(request: BackendRequest) -> tuple:
    return tuple(sorted((name, a.dtype.str, a.shape[1:]) for name, a in request.inputs.items()))


def _groups(requests: Sequence[BackendRequest]) -> list[list[int]]:
    groups: dict[tuple, list[int]] = {}
    for index, request in enumerate(requests):
        groups.setdefault(_key(request), []).append(index)
    return list(groups.values())


def _run_group(
    requests: list[BackendRequest], run: Callable[[BackendRequest], Outputs]
) -> list[BackendResult]:
    rows = [next(iter(r.inputs.values())).shape[0] if r.inputs else 0 for r in requests]
    names = list(requests[0].inputs)
    inputs = {name: np.concatenate([r.inputs[name] for r in requests]) for name in names}
    wanted: dict[str, None] = {}
    for request in requests:
        wanted.update(dict.fromkeys(request.outputs))
    merged = BackendRequest(inputs, tuple(wanted), requests[0].id, requests[0].parameters)
    try:
        outputs = run(merged)
    except NereidError as exc:
        return [exc] * len(requests)
    total = sum(rows)
    for name, array in outputs.items():
        if array.ndim == 0 or array.shape[0] != total:
            error = InternalError(
                f"output '{name}' has shape {list(array.shape)}, but a batch of {total} needs {total} rows "
                "along its first dimension to be split among the requests"
            )
            return [error] * len(requests)
    results: list[BackendResult] = []
    start = 0
    for request, count in zip(requests, rows, strict=True):
        end = start + count
        results.append({name: outputs[name][start:end] for name in request.outputs if name in outputs})
        start = end
    return results
