"""The OCR pipeline as Business Logic Scripting: each step is an inference request to another model."""

import numpy as np
import triton_python_backend_utils as pb_utils


def _call(model, inputs, outputs):
    """Run `model` on the named tensors; its outputs as numpy arrays, or the error it answered with."""
    request = pb_utils.InferenceRequest(
        model_name=model,
        inputs=[pb_utils.Tensor(name, array) for name, array in inputs.items()],
        requested_output_names=outputs,
    )
    response = request.exec()
    if response.has_error():
        raise pb_utils.TritonModelException(f"{model}: {response.error().message()}")
    return {name: pb_utils.get_output_tensor_by_name(response, name).as_numpy() for name in outputs}


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                responses.append(pb_utils.InferenceResponse(self._read(request)))
            except pb_utils.TritonModelException as exc:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc))))
        return responses

    def _read(self, request):
        image = pb_utils.get_input_tensor_by_name(request, "IMAGE").as_numpy()
        pixels = _call("ocr_preprocess", {"IMAGE": image}, ["PIXELS"])["PIXELS"]
        text_map = _call("text_detection", {"PIXELS": pixels}, ["TEXT_MAP"])["TEXT_MAP"]
        cropped = _call("crop_glyphs", {"PIXELS": pixels, "TEXT_MAP": text_map}, ["GLYPHS", "BOXES"])
        boxes = cropped["BOXES"]
        if boxes.shape[0] == 0:  # a branch an ensemble cannot take: nothing to recognize
            return [
                pb_utils.Tensor("TEXT", np.array([b""], dtype=np.object_)),
                pb_utils.Tensor(
                    "CONFIDENCE", np.array([1.0], dtype=np.float32)
                ),  # as the postprocess says of no characters
                pb_utils.Tensor("BOXES", boxes),
            ]
        probs = _call("text_recognition", {"GLYPHS": cropped["GLYPHS"]}, ["PROBS"])["PROBS"]
        answer = _call("ocr_postprocess", {"PROBS": probs, "BOXES": boxes}, ["TEXT", "CONFIDENCE"])
        return [
            pb_utils.Tensor("TEXT", answer["TEXT"]),
            pb_utils.Tensor("CONFIDENCE", answer["CONFIDENCE"]),
            pb_utils.Tensor("BOXES", boxes),
        ]
