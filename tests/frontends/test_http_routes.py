"""The HTTP route table: patterns, the first match deciding, methods, groups, mounting, and the frontend's
404 / 405 / 403 answers derived from it."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from nereid.frontends.http import HttpFrontend
from nereid.frontends.http.protocol import HttpRequest, HttpResponse
from nereid.frontends.http.routes import NO_MATCH, Handler, Route, RouteTable, compile_pattern
from nereid.server import build_engine
from nereid.settings import RestrictedApi, ServerSettings
from tests.conftest import EXAMPLES


def _answer(text: str) -> Handler:
    def handler(request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        return HttpResponse(200, f"{text} {sorted(params.items())}".encode(), [])

    return handler


def test_a_pattern_names_segments_digits_the_rest_and_optional_parts() -> None:
    regex = compile_pattern("/v2/models/{model}[/versions/{version:int}]/infer")
    assert regex.fullmatch("/v2/models/a.b/infer").groupdict() == {"model": "a.b", "version": None}
    assert regex.fullmatch("/v2/models/m/versions/12/infer").groupdict() == {"model": "m", "version": "12"}
    assert regex.fullmatch("/v2/models/m/versions/x/infer") is None
    assert regex.fullmatch("/v2/models/m/n/infer") is None
    files = compile_pattern("/console/static/{file:path}")
    assert files.fullmatch("/console/static/lib/chart.js").group("file") == "lib/chart.js"
    assert compile_pattern("/v2.x").fullmatch("/v2yx") is None  # literal text is literal


def test_the_first_pattern_decides_and_its_routes_give_the_methods() -> None:
    table = RouteTable(
        [
            Route("/v2/models/stats", ("GET",), "statistics", _answer("all")),
            Route("/v2/models/{model}", ("GET",), "metadata", _answer("one")),
            Route("/v2/logging", ("GET",), "logging", _answer("read")),
            Route("/v2/logging", ("POST",), "logging", _answer("write")),
        ]
    )
    stats = table.match("/v2/models/stats")
    assert set(stats.routes) == {"GET"} and stats.params == {} and stats.group == "statistics"
    model = table.match("/v2/models/simple")
    assert model.params == {"model": "simple"} and model.group == "metadata"
    assert set(table.match("/v2/logging").routes) == {"GET", "POST"}
    assert table.match("/v2/nothing") is NO_MATCH
    assert table.match("/v2/models/simple") is model  # kept by path


def test_a_mounted_table_comes_after_and_conflicts_are_refused() -> None:
    table = RouteTable([Route("/v1/{anything}", ("GET",), None, _answer("first"))])
    table.mount(RouteTable([Route("/v1/models", ("GET",), "metadata", _answer("later"))]))
    assert table.match("/v1/models").group is None  # the earlier pattern decides
    assert len(table.routes) == 2
    with pytest.raises(ValueError, match="two routes for GET"):
        table.add([Route("/v1/{anything}", ("GET", "POST"), None, _answer("again"))])
    with pytest.raises(ValueError, match="two API groups"):
        table.add([Route("/v1/{anything}", ("PUT",), "health", _answer("other"))])


def _get(frontend: HttpFrontend, method: str, path: str, **headers: str) -> HttpResponse:
    return asyncio.run(frontend.handle(HttpRequest(method, path, "", headers, b"")))


def test_not_found_method_not_allowed_and_restricted_derive_from_the_table() -> None:
    rule = RestrictedApi(frozenset({"health", "statistics"}), "x-key", "secret")
    settings = ServerSettings(model_repositories=(EXAMPLES,), http_restricted_api=(rule,), allow_console=True)
    engine = build_engine(settings)
    try:
        frontend = HttpFrontend(engine, settings)
        for path in ("/v2/unknown", "/v2/models/simple/unknown", "/v2/systemsharedmemory/register"):
            missing = _get(frontend, "GET", path)
            assert (missing.status, orjson.loads(missing.body)) == (404, {"error": "Not Found"})
        wrong = _get(frontend, "DELETE", "/v2/logging")
        assert (wrong.status, orjson.loads(wrong.body)) == (405, {"error": "Method Not Allowed"})
        assert _get(frontend, "POST", "/v2").status == 405
        for path in ("/v2/health/live", "/v2/models/simple/ready", "/v2/models/stats", "/console/api/live"):
            refused = _get(frontend, "GET", path)
            assert refused.status == 403, path
            assert orjson.loads(refused.body) == {"error": "This API is restricted, expecting header 'x-key'"}
            assert _get(frontend, "GET", path, **{"x-key": "secret"}).status == 200, path
        # a restricted route refuses before its method is looked at, as Triton's check comes first
        assert _get(frontend, "POST", "/v2/health/live").status == 403
        assert _get(frontend, "POST", "/v2/health/live", **{"x-key": "secret"}).status == 405
        assert _get(frontend, "GET", "/v2").status == 200  # metadata is not restricted here
        groups = {route.group for route in frontend.routes.routes} - {None}
        assert groups == {
            "health",
            "metadata",
            "inference",
            "model-config",
            "statistics",
            "model-repository",
            "shared-memory",
            "logging",
            "trace",
        }
    finally:
        engine.shutdown()
