"""A sequence model as a step of an ensemble: the ensemble passes each request's sequence id and flags
on, so interleaved sequences keep their own sums."""

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


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    base = tmp_path_factory.mktemp("sequence_ensemble")
    shutil.copytree(ACCUMULATOR, base / "repository" / "accumulator")
    (base / "repository" / "summing" / "1").mkdir(parents=True)
    (base / "repository" / "summing" / "config.pbtxt").write_text(ENSEMBLE)
    running = start_nereid(base / "repository", base / "nereid.log")
    try:
        yield running
    finally:
        stop(running.process)


def _send(client: httpclient.InferenceServerClient, sequence: int, value: int, start: bool, end: bool) -> int:
    tensor = httpclient.InferInput("VALUE", [1, 1], "INT32")
    tensor.set_data_from_numpy(np.array([[value]], dtype=np.int32))
    result = client.infer("summing", [tensor], sequence_id=sequence, sequence_start=start, sequence_end=end)
    return int(result.as_numpy("SUM")[0, 0])


def test_interleaved_sequences_through_an_ensemble_keep_their_own_sums(server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(server.url)
    try:
        sequences = {11: [1, 2, 3, 4], 22: [10, 20, 30, 40], 33: [100, 200, 300, 400]}
        sums = dict.fromkeys(sequences, 0)
        for step in range(4):
            for sequence, values in sequences.items():
                sums[sequence] += values[step]
                assert _send(client, sequence, values[step], step == 0, step == 3) == sums[sequence]
        # the sequence ended: a request without a new start is refused by the member, through the ensemble
        with pytest.raises(
            InferenceServerException, match="in ensemble .summing.*must specify the START flag"
        ):
            _send(client, 11, 1, False, False)
    finally:
        client.close()
