"""Errors in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}`, with OpenAI's status codes.

Clients (the `openai` SDK first) pick their exception class from the status code and read `param` to
say which field was wrong, so a bad field is a 400 naming it, an unknown model a 404, a model that failed
a 500. Every other error of the server keeps its own status (Triton's mapping), in this shape.
"""

from __future__ import annotations

import logging

import orjson

from nereid.errors import NereidError, Status, unexpected

log = logging.getLogger(__name__)

_STATUS = {
    Status.INVALID_ARG: 400,
    Status.NOT_FOUND: 404,
    Status.UNSUPPORTED: 400,
    Status.ALREADY_EXISTS: 400,
    Status.PERMISSION_DENIED: 403,
    Status.UNAVAILABLE: 503,
    Status.CANCELLED: 499,
    Status.INTERNAL: 500,
    Status.UNKNOWN: 500,
}
# OpenAI's `type` by status: clients show it, few match on it.
_TYPE = {
    401: "authentication_error",
    400: "invalid_request_error",
    403: "permission_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
}


class OpenAIError(NereidError):
    """A request refused in OpenAI's terms: the field at fault (`param`) and a machine-readable `code`."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.http_status = status
        self.param = param
        self.code = code


def bad_field(param: str, message: str) -> OpenAIError:
    """A field of the body that is missing, of the wrong type or out of range: 400, naming it."""
    return OpenAIError(400, message, param, "invalid_value")


def unsupported_field(param: str, model: str, why: str = "") -> OpenAIError:
    """A field this model cannot honour (see the tensor convention): 400, naming it."""
    message = f"model '{model}' does not support '{param}'" + (f": {why}" if why else "")
    return OpenAIError(400, message, param, "unsupported_parameter")


def model_not_found(model: str) -> OpenAIError:
    return OpenAIError(404, f"The model '{model}' does not exist", "model", "model_not_found")


def error_document(status: int, message: str, param: str | None = None, code: str | None = None) -> bytes:
    kind = _TYPE.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return orjson.dumps({"error": {"message": message, "type": kind, "param": param, "code": code}})


def openai_error(exc: BaseException, what: str) -> tuple[int, bytes]:
    """Any failure as its status and OpenAI-shaped body; an unexpected one is logged once with its
    traceback and answered 500."""
    if isinstance(exc, OpenAIError):
        return exc.http_status, error_document(exc.http_status, exc.message, exc.param, exc.code)
    if isinstance(exc, NereidError):
        status = _STATUS.get(exc.status, 400)
        if status == 404:  # the engine's NotFound: an unknown or unloaded model
            return 404, error_document(404, exc.message, "model", "model_not_found")
        return status, error_document(status, exc.message)
    log.error("unexpected error serving %s", what, exc_info=exc)
    return 500, error_document(500, unexpected(exc).message)
