"""pb_utils.TritonError and TritonModelException: the errors model code returns and meets."""

from __future__ import annotations

from typing import Any


class TritonError:
    """An error to return in an InferenceResponse; `code` picks the status the client gets."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    def __init__(self, message: str, code: int = INTERNAL) -> None:
        self._message = message
        self._code = code

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code

    def __str__(self) -> str:
        return self._message

    def __repr__(self) -> str:
        return f"TritonError({self._message!r}, code={self._code})"


_STATUS_NAMES = {
    TritonError.UNKNOWN: "UNKNOWN",
    TritonError.INTERNAL: "INTERNAL",
    TritonError.NOT_FOUND: "NOT_FOUND",
    TritonError.INVALID_ARG: "INVALID_ARG",
    TritonError.UNAVAILABLE: "UNAVAILABLE",
    TritonError.UNSUPPORTED: "UNSUPPORTED",
    TritonError.ALREADY_EXISTS: "ALREADY_EXISTS",
    TritonError.CANCELLED: "CANCELLED",
}


def status_name(code: Any) -> str:
    return _STATUS_NAMES.get(int(code), "INTERNAL") if isinstance(code, int) else "INTERNAL"


class TritonModelException(Exception):
    """Raised by this module when model code uses it wrongly (and by BLS calls that fail)."""

    def __init__(self, message: str = "") -> None:
        super().__init__(message)
        self._message = message

    def message(self) -> str:
        return self._message


def not_yet(what: str) -> TritonModelException:
    return TritonModelException(f"{what} is not supported by Nereid yet")
