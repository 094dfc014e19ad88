"""Frontends translate between a wire protocol and the engine; they hold no model logic."""
