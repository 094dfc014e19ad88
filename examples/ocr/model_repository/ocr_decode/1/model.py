"""The recogniser's per-column class probabilities -> text, by greedy CTC decoding.

Each column's most likely class is kept when it is not the blank (class 0) and differs from the column
before; class i is line i - 1 of characters.txt, the dictionary the recognition model carries in its
metadata (written here by prepare.py), and the class after the last line is a space. A region's score is
the mean probability of its kept columns; regions scoring under TEXT_SCORE are dropped, as PP-OCR does.

Inputs: REC_PROBS [N, T, C]; REGIONS [n, 4, 2] (n <= N: rows past n are padding).
Outputs: TEXT [k] (UTF-8), BOXES [k, 4, 2], SCORES [k], in reading order.
"""

from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

TEXT_SCORE = 0.5


def load_characters(path):
    """The classes: blank, the dictionary's lines, space."""
    lines = Path(path).read_text(encoding="utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return ["", *lines, " "]


def ctc_decode(probs, characters):
    """[(text, score)] for a batch of [T, C] probability rows."""
    best = probs.argmax(axis=2)
    best_prob = probs.max(axis=2)
    results = []
    for classes, prob in zip(best, best_prob, strict=True):
        keep = np.ones(len(classes), dtype=bool)
        keep[1:] = classes[1:] != classes[:-1]
        keep &= classes != 0
        text = "".join(characters[c] for c in classes[keep])
        results.append((text, float(prob[keep].mean()) if keep.any() else 0.0))
    return results


def decode(rec_probs, regions, characters):
    """(TEXT, BOXES, SCORES) for one page."""
    read = ctc_decode(rec_probs[: len(regions)], characters)
    kept = [i for i, (_, score) in enumerate(read) if score >= TEXT_SCORE]
    text = np.array([read[i][0].encode("utf-8") for i in kept], dtype=np.object_)
    boxes = regions[kept].astype(np.float32).reshape(-1, 4, 2)
    scores = np.array([read[i][1] for i in kept], dtype=np.float32)
    return text, boxes, scores


def response(text, boxes, scores):
    """The pipeline's answer: TEXT, BOXES, SCORES."""
    outputs = [
        pb_utils.Tensor("TEXT", text),
        pb_utils.Tensor("BOXES", boxes),
        pb_utils.Tensor("SCORES", scores),
    ]
    return pb_utils.InferenceResponse(outputs)


class TritonPythonModel:
    def initialize(self, args):
        self.characters = load_characters(
            Path(args["model_repository"]) / args["model_version"] / "characters.txt"
        )

    def execute(self, requests):
        responses = []
        for request in requests:
            rec_probs = pb_utils.get_input_tensor_by_name(request, "REC_PROBS").as_numpy()
            regions = pb_utils.get_input_tensor_by_name(request, "REGIONS").as_numpy()
            responses.append(response(*decode(rec_probs, regions, self.characters)))
        return responses
