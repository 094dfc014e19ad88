"""The 180-degree classifier's verdicts applied to the crops, and the crops padded for batching.

A crop the classifier finds upside down (label 1, probability over 0.9) is turned half a turn. The crops
are then zero-padded (zero is mid-grey once normalised, as PP-OCR pads) to a width that is a multiple of
WIDTH_STEP, so that the recogniser's dynamic batcher can put requests with similar widths in one batch:
it joins only requests of one shape.

Inputs: CLS_PROBS [N, 2]; CROPS [N, 3, 48, W]; WIDTHS [N] int32. Output: REC_INPUT [N, 3, 48, W'].
"""

import numpy as np
import triton_python_backend_utils as pb_utils

CLS_THRESH = 0.9
# The recogniser's CPU grows with the padded width; a step of 32 px wastes at most 31 columns a crop, and
# at 160 the padding cost about 6% more CPU per page (English lines of ~500 px were run at 640) while
# pages rarely met in one batch anyway.
WIDTH_STEP = 32


def orient(cls_probs, crops, widths):
    """REC_INPUT: the crops, upright, padded to a multiple of WIDTH_STEP."""
    padded = -(-crops.shape[3] // WIDTH_STEP) * WIDTH_STEP
    out = np.zeros((*crops.shape[:3], padded), dtype=np.float32)
    out[:, :, :, : crops.shape[3]] = crops
    flipped = (cls_probs.argmax(axis=1) == 1) & (cls_probs.max(axis=1) > CLS_THRESH)
    for index in np.flatnonzero(flipped):
        width = int(widths[index])
        out[index, :, :, :width] = crops[index, :, ::-1, width - 1 :: -1] if width else 0
    return out


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            cls_probs, crops, widths = (
                pb_utils.get_input_tensor_by_name(request, name).as_numpy()
                for name in ("CLS_PROBS", "CROPS", "WIDTHS")
            )
            rec_input = orient(cls_probs, crops, widths)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("REC_INPUT", rec_input)]))
        return responses
