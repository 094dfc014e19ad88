"""KServe v2 HTTP/REST with Triton's extensions."""

from nereid.frontends.http.app import HttpFrontend

__all__ = ["HttpFrontend"]
