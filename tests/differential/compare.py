"""How the differential tests compare an answer of Triton's with Nereid's."""

from __future__ import annotations

from typing import Any

import numpy as np


def same_shape(triton: Any, nereid: Any, path: str, ignore: set[str], any_number: bool = False) -> None:
    """Same keys, same JSON types, same values (numbers compared as float32, or not at all)."""
    if isinstance(triton, dict):
        assert isinstance(nereid, dict), f"{path}: Triton has an object, Nereid {nereid!r}"
        keys_t = {k for k in triton if k not in ignore}
        keys_n = {k for k in nereid if k not in ignore}
        assert keys_t == keys_n, f"{path}: keys differ: Triton {sorted(keys_t)}, Nereid {sorted(keys_n)}"
        for key in keys_t:
            same_shape(triton[key], nereid[key], f"{path}.{key}", ignore, any_number)
    elif isinstance(triton, list):
        assert isinstance(nereid, list) and len(nereid) == len(triton), f"{path}: {triton!r} vs {nereid!r}"
        for i, (a, b) in enumerate(zip(triton, nereid, strict=False)):
            same_shape(a, b, f"{path}[{i}]", ignore, any_number)
    elif any_number and isinstance(triton, str) and isinstance(nereid, str) and triton.isdigit():
        assert nereid.isdigit(), (
            f"{path}: Triton {triton!r}, Nereid {nereid!r}"
        )  # a 64-bit integer in protobuf JSON
    elif isinstance(triton, bool) or isinstance(triton, str):
        assert triton == nereid, f"{path}: Triton {triton!r}, Nereid {nereid!r}"
    elif isinstance(triton, (int, float)):
        assert isinstance(nereid, (int, float)) and not isinstance(nereid, bool), f"{path}: {nereid!r}"
        assert any_number or np.float32(triton) == np.float32(nereid), (
            f"{path}: Triton {triton!r}, Nereid {nereid!r}"
        )
    else:
        assert triton == nereid, f"{path}: Triton {triton!r}, Nereid {nereid!r}"


def same_message(mode: str, triton: str, nereid: str) -> None:
    """Error texts: `exact` (the default), `prefix:TEXT`, `contains:TEXT` (in both) or `differs` on purpose."""
    if mode == "exact":
        assert nereid == triton
    elif mode.startswith("prefix:"):
        assert nereid.startswith(mode[len("prefix:") :]), nereid
    elif mode.startswith("contains:"):
        assert mode[len("contains:") :] in nereid, nereid
        assert mode[len("contains:") :] in triton, triton
    else:
        assert mode == "differs", f"unknown error mode {mode!r}"
        assert nereid, "an error needs a message"
