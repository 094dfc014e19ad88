"""Names NumPy 2 removed, given back to model code written for NumPy 1.

Many model.py files (Triton's own test models among them) use `np.NINF`, `np.NaN`, `np.float_` and the
like. Triton's Python backend runs them with whatever NumPy the environment has, so under NumPy 2 they
fail with an AttributeError at the first request. The worker restores the removed aliases (each bound
to what NumPy's migration guide names as its replacement) before it imports model.py. Nothing that
NumPy 2 still defines is touched, and the server process itself never sees them.
"""

from __future__ import annotations

import math
from typing import Any


def numpy1_aliases(np: Any) -> dict[str, Any]:
    """The removed names and their NumPy 2 equivalents."""
    return {
        "NINF": -math.inf,
        "PINF": math.inf,
        "NaN": math.nan,
        "NAN": math.nan,
        "Inf": math.inf,
        "Infinity": math.inf,
        "infty": math.inf,
        "NZERO": -0.0,
        "PZERO": 0.0,
        "float_": np.float64,
        "complex_": np.complex128,
        "cfloat": np.complex128,
        "singlecomplex": np.complex64,
        "longfloat": np.longdouble,
        "clongfloat": np.clongdouble,
        "longcomplex": np.clongdouble,
        "string_": np.bytes_,
        "unicode_": np.str_,
        "round_": np.round,
        "product": np.prod,
        "cumproduct": np.cumprod,
        "sometrue": np.any,
        "alltrue": np.all,
    }


def restore_numpy1_aliases() -> list[str]:
    """Define the aliases NumPy lacks (none under NumPy 1); the names defined."""
    try:
        import numpy as np
    except ImportError:  # an environment without NumPy: nothing to restore
        return []
    added = []
    for name, value in numpy1_aliases(np).items():
        if not hasattr(np, name):
            setattr(np, name, value)
            added.append(name)
    return added
