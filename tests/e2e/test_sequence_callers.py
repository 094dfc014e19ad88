"""A sequence model behind an ensemble and behind a BLS model: each passes the request's sequence id and
flags on, so interleaved sequences keep their own sums."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.conftest import ROOT, RunningServer, start_nereid, stop

ACCUMULATOR = ROOT / "examples" / "sequence_model_repository" / "accumulator"

ENSEMBLE = """
name: "summing"
platform: "ensemble"
max_batch_size: 8
input [ { name: "VALUE" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "SUM" data_type: TYPE_INT32 dims: [ 1 ] } ]
ensemble_scheduling {
  step [
    {
      model_name: "accumulator"
      model_version: -1
      input_map { key: "INPUT" value: "VALUE" }
      output_map { key: "OUTPUT" value: "SUM" }
    }
  ]
}
"""


BLS_CONFIG = """
name: "bls_summing"
backend: "python"
max_batch_size: 8
input [ { name: "VALUE" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "SUM" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""

BLS_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "VALUE").as_numpy()
            call = pb_utils.InferenceRequest(
                model_name="accumulator",
                inputs=[pb_utils.Tensor("INPUT", value)],
                requested_output_names=["OUTPUT"],
                correlation_id=request.correlation_id(),
                flags=request.flags(),
            )
            answer = call.exec()
            if answer.has_error():
                responses.append(pb_utils.InferenceResponse(error=answer.error()))
                continue
            total = pb_utils.get_output_tensor_by_name(answer, "OUTPUT").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("SUM", total)]))
        return responses
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    base = tmp_path_factory.mktemp("sequence_ensemble")
    shutil.copytree(ACCUMULATOR, base / "repository" / "accumulator")
    (base / "repository" / "summing" / "1").mkdir(parents=True)
    (base / "repository" / "summing" / "config.pbtxt").write_text(ENSEMBLE)
    (base / "repository" / "bls_summing" / "1").mkdir(parents=True)
    (base / "repository" / "bls_summing" / "config.pbtxt").write_text(BLS_CONFIG)
    (base / "repository" / "bls_summing" / "1" / "model.py").write_text(BLS_MODEL)
    running = start_nereid(base / "repository", base / "nereid.log")
    try:
        yield running
    finally:
        stop(running.process)


def _send(
    client: httpclient.InferenceServerClient, model: str, sequence: int, value: int, start: bool, end: bool
) -> int:
    tensor = httpclient.InferInput("VALUE", [1, 1], "INT32")
    tensor.set_data_from_numpy(np.array([[value]], dtype=np.int32))
    result = client.infer(model, [tensor], sequence_id=sequence, sequence_start=start, sequence_end=end)
    return int(result.as_numpy("SUM")[0, 0])


@pytest.mark.parametrize(("model", "refusal"), [("summing", "in ensemble 'summing'"), ("bls_summing", "")])
def test_interleaved_sequences_keep_their_own_sums(server: RunningServer, model: str, refusal: str) -> None:
    client = httpclient.InferenceServerClient(server.url)
    try:
        sequences = {11: [1, 2, 3, 4], 22: [10, 20, 30, 40], 33: [100, 200, 300, 400]}
        sums = dict.fromkeys(sequences, 0)
        for step in range(4):
            for sequence, values in sequences.items():
                sums[sequence] += values[step]
                assert _send(client, model, sequence, values[step], step == 0, step == 3) == sums[sequence]
        # the sequence ended: a request without a new start is refused by the sequence model, and the
        # caller passes the refusal on
        with pytest.raises(InferenceServerException, match=f"{refusal}.*must specify the START flag"):
            _send(client, model, 11, 1, False, False)
    finally:
        client.close()
