"""`--http-header-forward-pattern` / `--grpc-header-forward-pattern`: request headers whose names match a
regular expression reach the model as request parameters (string values), as in Triton.

The pattern matches anywhere in the name and ignores case, as Triton's does; a leading `(?-i)` makes it
case-sensitive (HTTP clients often lower-case header names, gRPC always does). Body parameters win over a
header of the same name. A header whose name is a key Triton reserves is refused, since it would
otherwise steer the request (sequence, priority, timeout...) from outside the protocol.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from nereid.errors import InvalidArgument

# Parameter keys that requests may not carry as ordinary parameters (Triton's parameters extension).
RESERVED_KEYS = frozenset(
    (
        "sequence_id",
        "sequence_start",
        "sequence_end",
        "priority",
        "timeout",
        "headers",
        "binary_data_output",
    )
)


def compile_pattern(text: str) -> re.Pattern[str]:
    """Triton's syntax (RE2, case-insensitive unless the pattern opens with `(?-i)`) as a Python regex."""
    flags: int = re.IGNORECASE
    if text.startswith("(?-i)"):
        text, flags = text[len("(?-i)") :], 0
    elif text.startswith("(?i)"):
        text = text[len("(?i)") :]
    try:
        return re.compile(text, flags)
    except re.error as exc:
        raise ValueError(f"not a valid regular expression: {exc}") from None


@dataclass(frozen=True)
class HeaderForwarding:
    pattern: re.Pattern[str]

    def add_parameters(self, headers: Iterable[tuple[str, object]], parameters: dict[str, object]) -> None:
        """Add the matching headers (text values only) to `parameters`."""
        for name, value in headers:
            if not isinstance(value, str) or not self.pattern.search(name):
                continue
            key = name.lower()
            if key in RESERVED_KEYS or key.startswith("triton_"):
                raise InvalidArgument(
                    f"Header '{name}' is reserved for Triton usage and cannot be forwarded."
                )
            parameters.setdefault(key, value)


def header_forwarding(pattern: str) -> HeaderForwarding | None:
    return HeaderForwarding(compile_pattern(pattern)) if pattern else None
