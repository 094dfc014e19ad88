"""Install (once, into a cached venv) and start NVIDIA's real Triton server from the nvidia-pytriton wheel.

Used by the differential tests and by the benchmarks. Only Triton's Python backend is available in that
build, so comparisons serve Python-backend twins of the models.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

CACHE = Path(os.environ.get("NEREID_CACHE", Path.home() / ".cache" / "nereid-bench"))
PYTRITON = "nvidia-pytriton==0.7.0"


def install_triton() -> tuple[list[str], dict[str, str]]:
    """(tritonserver command prefix, environment) from nvidia-pytriton in a cached venv."""
    venv = Path(os.environ.get("NEREID_TRITON_VENV", CACHE / "triton-venv")).expanduser()
    python = venv / "bin" / "python"
    probe = [str(python), "-c", "import pytriton, numpy"]
    if not python.exists() or subprocess.run(probe, capture_output=True).returncode != 0:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", PYTRITON, "numpy"], check=True)
    info = subprocess.run(
        [
            str(python),
            "-c",
            "import site, sys, sysconfig; "
            "print(site.getsitepackages()[0]); print(sysconfig.get_config_var('LIBDIR')); "
            "print(f'{sys.version_info[0]}.{sys.version_info[1]}')",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    site, libdir, pyver = Path(info[0]), info[1], info[2]
    server = site / "pytriton" / "tritonserver"
    stub = server / "backends" / "python" / "triton_python_backend_stub"
    if not stub.exists():  # the Python backend looks for its stub beside libtriton_python.so
        shutil.copy2(server / "python_backend_stubs" / pyver / "triton_python_backend_stub", stub)
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        p for p in (str(site / "nvidia_pytriton.libs"), libdir, env.get("LD_LIBRARY_PATH")) if p
    )
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(site)
    return [str(server / "bin" / "tritonserver"), f"--backend-directory={server / 'backends'}"], env


def triton_command(
    repository: Path, http_port: int, grpc_port: int | None = None
) -> tuple[list[str], dict[str, str]]:
    """tritonserver on 127.0.0.1: HTTP on `http_port`, gRPC on `grpc_port` when given, no metrics."""
    command, env = install_triton()
    grpc = ["--grpc-address=127.0.0.1", f"--grpc-port={grpc_port}"] if grpc_port else ["--allow-grpc=false"]
    return [
        *command,
        f"--model-repository={repository}",
        "--http-address=127.0.0.1",
        f"--http-port={http_port}",
        *grpc,
        "--allow-metrics=false",
    ], env


def triton_cache_flag() -> str:
    """--cache-directory for the pytriton build: its `local` response cache lives beside its backends, not in
    Triton's default /opt/tritonserver/caches (the build has no `redis` cache)."""
    command, _ = install_triton()
    return f"--cache-directory={Path(command[0]).parent.parent / 'caches'}"
