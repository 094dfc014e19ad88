"""The detector's probability map -> text regions, cut out of the page for the classifier and recogniser.

DB post-processing as PP-OCR does it: threshold the map, dilate, take each contour's minimum-area
rectangle, score it by the mean probability inside, grow it by the unclip distance (pyclipper, shapely)
and scale it to the page. Regions are put in reading order (top to bottom, left to right on a line),
cut out with a perspective warp, and turned upright when much taller than wide.

Inputs: PROB_MAP [1, 1, H, W]; PAGE [h, w, 3] uint8; GEOMETRY [5] (see ocr_preprocess).
Outputs: CLS_INPUT [N, 3, 48, 192] for the 180-degree classifier; CROPS [N, 3, 48, W] for the
recogniser, each crop 48 px high, left-aligned, zero-padded to the widest; WIDTHS [N] int32, each crop's
own width; REGIONS [n, 4, 2] float32, the boxes' corners in the image's pixels (clockwise from top left).
A page without text still sends one blank crop on (n = 0 < N = 1): a batch of no rows is refused by
batching models.
"""

import math

import cv2
import numpy as np
import pyclipper
import triton_python_backend_utils as pb_utils
from shapely.geometry import Polygon

THRESH = 0.3  # probability above which a pixel is text
BOX_THRESH = 0.5  # mean probability a region needs
MAX_CANDIDATES = 1000
UNCLIP_RATIO = 1.6
MIN_SIZE = 3
CROP_HEIGHT = 48
CLS_WIDTH = 192
MIN_REC_WIDTH = 320  # the recogniser's narrowest input


def _mini_box(contour):
    rect = cv2.minAreaRect(contour)
    points = sorted(cv2.boxPoints(rect).tolist(), key=lambda p: p[0])
    left = sorted(points[:2], key=lambda p: p[1])
    right = sorted(points[2:], key=lambda p: p[1])
    return np.array([left[0], right[0], right[1], left[1]], dtype=np.float32), min(rect[1])


def _score(prob, box):
    h, w = prob.shape
    xmin = int(np.clip(np.floor(box[:, 0].min()), 0, w - 1))
    xmax = int(np.clip(np.ceil(box[:, 0].max()), 0, w - 1))
    ymin = int(np.clip(np.floor(box[:, 1].min()), 0, h - 1))
    ymax = int(np.clip(np.ceil(box[:, 1].max()), 0, h - 1))
    mask = np.zeros((ymax - ymin + 1, xmax - xmin + 1), dtype=np.uint8)
    shifted = box - np.array([xmin, ymin], dtype=np.float32)
    cv2.fillPoly(mask, shifted.reshape(1, -1, 2).astype(np.int32), 1)
    return cv2.mean(prob[ymin : ymax + 1, xmin : xmax + 1], mask)[0]


def _unclip(box):
    polygon = Polygon(box)
    distance = polygon.area * UNCLIP_RATIO / polygon.length
    offset = pyclipper.PyclipperOffset()
    offset.AddPath(box.tolist(), pyclipper.JT_ROUND, pyclipper.ET_CLOSEDPOLYGON)
    return np.array(offset.Execute(distance)).reshape(-1, 1, 2)


def _clockwise(points):
    by_x = points[np.argsort(points[:, 0])]
    top_left, bottom_left = by_x[:2][np.argsort(by_x[:2, 1])]
    top_right, bottom_right = by_x[2:][np.argsort(by_x[2:, 1])]
    return np.array([top_left, top_right, bottom_right, bottom_left], dtype=np.float32)


def find_boxes(prob_map, page_h, page_w):
    """Boxes [4, 2] in page pixels, each a list in reading order."""
    prob = prob_map[0, 0]
    height, width = prob.shape
    mask = cv2.dilate((prob > THRESH).astype(np.uint8), np.ones((2, 2), dtype=np.uint8))
    contours = cv2.findContours(mask * 255, cv2.RETR_LIST, cv2.CHAIN_APPROX_SIMPLE)[-2]
    boxes = []
    for contour in contours[:MAX_CANDIDATES]:
        points, side = _mini_box(contour)
        if side < MIN_SIZE or _score(prob, points) < BOX_THRESH:
            continue
        box, side = _mini_box(_unclip(points))
        if side < MIN_SIZE + 2:
            continue
        box[:, 0] = np.clip(np.round(box[:, 0] / width * page_w), 0, page_w)
        box[:, 1] = np.clip(np.round(box[:, 1] / height * page_h), 0, page_h)
        box = _clockwise(box.astype(np.int32).astype(np.float32))
        box[:, 0] = np.clip(box[:, 0], 0, page_w - 1).astype(np.int32)
        box[:, 1] = np.clip(box[:, 1], 0, page_h - 1).astype(np.int32)
        if int(np.linalg.norm(box[0] - box[1])) <= 3 or int(np.linalg.norm(box[0] - box[3])) <= 3:
            continue
        boxes.append(box)
    return reading_order(boxes)


