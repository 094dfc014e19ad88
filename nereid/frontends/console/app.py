"""The web console's routes on the HTTP port: its page, its static files and its live snapshots.

The page does everything else (repository index, configs, load / unload, infer) through the standard
v2 API, so --http-restricted-api applies to the console exactly as it does to any client.
"""

from __future__ import annotations

from importlib import resources
from typing import TYPE_CHECKING

import orjson

from nereid.core.engine_client import EngineClient
from nereid.frontends.console.analysis import latest_analysis
from nereid.frontends.console.source import ConsoleSource
from nereid.frontends.http.protocol import HttpRequest, HttpResponse
from nereid.frontends.http.routes import Route, RouteTable
from nereid.settings import ServerSettings

if TYPE_CHECKING:
    from importlib.abc import Traversable

PREFIX = "/console"
_TYPES = {
    ".html": b"text/html; charset=utf-8",
    ".js": b"text/javascript; charset=utf-8",
    ".css": b"text/css; charset=utf-8",
    ".svg": b"image/svg+xml",
    ".png": b"image/png",
    ".LICENSE": b"text/plain; charset=utf-8",
}
# The page loads nothing from elsewhere; the browser enforces it.
_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'self'; img-src 'self' data: blob:; style-src 'self' 'unsafe-inline'; "
        b"connect-src 'self'; frame-ancestors 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"cache-control", b"no-cache"),
]


def _static_files() -> dict[str, tuple[bytes, bytes]]:
    """Relative path -> (content type, body) of every file the package ships under static/."""
    files: dict[str, tuple[bytes, bytes]] = {}

    def walk(folder: Traversable, prefix: str) -> None:
        for item in folder.iterdir():
            if item.is_dir():
                walk(item, f"{prefix}{item.name}/")
                continue
            suffix = "." + item.name.rsplit(".", 1)[-1]
            if suffix in _TYPES:
                files[prefix + item.name] = (_TYPES[suffix], item.read_bytes())

    walk(resources.files(__package__) / "static", "")
    return files


class Console:
    """The console's routes under /console: its page, static files and live data."""

    def __init__(self, engine: EngineClient, settings: ServerSettings) -> None:
        self._source = ConsoleSource(engine)
        self._files = _static_files()
        self._repositories = settings.model_repositories
        self._info = orjson.dumps(
            {
                "model_control_mode": settings.model_control_mode,
                "restricted": sorted(
                    {group for rule in settings.http_restricted_api for group in rule.groups}
                ),
            }
        )

    def routes(self) -> RouteTable:
        """The console's table, mounted on the HTTP frontend's: its live data counts as statistics for
        --http-restricted-api; the page and its files hold no data."""
        return RouteTable(
            [
                Route(PREFIX + "[/]", ("GET",), None, self._page),
                Route(PREFIX + "/static/{file:path}", ("GET",), None, self._static),
                Route(PREFIX + "/api/live", ("GET",), "statistics", self._live),
                Route(PREFIX + "/api/info", ("GET",), "statistics", self._about),
                # the latest `nereid analyze` report found in the model repositories
                Route(PREFIX + "/api/analysis", ("GET",), "model-repository", self._analysis),
            ]
        )

    def _page(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        return _answer(200, *self._files["index.html"])

    def _analysis(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        analysis = latest_analysis(self._repositories)
        if analysis is None:
            return _answer(
                404, b"application/json", b'{"error":"no nereid analyze report in the repositories"}'
            )
        return _answer(200, b"application/json", analysis)

    def _static(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        found = self._files.get(params["file"])
        if found is None:
            return _answer(404, b"text/plain", b"Not Found")
        return _answer(200, *found)

    def _live(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        return _answer(200, b"application/json", orjson.dumps(self._source.snapshot()))

    def _about(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        return _answer(200, b"application/json", self._info)


def _answer(status: int, content_type: bytes, body: bytes) -> HttpResponse:
    return HttpResponse(status, body, [(b"content-type", content_type), *_HEADERS])
