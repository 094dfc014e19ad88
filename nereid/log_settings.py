"""Triton's logging: its line format, its settings (the command line's `--log-*` flags and the logging
extension, `/v2/logging` and gRPC LogSettings) and their checks, on top of Python's `logging`.

Lines look like Triton's, so tools and tests that read Triton's logs read Nereid's:

    I1123 23:55:35.123456 1234 server.py:123] "message"        (log_format "default")
    2026-11-23T23:55:35Z I 1234 server.py:123] "message"       (log_format "ISO8601")

Times are UTC. Messages are written as JSON strings (a message cannot forge a line of its own), unless
TRITON_SERVER_ESCAPE_LOG_MESSAGES=0 was set at start. Verbose messages (Python's DEBUG and below: verbose
level n is `verbose(n)`) show with the letter I, as Triton's do, whatever `log_info` says.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import IO, Any

from nereid.errors import InternalError, InvalidArgument, Unavailable, Unsupported

FORMATS = ("default", "ISO8601")
# Libraries whose DEBUG chatter is theirs, not the server's: kept at INFO whatever the verbose level.
_QUIET = ("grpc", "asyncio", "urllib3", "botocore", "s3transfer", "google", "azure")
_INT32_MAX = 2**31 - 1


def verbose(level: int) -> int:
    """The Python logging level of Triton's verbose level `level` (1 is DEBUG, 2 is one below...)."""
    return logging.DEBUG + 1 - max(level, 1)


@dataclass(frozen=True)
class LogSettings:
    """What the logging extension reports, with Triton's names and defaults."""

    log_file: str = ""
    log_info: bool = True
    log_warning: bool = True
    log_error: bool = True
    log_verbose_level: int = 0
    log_format: str = "default"

    def as_dict(self) -> dict[str, Any]:
        """In Triton's key order."""
        return {
            "log_file": self.log_file,
            "log_info": self.log_info,
            "log_warning": self.log_warning,
            "log_error": self.log_error,
            "log_verbose_level": self.log_verbose_level,
            "log_format": self.log_format,
        }

    def shows(self, levelno: int) -> bool:
        if levelno >= logging.ERROR:
            return self.log_error
        if levelno >= logging.WARNING:
            return self.log_warning
        if levelno >= logging.INFO:
            return self.log_info
        return logging.DEBUG + 1 - levelno <= self.log_verbose_level

    def lowest_level(self) -> int:
        """The lowest Python level any record could show at: the loggers' threshold."""
        if self.log_verbose_level > 0:
            return verbose(min(self.log_verbose_level, logging.DEBUG))
        for enabled, level in (
            (self.log_info, logging.INFO),
            (self.log_warning, logging.WARNING),
            (self.log_error, logging.ERROR),
        ):
            if enabled:
                return level
        return logging.CRITICAL + 1


def check_format(value: str) -> str:
    if value not in FORMATS:
        raise Unavailable(f"invalid argument for --log_format, got: {value}")
    return value


class TritonFormatter(logging.Formatter):
    """One record as Triton writes a log entry. A record with `triton_object` (a table, a config) is a
    multi-line entry: its message is the heading, the object follows on its own lines, as it is."""

    def __init__(self, log_format: str = "default", escape: bool = True) -> None:
        super().__init__()
        self.log_format = log_format
        self.escape = escape
        self._pid = os.getpid()

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            message = f"{message}\n{record.exc_text}"
        block = getattr(record, "triton_object", None)
        if self.escape and (message or block is None):
            message = json.dumps(message, ensure_ascii=False)
        if block is not None:
            message = f"{message}\n{block}"
        return f"{self._prefix(record)} {self._pid} {record.filename}:{record.lineno}] {message}"

    def _prefix(self, record: logging.LogRecord) -> str:
        levelno = record.levelno
        letter = "E" if levelno >= logging.ERROR else "W" if levelno >= logging.WARNING else "I"
        seconds = record.created
        utc = time.gmtime(seconds)
        if self.log_format == "ISO8601":
            return time.strftime("%Y-%m-%dT%H:%M:%SZ", utc) + f" {letter}"
        micros = int((seconds - int(seconds)) * 1_000_000)
        return f"{letter}{time.strftime('%m%d %H:%M:%S', utc)}.{micros:06d}"


class _Gate(logging.Filter):
    def __init__(self, log: ServerLog) -> None:
        super().__init__()
        self._log = log

    def filter(self, record: logging.LogRecord) -> bool:
        return self._log.settings.shows(record.levelno)


