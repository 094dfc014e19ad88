"""KServe v2 HTTP/REST with Triton's extensions."""

from nereid.frontends.http.app import HttpFrontend, error_response
from nereid.frontends.http.protocol import HttpServer

__all__ = ["HttpFrontend", "HttpServer", "error_response"]
