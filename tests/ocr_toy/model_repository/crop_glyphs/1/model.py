"""PIXELS + TEXT_MAP -> GLYPHS (one 7x5 grid per character, flattened) and BOXES."""

import numpy as np
import triton_python_backend_utils as pb_utils

HEIGHT, WIDTH = 7, 5


def _runs(mask):
    """(start, end) of each run of True, end inclusive."""
    padded = np.concatenate([[False], mask, [False]]).astype(np.int8)
    edges = np.flatnonzero(np.diff(padded))
    return list(zip(edges[::2], edges[1::2] - 1, strict=True))


def crop(pixels, text_map):
    ink = pixels > 0.5
    glyphs, boxes = [], []
    for line, (first, last) in enumerate(_runs(text_map.max(axis=1) > 0.5)):
        rows = np.flatnonzero(ink[first : last + 1].any(axis=1))
        if rows.size == 0:
            continue
        top, bottom = first + rows[0], first + rows[-1]
        scale = max(1, round((bottom - top + 1) / HEIGHT))
        for left, right in _runs(ink[top : bottom + 1].any(axis=0)):
            # Sample the centre of each scale x scale cell; the glyph sits at the left of the grid.
            ys = top + scale * np.arange(HEIGHT) + scale // 2
            xs = left + scale * np.arange(min(WIDTH, (right - left) // scale + 1)) + scale // 2
            grid = np.zeros((HEIGHT, WIDTH), dtype=np.float32)
            grid[:, : xs.size] = pixels[np.ix_(np.minimum(ys, bottom), np.minimum(xs, right))]
            glyphs.append(grid.reshape(-1))
            boxes.append((line, top, left, bottom, right))
    return (
        np.array(glyphs, dtype=np.float32).reshape(-1, HEIGHT * WIDTH),
        np.array(boxes, dtype=np.int32).reshape(-1, 5),
    )


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            glyphs, boxes = crop(
                pb_utils.get_input_tensor_by_name(request, "PIXELS").as_numpy(),
                pb_utils.get_input_tensor_by_name(request, "TEXT_MAP").as_numpy(),
            )
            responses.append(
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor("GLYPHS", glyphs), pb_utils.Tensor("BOXES", boxes)]
                )
            )
        return responses
