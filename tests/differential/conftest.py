"""The pair of servers every differential test talks to: the real Triton and Nereid on the same models."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx
import pytest
from onnx import TensorProto, helper

from tests.conftest import EXAMPLES, free_ports, start_nereid, stop, wait_ready
from tests.differential.real_triton import triton_command

HERE = Path(__file__).parent


@dataclass(frozen=True)
class Servers:
    """host:port of each endpoint; the gRPC ones are empty when the pair serves no gRPC."""

    triton_http: str
    nereid_http: str
    triton_grpc: str
    nereid_grpc: str


def _identity_model(path: Path, dtype: int, shape: list[Any]) -> None:
    graph = helper.make_graph(
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])],
        "identity",
        [helper.make_tensor_value_info("INPUT0", dtype, shape)],
        [helper.make_tensor_value_info("OUTPUT0", dtype, shape)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path.parent.mkdir(parents=True)
    onnx.save(model, path)


def nereid_repository(root: Path) -> Path:
    """ONNX versions of the twins: the bundled examples plus two identity models."""
    for name in ("simple", "simple_int8", "simple_string"):
        shutil.copytree(EXAMPLES / name, root / name)
    _identity_model(root / "simple_identity" / "1" / "model.onnx", TensorProto.STRING, ["batch", "n"])
    (root / "simple_identity" / "config.pbtxt").write_text(
        'name: "simple_identity"\nbackend: "onnxruntime"\nmax_batch_size: 8\n'
        'input [ { name: "INPUT0" data_type: TYPE_STRING dims: [ -1 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_STRING dims: [ -1 ] } ]\n'
    )
    _identity_model(root / "simple_labels" / "1" / "model.onnx", TensorProto.FLOAT, [4])
    shutil.copy(HERE / "triton_twins" / "simple_labels" / "labels.txt", root / "simple_labels" / "labels.txt")
    (root / "simple_labels" / "config.pbtxt").write_text(
        'name: "simple_labels"\nbackend: "onnxruntime"\nmax_batch_size: 0\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] label_filename: "labels.txt" } ]\n'
    )
    return root


@contextmanager
def server_pair(
    base: Path,
    *flags: str,
    grpc: bool = False,
    triton_flags: tuple[str, ...] = (),
    nereid_flags: tuple[str, ...] = (),
    repository: Path | None = None,
) -> Iterator[Servers]:
    """The real Triton on the Python twins and Nereid on their ONNX versions, both with `flags` (and
    each with its own extra flags); with `grpc`, both serve gRPC too. Given a `repository`, both serve
    that same folder instead."""
    if repository is None:
        twins = base / "twins"
        shutil.copytree(HERE / "triton_twins", twins)
        nereid_models = nereid_repository(base / "nereid_repository")
    else:
        twins = nereid_models = repository
    port, grpc_port = free_ports(2)
    command, env = triton_command(twins, port, grpc_port if grpc else None)
    log = (base / "triton.log").open("wb")
    triton = subprocess.Popen(
        [*command, *flags, *triton_flags], stdout=log, stderr=subprocess.STDOUT, env=env
    )
    nereid = None
    try:
        wait_ready(f"127.0.0.1:{port}", triton, timeout=120)
        nereid = start_nereid(
            nereid_models,
            base / "nereid.log",
            "--allow-client-shm=true",  # Triton 2.51 allows client shared memory by default
            *flags,
            *nereid_flags,
            grpc=grpc,
        )
        grpc_urls = (f"127.0.0.1:{grpc_port}", nereid.grpc_url) if grpc else ("", "")
        yield Servers(f"127.0.0.1:{port}", nereid.url, *grpc_urls)
    finally:
        stop(triton)
        if nereid is not None:
            stop(nereid.process)


@pytest.fixture(scope="session")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    """One pair for the HTTP and the gRPC cases."""
    with server_pair(tmp_path_factory.mktemp("differential"), grpc=True) as pair:
        yield pair