def reading_order(boxes):
    """Top to bottom by the top-left corner; boxes whose tops are within 10 px are one line, left to right."""
    ordered = sorted(boxes, key=lambda b: (b[0][1], b[0][0]))
    for i in range(len(ordered) - 1):
        for j in range(i, -1, -1):
            if abs(ordered[j + 1][0][1] - ordered[j][0][1]) < 10 and ordered[j + 1][0][0] < ordered[j][0][0]:
                ordered[j], ordered[j + 1] = ordered[j + 1], ordered[j]
            else:
                break
    return ordered


def cut(page, box):
    """The region, warped to an upright rectangle; a crop 1.5 times taller than wide is turned a quarter."""
    width = int(max(np.linalg.norm(box[0] - box[1]), np.linalg.norm(box[2] - box[3])))
    height = int(max(np.linalg.norm(box[0] - box[3]), np.linalg.norm(box[1] - box[2])))
    target = np.array([[0, 0], [width, 0], [width, height], [0, height]], dtype=np.float32)
    matrix = cv2.getPerspectiveTransform(box.astype(np.float32), target)
    crop = cv2.warpPerspective(
        page, matrix, (width, height), borderMode=cv2.BORDER_REPLICATE, flags=cv2.INTER_CUBIC
    )
    if crop.shape[0] / crop.shape[1] >= 1.5:
        crop = np.ascontiguousarray(np.rot90(crop))
    return crop


def _normalised(crop, width, padded_width):
    resized = cv2.resize(crop, (width, CROP_HEIGHT)).astype(np.float32)
    out = np.zeros((3, CROP_HEIGHT, padded_width), dtype=np.float32)
    out[:, :, :width] = (resized.transpose(2, 0, 1) / 255 - 0.5) / 0.5
    return out


def crops_for(page, boxes):
    """(CLS_INPUT, CROPS, WIDTHS) for the boxes; one blank crop when there are none."""
    crops = [cut(page, box) for box in boxes]
    ratios = [c.shape[1] / c.shape[0] for c in crops]
    widest = int(CROP_HEIGHT * max([MIN_REC_WIDTH / CROP_HEIGHT, *ratios]))  # PP-OCR's rounding
    widths = [min(math.ceil(CROP_HEIGHT * r), widest) for r in ratios]
    padded = max([MIN_REC_WIDTH, *widths])
    if not crops:
        blank = np.zeros((1, 3, CROP_HEIGHT, padded), dtype=np.float32)
        return blank[:, :, :, :CLS_WIDTH].copy(), blank, np.zeros(1, dtype=np.int32)
    cls = np.stack([_normalised(c, min(w, CLS_WIDTH), CLS_WIDTH) for c, w in zip(crops, widths, strict=True)])
    rec = np.stack([_normalised(c, w, padded) for c, w in zip(crops, widths, strict=True)])
    return cls, rec, np.array(widths, dtype=np.int32)


def to_image(boxes, geometry):
    """Boxes in page pixels -> in the pixels of the image the client sent."""
    ratio_h, ratio_w, top, raw_h, raw_w = (float(v) for v in geometry)
    if not boxes:
        return np.zeros((0, 4, 2), dtype=np.float32)
    points = np.array(boxes, dtype=np.float32)
    points[:, :, 1] -= top
    points[:, :, 0] *= ratio_w
    points[:, :, 1] *= ratio_h
    points = np.maximum(points, 0)
    points[..., 0] = np.minimum(points[..., 0], raw_w)
    points[..., 1] = np.minimum(points[..., 1], raw_h)
    return points


def crop_regions(prob_map, page, geometry):
    """(CLS_INPUT, CROPS, WIDTHS, REGIONS) for one page."""
    boxes = find_boxes(prob_map, page.shape[0], page.shape[1])
    cls, rec, widths = crops_for(page, boxes)
    return cls, rec, widths, to_image(boxes, geometry)


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            prob_map, page, geometry = (
                pb_utils.get_input_tensor_by_name(request, name).as_numpy()
                for name in ("PROB_MAP", "PAGE", "GEOMETRY")
            )
            cls, rec, widths, regions = crop_regions(prob_map, page, geometry)
            outputs = [
                pb_utils.Tensor("CLS_INPUT", cls),
                pb_utils.Tensor("CROPS", rec),
                pb_utils.Tensor("WIDTHS", widths),
                pb_utils.Tensor("REGIONS", regions),
            ]
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
