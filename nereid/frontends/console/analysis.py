"""The latest `nereid analyze` summary written into a repository this server serves (local ones only)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

# Written by nereid analyze into its output repository, beside the model folders (which it ignores).
SUMMARY_FILE = "nereid_analysis.json"


def latest_analysis(repositories: Iterable[Path | str]) -> bytes | None:
    """The newest summary's JSON, or None where no repository has one. A repository named by a URL (object
    storage) is no folder to look in."""
    found = [
        path
        for repository in repositories
        if "://" not in str(repository)
        for path in [Path(repository) / SUMMARY_FILE]
        if path.is_file()
    ]
    if not found:
        return None
    return max(found, key=lambda p: p.stat().st_mtime).read_bytes()
