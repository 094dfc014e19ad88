"""Finds the dark rectangles of a binary PGM / PPM image and "reads" each one as its size, "WxH".

BOXES rows are x1, y1, x2, y2 in pixels (x2, y2 exclusive); SCORES the share of dark pixels in the box.
"""

import numpy as np
import triton_python_backend_utils as pb_utils


def _decode(data):
    fields, offset = [], 2
    while len(fields) < 3:
        while data[offset : offset + 1].isspace():
            offset += 1
        end = offset
        while not data[end : end + 1].isspace():
            end += 1
        fields.append(int(data[offset:end]))
        offset = end
    width, height, _ = fields
    channels = 3 if data[:2] == b"P6" else 1
    pixels = np.frombuffer(data, np.uint8, width * height * channels, offset + 1)
    return pixels.reshape(height, width, channels).min(axis=2)


def _runs(mask):
    """(start, end) of each run of True."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], mask.astype(np.int8), [0]])))
    return list(zip(edges[::2], edges[1::2], strict=True))


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "IMAGE").as_numpy().reshape(-1)[0]
            if data[:2] not in (b"P5", b"P6"):
                error = pb_utils.TritonError("IMAGE must be a binary PGM or PPM file")
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            dark = _decode(data) < 128
            texts, boxes, scores = [], [], []
            for top, bottom in _runs(dark.any(axis=1)):
                for left, right in _runs(dark[top:bottom].any(axis=0)):
                    texts.append(f"{right - left}x{bottom - top}".encode())
                    boxes.append([left, top, right, bottom])
                    scores.append(dark[top:bottom, left:right].mean())
            responses.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor("TEXT", np.array(texts, dtype=np.object_)),
                        pb_utils.Tensor("BOXES", np.array(boxes, dtype=np.float32).reshape(-1, 4)),
                        pb_utils.Tensor("SCORES", np.array(scores, dtype=np.float32)),
                    ]
                )
            )
        return responses
