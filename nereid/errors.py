"""One error hierarchy for the whole server; frontends map `Status` to HTTP or gRPC codes."""

from __future__ import annotations

import enum


class Status(enum.Enum):
    """Triton's error codes (TRITONSERVER_Error_Code)."""

    UNKNOWN = "UNKNOWN"
    INTERNAL = "INTERNAL"
    NOT_FOUND = "NOT_FOUND"
    INVALID_ARG = "INVALID_ARG"
    UNAVAILABLE = "UNAVAILABLE"
    UNSUPPORTED = "UNSUPPORTED"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    CANCELLED = "CANCELLED"
    # not a TRITONSERVER code: a restricted API called without its header (HTTP 403, gRPC UNAVAILABLE)
    PERMISSION_DENIED = "PERMISSION_DENIED"


class NereidError(Exception):
    """An error with a status that every frontend knows how to report."""

    status: Status = Status.INTERNAL
    # The model ran and answered the request with this error (a Python model's error response): Triton's
    # Python backend reports such a request to the statistics as a success.
    answered = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidArgument(NereidError):
    status = Status.INVALID_ARG


class InputDataError(InvalidArgument):
    """An input's data does not fit its shape and data type. Triton checks the data of all inputs after the
    rest of the request, in the reverse of their order in the request (its map of inputs iterates so), so
    frontends keep decoding the other inputs and report the last such error."""


class NotFound(NereidError):
    status = Status.NOT_FOUND


class Unavailable(NereidError):
    status = Status.UNAVAILABLE


class QueueFull(Unavailable):
    """Refused at the door of a full queue; as in Triton, it counts in no statistic."""


class QueueTimeout(Unavailable):
    """Left the queue once its timeout passed; a REJECTED failure in the statistics."""


class Unsupported(NereidError):
    status = Status.UNSUPPORTED


class DecoupledModel(Unsupported):
    """A decoupled model asked for exactly one response; frontends answer with Triton's text for it."""

    def __init__(self, endpoint: str = "this endpoint") -> None:
        super().__init__(f"{endpoint} doesn't support models with decoupled transaction policy")


class AlreadyExists(NereidError):
    status = Status.ALREADY_EXISTS


class Cancelled(NereidError):
    status = Status.CANCELLED


class Forbidden(NereidError):
    status = Status.PERMISSION_DENIED


class InternalError(NereidError):
    status = Status.INTERNAL


class PollFailed(InternalError):
    """A model to load could not be read from the repository (no folder, unwritable uploaded files...).
    Triton answers these INTERNAL with "failed to load '<model>', failed to poll from model repository",
    and its clients look for those words."""

    def __init__(self, model_name: str, detail: str) -> None:
        super().__init__(f"failed to load '{model_name}', failed to poll from model repository: {detail}")


class ModelConfigError(InvalidArgument):
    """config.pbtxt could not be parsed or is not valid; the message names file and field."""


def request_prefix(request_id: str) -> str:
    """How Triton starts the message of an error about one request."""
    return f"[request id: {request_id or '<id_unknown>'}] "


def unexpected(exc: BaseException) -> InternalError:
    """What a client is told about an exception nobody expected (the server logs its traceback)."""
    return InternalError(f"internal error: {type(exc).__name__}: {exc}")
