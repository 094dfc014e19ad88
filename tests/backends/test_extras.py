"""A model whose framework is not installed fails to load naming the extra that provides it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from nereid import backends
from nereid.errors import Unsupported
from tests.backends.serving import failure, model_dir, serving


@pytest.mark.parametrize(
    ("backend", "framework", "extra"),
    [
        ("pytorch", "torch", "torch"),
        ("tensorflow", "tensorflow", "tensorflow"),
        ("openvino", "openvino", "openvino"),
        ("tensorrt", "tensorrt", "tensorrt"),
    ],
)
def test_a_missing_framework_names_its_extra(
    monkeypatch: pytest.MonkeyPatch, backend: str, framework: str, extra: str
) -> None:
    monkeypatch.setitem(sys.modules, framework, None)  # importing it now fails, as when not installed
    monkeypatch.delitem(sys.modules, f"nereid.backends.{backend}", raising=False)
    monkeypatch.setattr(backends, "_loaded", {})
    with pytest.raises(Unsupported) as raised:
        backends.get_backend(backend)
    assert raised.value.message == (
        f"backend '{backend}' needs a package that is not installed ({framework}): pip install 'nereid[{extra}]'"
    )


def test_tree_libraries_are_needed_only_by_the_models_that_use_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "lightgbm", None)
    config = (
        'backend: "fil"\n'
        'parameters { key: "model_type" value: { string_value: "lightgbm" } }\n'
        'parameters { key: "output_class" value: { string_value: "false" } }\n'
    )
    (model_dir(tmp_path, "trees", config) / "model.txt").write_text("tree\n")
    with serving(tmp_path) as engine:
        assert (
            "model_type 'lightgbm' needs a package that is not installed (lightgbm): pip install 'nereid[trees]'"
            in (failure(engine, "trees"))
        )
