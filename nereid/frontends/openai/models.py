"""Which models serve the OpenAI routes, by their convention, and `/v1/models`' entries for them."""

from __future__ import annotations

import time
from typing import Any

from nereid.core.engine_client import EngineClient
from nereid.frontends.openai.convention import ModelConvention, model_convention
from nereid.frontends.openai.errors import model_not_found

OWNED_BY = "nereid"


class ModelConventions:
    """Each ready model's convention, read from its configuration once per loaded version: a model reloaded
    with another configuration is read again. `created` is when this server first saw the model ready
    (Unix seconds), as the `/v1/models` entries give it."""

    def __init__(self, engine: EngineClient) -> None:
        self._engine = engine
        self._conventions: dict[str, tuple[object, ModelConvention]] = {}
        self._created: dict[str, tuple[object, int]] = {}

    def get(self, name: str) -> ModelConvention:
        """The convention of a ready model (NotFound and Unavailable raised as the engine raises them)."""
        engine = self._engine
        config = engine.model_config_message(name)
        cached = self._conventions.get(name)
        if cached is not None and cached[0] is config:
            return cached[1]
        convention = model_convention(
            engine.model_metadata(name), engine.model_config(name), engine.is_decoupled(name)
        )
        if len(self._conventions) > 4096:  # names come from clients: never without bound
            self._conventions.clear()
        self._conventions[name] = (config, convention)
        return convention

    def entry(self, name: str) -> dict[str, Any]:
        config = self._engine.model_config_message(name)
        created = self._created.get(name)
        if created is None or created[0] is not config:
            created = self._created[name] = (config, int(time.time()))
        return {"id": name, "object": "model", "created": created[1], "owned_by": OWNED_BY}

    def listed(self) -> list[dict[str, Any]]:
        """Every ready model that serves at least one route, by name."""
        entries = []
        for row in sorted({row.name for row in self._engine.repository_index(ready_only=True)}):
            try:
                convention = self.get(row)
            except Exception:  # unloaded since the index was read
                continue
            if convention.serves_text or convention.serves_embeddings:
                entries.append(self.entry(row))
        return entries

    def one(self, name: str) -> dict[str, Any]:
        try:
            convention = self.get(name)
        except Exception:
            raise model_not_found(name) from None
        if not (convention.serves_text or convention.serves_embeddings):
            raise model_not_found(name)
        return self.entry(name)
