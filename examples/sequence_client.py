"""Two sequences sent interleaved to a stateful model of examples/sequence_model_repository.

    nereid --model-repository=examples/sequence_model_repository
    python examples/sequence_client.py [--url localhost:8000] [--model accumulator]

Each request carries its sequence's id; the first and last carry sequence_start and sequence_end. The
model keeps a running total per sequence, so the two sequences' totals stay apart although their
requests alternate. Needs Triton's HTTP client: pip install 'tritonclient[http]'.
"""

from __future__ import annotations

import argparse

import numpy as np
import tritonclient.http as httpclient


def run_sequences(url: str, model: str, values: dict[int, list[int]]) -> dict[int, list[int]]:
    """Send each sequence's values, alternating between sequences; returns each one's running totals."""
    client = httpclient.InferenceServerClient(url)
    totals: dict[int, list[int]] = {sequence_id: [] for sequence_id in values}
    length = max(len(v) for v in values.values())
    for step in range(length):
        for sequence_id, sequence in values.items():
            if step >= len(sequence):
                continue
            tensor = httpclient.InferInput("INPUT", [1, 1], "INT32")
            tensor.set_data_from_numpy(np.array([[sequence[step]]], dtype=np.int32))
            result = client.infer(
                model,
                [tensor],
                outputs=[httpclient.InferRequestedOutput("OUTPUT")],
                sequence_id=sequence_id,
                sequence_start=step == 0,
                sequence_end=step == len(sequence) - 1,
            )
            totals[sequence_id].append(int(result.as_numpy("OUTPUT")[0][0]))
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", default="localhost:8000")
    parser.add_argument("--model", default="accumulator", choices=["accumulator", "accumulator_state"])
    args = parser.parse_args()
    values = {1001: [1, 2, 3, 4], 2002: [10, 20, 30]}
    for sequence_id, totals in run_sequences(args.url, args.model, values).items():
        print(f"sequence {sequence_id}: inputs {values[sequence_id]} -> running totals {totals}")


if __name__ == "__main__":
    main()
