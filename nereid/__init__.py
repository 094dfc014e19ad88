"""Nereid: an inference server that speaks Triton's protocols and serves Triton model repositories."""

__version__ = "0.1.0"

# The protocol version reported by server metadata: the Triton release whose wire format we follow.
TRITON_PROTOCOL_VERSION = "2.51.0"
