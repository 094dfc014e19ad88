"""--model-namespacing on a real `nereid` process: a name that two repositories serve is refused over
HTTP and gRPC with Triton's status and text, while the ensembles calling it run their own repository's."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.conftest import RunningServer, start_nereid, stop
from tests.repository.test_namespacing import AMBIGUOUS, X, Y, namespaced_repositories


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    base = tmp_path_factory.mktemp("namespacing")
    a, b = namespaced_repositories(base)
    running = start_nereid(
        a, base / "nereid.log", f"--model-repository={b}", "--model-namespacing=true", grpc=True
    )
    try:
        yield running
    finally:
        stop(running.process)


def _inputs(module):  # type: ignore[no-untyped-def]
    tensors = [module.InferInput(name, [1, 16], "INT32") for name in ("A", "B")]
    for tensor, value in zip(tensors, (X, Y), strict=True):
        tensor.set_data_from_numpy(value)
    return tensors


def test_http_refuses_an_ambiguous_name_and_serves_the_rest(server: RunningServer) -> None:
    with httpclient.InferenceServerClient(server.url.removeprefix("http://")) as client:
        np.testing.assert_array_equal(client.infer("only_a", _inputs(httpclient)).as_numpy("SUM"), X + Y)
        for name in ("member", "pipe"):
            with pytest.raises(InferenceServerException) as caught:
                client.infer(name, _inputs(httpclient))
            assert caught.value.status() == "400"
            assert caught.value.message() == AMBIGUOUS.format(name)


def test_grpc_refuses_an_ambiguous_name_and_serves_the_rest(server: RunningServer) -> None:
    assert server.grpc_url is not None
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        np.testing.assert_array_equal(client.infer("only_a", _inputs(grpcclient)).as_numpy("SUM"), X + Y)
        with pytest.raises(InferenceServerException) as caught:
            client.infer("member", _inputs(grpcclient))
        assert caught.value.status() == str(grpc.StatusCode.INVALID_ARGUMENT)
        assert caught.value.message() == AMBIGUOUS.format("member")
