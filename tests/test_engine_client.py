"""The EngineClient seam: frontends reach the engine only through it, and the Engine implements all of it."""

from __future__ import annotations

import inspect
import subprocess
import sys

from nereid.core.engine import Engine
from nereid.core.engine_client import EngineClient, ModelServices


def _nereid_modules_after(imports: str) -> list[str]:
    """The nereid modules a fresh interpreter holds after `import <imports>`."""
    code = (
        f"import sys, {imports}\nprint('\\n'.join(sorted(m for m in sys.modules if m.startswith('nereid'))))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    return result.stdout.split()


def test_frontends_import_nothing_of_the_core() -> None:
    core = (
        "nereid.core.engine.",
        "nereid.core.streaming",
        "nereid.core.admission",
        "nereid.repository",
        "nereid.backends",
        "nereid.scheduling",
        "nereid.core.request_checks",
    )
    loaded = _nereid_modules_after("nereid.frontends.http, nereid.frontends.grpc, nereid.frontends.metrics")
    assert "nereid.frontends.grpc.servicer" in loaded
    assert [m for m in loaded if (m + ".").startswith(core)] == []


def test_the_engine_client_imports_nothing_of_the_core() -> None:
    allowed = {
        "nereid",
        "nereid.core",
        "nereid.core.engine_client",
        "nereid.types",
        "nereid.errors",
        "nereid.shared_memory",
        "nereid.cuda_memory",  # shared memory's CUDA regions (CuPy is imported only when one is registered)
    }
    assert set(_nereid_modules_after("nereid.core.engine_client")) <= allowed


def test_the_engine_implements_every_method_with_the_same_parameters() -> None:
    for protocol in (EngineClient, ModelServices):
        names = [n for n, v in vars(protocol).items() if callable(v) and not n.startswith("_")]
        assert names
        for name in names:
            wanted = inspect.signature(getattr(protocol, name))
            given = inspect.signature(getattr(Engine, name))
            assert list(given.parameters) == list(wanted.parameters), name
            assert [p.default for p in given.parameters.values()] == [
                p.default for p in wanted.parameters.values()
            ], name
            assert inspect.iscoroutinefunction(getattr(Engine, name)) == inspect.iscoroutinefunction(
                getattr(protocol, name)
            ), name
