"""Request decompression and response compression (gzip, deflate), as Triton's HTTP server does them."""

from __future__ import annotations

import gzip
import zlib

from nereid.errors import InvalidArgument, Unsupported

_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


def decompress(body: bytes, encoding: str, limit: int) -> bytes:
    """Undo Content-Encoding, refusing output beyond `limit` bytes (a zip bomb must not exhaust memory)."""
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return body
    wbits = _WBITS.get(encoding)
    if wbits is None:
        raise Unsupported(f"unsupported Content-Encoding '{encoding}'; expected gzip, deflate or identity")
    decompressor = zlib.decompressobj(wbits)
    try:
        out = decompressor.decompress(body, limit + 1)
    except zlib.error as exc:
        raise InvalidArgument(f"failed to decompress the request body ({encoding}): {exc}") from None
    if len(out) > limit:
        raise InvalidArgument(
            # Triton's words, which its tests look for, and the flag that sets the limit
            f"the decompressed request body exceeds the maximum allowed value of {limit} bytes "
            "(--http-max-input-size)"
        )
    if not decompressor.eof:
        raise InvalidArgument(f"failed to decompress the request body ({encoding}): the stream is truncated")
    return out


def choose_encoding(accept_encoding: str) -> str:
    """The best of gzip/deflate/identity by the client's q-values; identity when none is acceptable."""
    best, best_q = "identity", 0.0
    for part in accept_encoding.split(","):
        token, _, params = part.strip().partition(";")
        token = token.strip().lower()
        if token not in ("gzip", "deflate", "identity"):
            continue
        q = 1.0
        params = params.strip()
        if params.startswith("q="):
            try:
                q = float(params[2:])
            except ValueError:
                continue
        if q > best_q:
            best, best_q = token, q
    return best


def compress(body: bytes, encoding: str) -> bytes:
    if encoding == "gzip":
        return gzip.compress(body, compresslevel=6, mtime=0)
    if encoding == "deflate":
        return zlib.compress(body)
    return body
