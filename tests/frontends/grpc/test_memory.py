"""A gRPC inference call leaves its request to be freed when it ends, not when the cyclic collector runs.

The server lets the collector run rarely (heap.py): a request kept in a reference cycle (an error raised
from a frame that holds it, say) stays for many calls, which with tensors of tens of MiB is gigabytes. The
collector is off while calls are served, each on a channel (a connection) of its own, on either core; what
a collection then finds must hold no request.
"""

from __future__ import annotations

import gc

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from nereid.server import build_engine
from tests.conftest import EXAMPLES
from tests.frontends.grpc.conftest import CORES, core_settings, serving

_LARGE = np.zeros((8, 1 << 15), dtype=np.int32).tobytes()  # 1 MiB: a batch `simple` refuses by its shape


def _request(accepted: bool) -> pb.ModelInferRequest:
    def tensor(name: str, shape: list[int]) -> pb.ModelInferRequest.InferInputTensor:
        return pb.ModelInferRequest.InferInputTensor(name=name, datatype="INT32", shape=shape)

    if accepted:
        data = np.arange(16, dtype=np.int32).tobytes()
        return pb.ModelInferRequest(
            model_name="simple", inputs=[tensor("INPUT0", [1, 16]), tensor("INPUT1", [1, 16])],
            raw_input_contents=[data, data],
        )  # fmt: skip
    return pb.ModelInferRequest(
        model_name="simple", inputs=[tensor("INPUT0", [8, 1 << 15]), tensor("INPUT1", [8, 1 << 15])],
        raw_input_contents=[_LARGE, _LARGE],
    )  # fmt: skip


@pytest.mark.parametrize("core", sorted(CORES))
@pytest.mark.parametrize("accepted", [True, False], ids=["served", "refused"])
def test_inference_calls_leave_no_request_in_reference_cycles(core: str, accepted: bool) -> None:
    settings = core_settings(EXAMPLES, core)
    engine = build_engine(settings)
    try:
        with serving(engine, settings) as served:
            gc.collect()
            gc.disable()
            try:
                for _ in range(3):
                    with grpc.insecure_channel(served.target) as channel:
                        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
                        if accepted:
                            stub.ModelInfer(_request(True), timeout=30)
                        else:
                            with pytest.raises(grpc.RpcError) as refused:
                                stub.ModelInfer(_request(False), timeout=30)
                            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                gc.set_debug(gc.DEBUG_SAVEALL)
                gc.collect()
                kept = {type(item).__name__ for item in gc.garbage}
            finally:
                gc.set_debug(0)
                gc.garbage.clear()
                gc.enable()
    finally:
        engine.shutdown()
    assert not kept & {"InferRequest", "ModelInferRequest", "InferTensor"}, kept
