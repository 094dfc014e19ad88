"""System shared memory on the real Triton and on Nereid: registration, status, inputs read from and
outputs written into regions, and the refusals. Steps share registered regions, so they run in order."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.utils.shared_memory as shm

from tests.differential.test_differential import HERE, _send, compare, server_pair

pytestmark = pytest.mark.differential

SIZES = {"in0": 128, "out0": 128, "small": 16}


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    with server_pair(tmp_path_factory.mktemp("shm")) as pair:
        yield pair.triton_http, pair.nereid_http


@pytest.fixture(scope="module")
def regions() -> Iterator[tuple[str, dict[str, Any]]]:
    """Client-side regions with a unique key prefix; `in0` holds INPUT0 = 0..15 then INPUT1 = ones."""
    prefix = f"nereid_diff_{uuid.uuid4().hex[:6]}_"
    handles = {
        name: shm.create_shared_memory_region(name, f"/{prefix}{name}", size) for name, size in SIZES.items()
    }
    shm.set_shared_memory_region(handles["in0"], [np.arange(16, dtype=np.int32), np.ones(16, dtype=np.int32)])
    try:
        yield prefix, handles
    finally:
        for handle in handles.values():
            shm.destroy_shared_memory_region(handle)


def _with_keys(step: dict[str, Any], prefix: str) -> dict[str, Any]:
    return json.loads(json.dumps(step).replace("/KEY_", f"/{prefix}"))


def test_shared_memory_steps(servers: tuple[str, str], regions: tuple[str, dict[str, Any]]) -> None:
    prefix, handles = regions
    triton_url, nereid_url = servers
    mismatches = []
    for step in json.loads((HERE / "shm_cases.json").read_text()):
        case = _with_keys(step, prefix)
        try:
            if "region" in case:  # compare what each server wrote into the output region
                handle = handles[case["region"]]
                shm.set_shared_memory_region(handle, [np.zeros(SIZES[case["region"]], np.uint8)])
                status, _, _ = _send(triton_url, case)
                written_by_triton = shm.get_contents_as_numpy(handle, np.int32, [32]).copy()
                shm.set_shared_memory_region(handle, [np.zeros(SIZES[case["region"]], np.uint8)])
                assert status == 200
            compare(triton_url, nereid_url, case)
            if "region" in case:
                written_by_nereid = shm.get_contents_as_numpy(handle, np.int32, [32])
                assert (written_by_nereid == written_by_triton).all(), "output regions differ"
        except AssertionError as exc:
            mismatches.append(f"{step['name']}: {str(exc).splitlines()[0]}")
    assert not mismatches, "\n".join(mismatches)