class ServerLog:
    """The server's log: where lines go, in which format, and which show. Settings change at run time
    through the logging extension; the file is fixed at start."""

    def __init__(self, settings: LogSettings, escape: bool = True) -> None:
        self._lock = threading.Lock()
        self.settings = settings
        self._formatter = TritonFormatter(settings.log_format, escape)

    def install(self, stream: IO[str] | None = None, root: logging.Logger | None = None) -> None:
        """Make this the root logger's only handler: writing to the log file, else to `stream` (standard
        error by default)."""
        if self.settings.log_file:
            try:
                target: IO[str] = open(self.settings.log_file, "a", encoding="utf-8")  # noqa: SIM115
            except OSError as exc:
                raise Unavailable(
                    f"failed to open log file '{self.settings.log_file}': {exc.strerror}"
                ) from None
        else:
            target = stream if stream is not None else sys.stderr
        handler = logging.StreamHandler(target)
        handler.setFormatter(self._formatter)
        handler.addFilter(_Gate(self))
        root = root or logging.getLogger()
        for old in list(root.handlers):
            root.removeHandler(old)
        root.addHandler(handler)
        for name in _QUIET:
            logging.getLogger(name).setLevel(logging.INFO)
        self._apply(root)

    def _apply(self, root: logging.Logger | None = None) -> None:
        # Loggers cache whether a level is enabled; setLevel clears those caches, so `isEnabledFor` stays
        # a cheap and true answer for code that logs per request only when verbose.
        (root or logging.getLogger()).setLevel(self.settings.lowest_level())
        self._formatter.log_format = self.settings.log_format

    def update(self, values: Mapping[str, Any], typed: bool = False) -> LogSettings:
        """Apply the settings a client sent, in Triton's order and with its checks and texts; a failing
        one stops there, keeping the ones before it (as Triton does). `typed`: values come from gRPC's
        typed parameters (`None` when no type was set), else from JSON."""
        with self._lock:
            try:
                if "log_file" in values:
                    raise Unsupported("log file location can not be updated through network protocol")
                for key in ("log_info", "log_warning", "log_error"):
                    if key in values and (typed or values[key] is not None):
                        self._set(key, _boolean(key, values[key], typed))
                key = "log_verbose_level"
                if key in values and (typed or values[key] is not None):
                    self._set(key, _verbose_level(values[key], typed))
                key = "log_format"
                if key in values and (typed or values[key] is not None):
                    self._set(key, _log_format(values[key], typed))
            finally:
                self._apply()
            return self.settings

    def _set(self, key: str, value: Any) -> None:
        self.settings = replace(self.settings, **{key: value})


def _boolean(key: str, value: Any, typed: bool) -> bool:
    if isinstance(value, bool):
        return value
    if typed:
        raise InvalidArgument(f"expect boolean for '{key}'")
    raise InternalError("attempt to access JSON non-boolean as boolean")


def _verbose_level(value: Any, typed: bool) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**64:
        # Triton keeps the low 32 bits as a signed level, and a negative one as 0.
        level = value & 0xFFFFFFFF
        return level if level <= _INT32_MAX else 0
    if typed:
        raise InvalidArgument("expect int32 for 'log_verbose_level'")
    raise InternalError("attempt to access JSON non-unsigned-integer as unsigned-integer")


def _log_format(value: Any, typed: bool) -> str:
    if not isinstance(value, str):
        if typed:
            raise InvalidArgument("expect string for 'log_format'")
        raise InternalError("attempt to access JSON non-string as string")
    if value not in FORMATS:
        if typed:  # Triton's gRPC endpoint names the setting, its HTTP one the flag
            raise InvalidArgument(f"invalid argument for log_format, got: {value}")
        check_format(value)
    return value


def escape_messages(environ: Mapping[str, str]) -> bool:
    """Triton's TRITON_SERVER_ESCAPE_LOG_MESSAGES: "0" writes messages as they are."""
    return environ.get("TRITON_SERVER_ESCAPE_LOG_MESSAGES", "1") != "0"


def log_at(logger: logging.Logger, level: int, filename: str, lineno: int, message: str) -> None:
    """Log `message` as coming from `filename`:`lineno` (a model's file, for pb_utils.Logger)."""
    if logger.isEnabledFor(level):
        logger.handle(logger.makeRecord(logger.name, level, filename, lineno, message, (), None))
