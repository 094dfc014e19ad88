"""IMAGE (the bytes of an image file in any format Pillow reads) -> the detector's input and the page.

As PP-OCR prepares a page (the settings of rapidocr_onnxruntime's config.yaml): decoded to BGR with a
white background behind transparency; sides over 2000 px shrunk and under 30 px grown (rounded to
multiples of 32); very flat pages padded above and below; then resized for the detector so that its
shorter side is at least 736 px, both sides multiples of 32, and normalised to [-1, 1].

Outputs: DET_INPUT [1, 3, H, W] float32; PAGE [h, w, 3] uint8, the page the detector's boxes refer to
(crops are cut from it); GEOMETRY [5] float32: ratio_h, ratio_w, padding on top, raw height, raw width,
to bring boxes back to the image's own pixels.
"""

import io

import cv2
import numpy as np
import triton_python_backend_utils as pb_utils
from PIL import Image, UnidentifiedImageError

MAX_SIDE_LEN = 2000
MIN_SIDE_LEN = 30
MIN_HEIGHT = 30  # pages this low, or wider than WIDTH_HEIGHT_RATIO, are padded above and below
WIDTH_HEIGHT_RATIO = 8
DET_LIMIT_SIDE_LEN = 736  # the detector sees the shorter side at least this long
MAX_PIXELS = 50_000_000  # decompression bombs are refused before they are decoded


class BadImage(ValueError):
    """The bytes are not an image this step can read: the client's error."""


def decode_image(data):
    """BGR uint8 [h, w, 3] from the bytes of an image file."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            if image.width * image.height > MAX_PIXELS:
                raise BadImage(f"the image has {image.width}x{image.height} pixels, over {MAX_PIXELS}")
            image.load()
            if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
                page = Image.new("RGB", image.size, "white")
                page.paste(image.convert("RGBA"), mask=image.convert("RGBA").getchannel("A"))
                image = page
            rgb = np.asarray(image.convert("RGB"))
    except BadImage:
        raise
    except UnidentifiedImageError as exc:
        raise BadImage(
            f"IMAGE is not an image file Pillow can read ({len(data)} bytes, starting {data[:8]!r})"
        ) from exc
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        raise BadImage(f"IMAGE could not be decoded: {exc}") from exc
    if rgb.shape[0] < 1 or rgb.shape[1] < 1:
        raise BadImage("IMAGE has no pixels")
    return np.ascontiguousarray(rgb[:, :, ::-1])


def _resize_to_32(image, ratio):
    h, w = image.shape[:2]
    height = max(32, int(round(int(h * ratio) / 32) * 32))
    width = max(32, int(round(int(w * ratio) / 32) * 32))
    return cv2.resize(image, (width, height)), h / height, w / width


def prepare(bgr):
    """(DET_INPUT, PAGE, GEOMETRY) for a BGR page."""
    raw_h, raw_w = bgr.shape[:2]
    page, ratio_h, ratio_w = bgr, 1.0, 1.0
    if max(raw_h, raw_w) > MAX_SIDE_LEN:
        page, ratio_h, ratio_w = _resize_to_32(page, MAX_SIDE_LEN / max(raw_h, raw_w))
    if min(page.shape[:2]) < MIN_SIDE_LEN:
        page, ratio_h, ratio_w = _resize_to_32(page, MIN_SIDE_LEN / min(page.shape[:2]))
    h, w = page.shape[:2]
    top = 0
    if h <= MIN_HEIGHT or w / h > WIDTH_HEIGHT_RATIO:
        top = int(abs(max(int(w / WIDTH_HEIGHT_RATIO), MIN_HEIGHT) * 2 - h) / 2)
        page = cv2.copyMakeBorder(page, top, top, 0, 0, cv2.BORDER_CONSTANT, value=(0, 0, 0))
        h = page.shape[0]
    ratio = DET_LIMIT_SIDE_LEN / min(h, w) if min(h, w) < DET_LIMIT_SIDE_LEN else 1.0
    det_h = int(round(int(h * ratio) / 32) * 32)
    det_w = int(round(int(w * ratio) / 32) * 32)
    resized = cv2.resize(page, (det_w, det_h)).astype(np.float32)
    det_input = ((resized * (1 / 255.0) - 0.5) / 0.5).transpose(2, 0, 1)[np.newaxis]
    geometry = np.array([ratio_h, ratio_w, top, raw_h, raw_w], dtype=np.float32)
    return np.ascontiguousarray(det_input, dtype=np.float32), np.ascontiguousarray(page), geometry


def image_bytes(request):
    """The image file a request carries."""
    data = pb_utils.get_input_tensor_by_name(request, "IMAGE").as_numpy().reshape(-1)
    if data.size != 1:
        raise BadImage(f"IMAGE must hold one image file, got {data.size} elements")
    return bytes(data[0])


def invalid(message):
    """A response that answers the client 400 / INVALID_ARGUMENT."""
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(message, pb_utils.TritonError.INVALID_ARG))


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                det_input, page, geometry = prepare(decode_image(image_bytes(request)))
            except BadImage as exc:
                responses.append(invalid(str(exc)))
                continue
            outputs = [
                pb_utils.Tensor("DET_INPUT", det_input),
                pb_utils.Tensor("PAGE", page),
                pb_utils.Tensor("GEOMETRY", geometry),
            ]
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
