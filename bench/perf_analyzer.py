"""NVIDIA perf_analyzer against Nereid's `simple` model (optionally also against the real Triton)."""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from _common import ROOT, apt_install, free_port, start, start_nereid, stop, wait_ready

sys.path.insert(0, str(ROOT))
from tests.differential.real_triton import triton_command  # noqa: E402

CACHE = Path.home() / ".cache" / "nereid-bench"
TWIN = ROOT / "tests" / "differential" / "triton_twins" / "simple"
WHEELS = (
    ("tritonclient==2.41.0", "manylinux1_x86_64"),
    ("nvidia-cuda-runtime-cu12==12.6.77", "manylinux2014_x86_64"),
)


def pip_download(requirement: str, platform: str, dest: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "--only-binary=:all:",
            "--platform",
            platform,
            "-d",
            str(dest),
            requirement,
        ],
        check=True,
    )


def install_perf_analyzer() -> tuple[Path, Path]:
    """(perf_analyzer binary, folder holding libcudart.so.12), installing them on first use."""
    home = Path(os.environ.get("NEREID_PERF_ANALYZER_HOME", CACHE / "perf-analyzer")).expanduser()
    binary, lib = home / "bin" / "perf_analyzer", home / "lib"
    if not binary.exists() or not (lib / "libcudart.so.12").exists():
        dl = home / "dl"
        for folder in (dl, binary.parent, lib):
            folder.mkdir(parents=True, exist_ok=True)
        for requirement, platform in WHEELS:
            pip_download(requirement, platform, dl)
        for wheel in dl.glob("*.whl"):
            with zipfile.ZipFile(wheel) as zf:
                for name in zf.namelist():
                    if name.endswith("data/bin/perf_analyzer"):
                        target = binary
                    elif Path(name).name.startswith("libcudart.so.12"):
                        target = lib / "libcudart.so.12"
                    else:
                        continue
                    with zf.open(name) as src, open(target, "wb") as dst:
                        shutil.copyfileobj(src, dst)
        binary.chmod(0o755)
    ldconfig = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    if "libb64.so.0d" not in ldconfig:
        apt_install("libb64-0d")
    return binary, lib


def start_triton(port: int, repository: Path, grpc_port: int | None = None) -> subprocess.Popen[bytes]:
    command, env = triton_command(repository, port, grpc_port)
    return start(command, "triton", env)


def measure(
    binary: Path, lib: Path, port: int, args: argparse.Namespace, protocol: str = "http"
) -> list[dict[str, str]]:
    """Run perf_analyzer on model `simple` at 127.0.0.1:port over `protocol`; one CSV row per concurrency."""
    target = ["-u", f"127.0.0.1:{port}", "-i", protocol]
    return measure_model(binary, lib, "simple", target, args.concurrency_range, args)


def measure_model(
    binary: Path,
    lib: Path,
    model: str,
    target: list[str],
    concurrency_range: str,
    args: argparse.Namespace,
    extra: tuple[str, ...] = (),
    attempts: int = 3,
    environment: dict[str, str] | None = None,
) -> list[dict[str, str]]:
    """perf_analyzer on `model` at `target` (its -u/-i flags), with `extra` flags and `environment` added
    to this process's; one CSV row per concurrency. Up to `attempts` runs when the measurement windows are
    not stable."""
    env = {**os.environ, **(environment or {})}
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(lib), env.get("LD_LIBRARY_PATH")) if p)
    with tempfile.TemporaryDirectory(prefix="nereid-bench-") as tmp:
        csv_path = Path(tmp) / "results.csv"
        proc = subprocess.run(
            [
                str(binary),
                "-m",
                model,
                *target,
                "--concurrency-range",
                concurrency_range,
                "--measurement-interval",
                str(args.interval_ms),
                "--max-trials",
                str(args.max_trials),
                "--stability-percentage",
                str(args.stability),
                "-f",
                str(csv_path),
                *extra,
            ],
            env=env,
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0 or not csv_path.exists():
            if "Failed to obtain stable measurement" in proc.stdout + proc.stderr and attempts > 1:
                # A busy shared host: the windows disagreed. Measure again rather than lose the whole run.
                print(f"perf_analyzer: no stable measurement at {concurrency_range}; again", file=sys.stderr)
                return measure_model(
                    binary, lib, model, target, concurrency_range, args, extra, attempts - 1, environment
                )
            raise RuntimeError(f"perf_analyzer failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
        with open(csv_path, newline="") as fh:
            return sorted(csv.DictReader(fh), key=lambda r: int(r["Concurrency"]))


def report(name: str, rows: list[dict[str, str]]) -> None:
    print(f"{name}:")
    print(f"  {'conc':>4} {'infer/s':>10} {'p50 ms':>8} {'p99 ms':>8}")
    for r in rows:
        print(
            f"  {r['Concurrency']:>4} {float(r['Inferences/Second']):>10.1f} "
            f"{int(r['p50 latency']) / 1000:>8.3f} {int(r['p99 latency']) / 1000:>8.3f}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--triton",
        action="store_true",
        help="also measure the real Triton serving a Python-backend twin of `simple`",
    )
    parser.add_argument("--concurrency-range", default="1:4:3", help="perf_analyzer start:end:step")
    parser.add_argument("--interval-ms", type=int, default=2000, help="measurement window")
    parser.add_argument("--max-trials", type=int, default=5, help="windows tried per concurrency")
    parser.add_argument(
        "--stability", type=int, default=100, help="perf_analyzer stability percent (high: 2 noisy cores)"
    )
    args = parser.parse_args()

    binary, lib = install_perf_analyzer()
    results: dict[str, list[dict[str, str]]] = {}
    server = None
    try:
        port = free_port()
        server = start_nereid(port)
        wait_ready(f"http://127.0.0.1:{port}/v2/health/ready", server)
        results["nereid (onnxruntime simple)"] = measure(binary, lib, port, args)
        stop(server)
        server = None
        if args.triton:
            with tempfile.TemporaryDirectory(prefix="nereid-bench-repo-") as repo:
                shutil.copytree(TWIN, Path(repo) / "simple")
                port = free_port()
                server = start_triton(port, Path(repo))
                wait_ready(f"http://127.0.0.1:{port}/v2/health/ready", server, timeout=120)
                results["triton 2.51 (python-backend twin)"] = measure(binary, lib, port, args)
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        stop(server)

    for name, rows in results.items():
        report(name, rows)
    if args.triton:
        (_, nrows), (_, trows) = results.items()
        print("ratio nereid/triton (infer/s):")
        for n, t in zip(nrows, trows, strict=True):
            ratio = float(n["Inferences/Second"]) / float(t["Inferences/Second"])
            print(f"  concurrency {n['Concurrency']}: {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
