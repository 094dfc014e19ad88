"""The OCR pipeline through BLS: the ensemble's Python steps run here, its ONNX models in the server.

The step models' model.py files (siblings in the repository) are imported rather than called, which
saves a round trip per step; the ONNX models are called with pb_utils.InferenceRequest, so that their
dynamic batchers join this pipeline's crops with other requests'.
"""

import importlib.util
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils


def _step(repository, name):
    spec = importlib.util.spec_from_file_location(f"ocr_step_{name}", repository / name / "1" / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _infer(model, name, array, output):
    request = pb_utils.InferenceRequest(
        model_name=model, requested_output_names=[output], inputs=[pb_utils.Tensor(name, array)]
    )
    response = request.exec()
    if response.has_error():
        raise pb_utils.TritonModelException(f"{model}: {response.error().message()}")
    return pb_utils.get_output_tensor_by_name(response, output).as_numpy()


class TritonPythonModel:
    def initialize(self, args):
        repository = Path(args["model_repository"]).parent
        self.preprocess = _step(repository, "ocr_preprocess")
        self.crop = _step(repository, "ocr_crop")
        self.orient = _step(repository, "ocr_orient")
        self.decode = _step(repository, "ocr_decode")
        self.characters = self.decode.load_characters(repository / "ocr_decode" / "1" / "characters.txt")

    def read(self, data):
        det_input, page, geometry = self.preprocess.prepare(self.preprocess.decode_image(data))
        prob_map = _infer("text_detection", "x", det_input, "sigmoid_0.tmp_0")
        boxes = self.crop.find_boxes(prob_map, page.shape[0], page.shape[1])
        regions = self.crop.to_image(boxes, geometry)
        if not boxes:
            return np.zeros(0, dtype=np.object_), regions, np.zeros(0, dtype=np.float32)
        cls_input, crops, widths = self.crop.crops_for(page, boxes)
        cls_probs = _infer("text_direction", "x", cls_input, "save_infer_model/scale_0.tmp_1")
        rec_input = self.orient.orient(cls_probs, crops, widths)
        rec_probs = _infer("text_recognition", "x", rec_input, "softmax_11.tmp_0")
        return self.decode.decode(rec_probs, regions, self.characters)

    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                text, boxes, scores = self.read(self.preprocess.image_bytes(request))
            except self.preprocess.BadImage as exc:
                responses.append(self.preprocess.invalid(str(exc)))
                continue
            responses.append(self.decode.response(text, boxes, scores))
        return responses
