"""The chosen configs written as model folders that serve as they are.

Each searched model's folder is copied from the source repository (versions, model files, labels) with
its own config.pbtxt rewritten: its settings as the user wrote them, with the chosen ones applied (not
the server's auto-completed form, which would spell out every default). An ensemble's folder, and any
composing model that was not searched, is copied unchanged, so the output is a whole repository.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path

from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2 as mc

from nereid.analyze.space import Candidate, Space, apply_settings
from nereid.model_config.jsonform import config_from_json


def written_config(source: Path, settings: dict[str, object]) -> str:
    """The text of `source`'s config.pbtxt with `settings` applied."""
    config = text_format.Parse((source / "config.pbtxt").read_text(), mc.ModelConfig())
    data = json_format.MessageToDict(config, preserving_proto_field_name=True)
    data.setdefault("name", source.name)
    changed = config_from_json(apply_settings(data, settings))  # type: ignore[arg-type]
    return text_format.MessageToString(changed)


def write_repository(
    repository: Path, out: Path, space: Space, candidate: Candidate, models: Iterable[str]
) -> list[Path]:
    """`models` (the searched ones and those they need) in `out`, with `candidate`'s settings."""
    out.mkdir(parents=True, exist_ok=True)
    settings = space.settings(candidate)
    written = []
    for name in models:
        source, target = repository / name, out / name
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(source, target, symlinks=True)
        if name in settings:
            (target / "config.pbtxt").write_text(written_config(source, dict(settings[name])))
        written.append(target)
    return written


def write_configs(repository: Path, out: Path, space: Space, candidate: Candidate) -> None:
    """Only the config.pbtxt of each searched model (the runners-up, beside the report)."""
    for name, values in space.settings(candidate).items():
        (out / name).mkdir(parents=True, exist_ok=True)
        (out / name / "config.pbtxt").write_text(written_config(repository / name, dict(values)))
