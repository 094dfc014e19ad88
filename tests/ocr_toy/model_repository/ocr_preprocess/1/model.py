"""IMAGE (the bytes of a PGM or PPM file) -> PIXELS: ink in [0, 1], 1 for black."""

import numpy as np
import triton_python_backend_utils as pb_utils


def decode_netpbm(data):
    """Grayscale in [0, 1] from a netpbm file: P5 (gray), P6 (color) or P2 (gray, as text); 8-bit."""
    fields, position = [], 0
    while len(fields) < 4:
        while position < len(data) and data[position : position + 1].isspace():
            position += 1
        if data[position : position + 1] == b"#":  # a comment runs to the end of its line
            position = data.index(b"\n", position)
            continue
        end = position
        while end < len(data) and not data[end : end + 1].isspace():
            end += 1
        if end == position:
            raise ValueError("the header ends early")
        fields.append(data[position:end])
        position = end
    magic, width, height, maxval = fields[0], int(fields[1]), int(fields[2]), int(fields[3])
    if magic not in (b"P2", b"P5", b"P6") or maxval != 255:
        raise ValueError(f"{magic!r} images with maximum value {maxval} are not supported")
    if magic == b"P2":
        values = np.array(data[position:].split()[: width * height], dtype=np.float32)
        return values.reshape(height, width) / 255.0
    channels = 3 if magic == b"P6" else 1
    pixels = np.frombuffer(data, dtype=np.uint8, count=width * height * channels, offset=position + 1)
    gray = pixels.reshape(height, width, channels).astype(np.float32).mean(axis=2)
    return gray / 255.0


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "IMAGE").as_numpy().reshape(-1)[0]
            try:
                gray = decode_netpbm(bytes(data))
            except ValueError as exc:
                message = f"IMAGE is not a PGM or PPM file (netpbm P2, P5 or P6, 8-bit): {exc}"
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(message)))
                continue
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("PIXELS", 1.0 - gray)]))
        return responses
