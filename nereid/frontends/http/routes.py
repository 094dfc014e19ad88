"""HTTP routes as data: each API is a table of (pattern, methods, API group, handler), and the frontend's
404, 405 and --http-restricted-api answers all derive from the tables mounted on it.

A pattern is a path with `{name}` for one path segment, `{name:int}` for a run of digits, `{name:path}`
for the rest of the path, and `[...]` around an optional part:

    /v2/models/{model}[/versions/{version:int}]/infer

The first pattern that matches a path decides it (so `/v2/models/stats` is listed before the model
routes); the routes of that pattern say which methods it takes, and a method outside them is answered 405.
A path is matched once: what it matched is kept by path, for the paths a client sends again and again.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from nereid.frontends.http.protocol import DeferredResponse, HttpRequest, HttpResponse

Reply = HttpResponse | DeferredResponse | Awaitable[HttpResponse]
# A handler takes the request and the pattern's parameters (absent optional ones are left out).
Handler = Callable[[HttpRequest, dict[str, str]], Reply]

# Paths whose match a table keeps at most; past that it starts again (paths may vary without end).
MAX_KEPT_PATHS = 256
_PARAMETER = re.compile(r"\{([a-z_]+)(?::(int|path))?\}")
_PARAMETER_REGEX = {None: "[^/]+", "int": "[0-9]+", "path": ".+"}


@dataclass(frozen=True)
class Route:
    """One entry of a table: the methods of a path pattern, the API group that --http-restricted-api names
    (None: never restricted), and what answers it."""

    pattern: str
    methods: tuple[str, ...]
    group: str | None
    handler: Handler


@dataclass(frozen=True)
class PathMatch:
    """What a path matched: the routes of its pattern by method, its parameters and its API group."""

    routes: dict[str, Route]
    params: dict[str, str]
    group: str | None


# The answer for a path that no pattern matches.
NO_MATCH = PathMatch({}, {}, None)


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """The regular expression a route pattern stands for, its parameters as named groups."""
    regex: list[str] = []
    position = 0
    for found in _PARAMETER.finditer(pattern):
        regex.append(_literal(pattern[position : found.start()]))
        regex.append(f"(?P<{found.group(1)}>{_PARAMETER_REGEX[found.group(2)]})")
        position = found.end()
    regex.append(_literal(pattern[position:]))
    return re.compile("".join(regex))


def _literal(text: str) -> str:
    """Literal pattern text, with its `[...]` optional parts as optional groups."""
    return re.escape(text).replace(r"\[", "(?:").replace(r"\]", ")?")


class RouteTable:
    """Routes matched in the order they were added; `mount` adds another API's table after them."""

    def __init__(self, routes: Iterable[Route] = ()) -> None:
        self.routes: list[Route] = []
        # pattern -> its regular expression and its routes by method, in the order the patterns came
        self._patterns: dict[str, tuple[re.Pattern[str], dict[str, Route]]] = {}
        self._kept: dict[str, PathMatch] = {}
        self.add(routes)

    def add(self, routes: Iterable[Route]) -> None:
        for route in routes:
            entry = self._patterns.get(route.pattern)
            if entry is None:
                entry = self._patterns[route.pattern] = (compile_pattern(route.pattern), {})
            by_method = entry[1]
            if by_method and next(iter(by_method.values())).group != route.group:
                raise ValueError(f"routes of {route.pattern} in two API groups")
            for method in route.methods:
                if method in by_method:
                    raise ValueError(f"two routes for {method} {route.pattern}")
                by_method[method] = route
            self.routes.append(route)
        self._kept.clear()

    def mount(self, table: RouteTable) -> None:
        """Serve another API's routes too, after the ones already here."""
        self.add(table.routes)

    def match(self, path: str) -> PathMatch:
        """The routes, parameters and API group of a path; NO_MATCH where no pattern matches it."""
        found = self._kept.get(path)
        if found is None:
            found = self._match(path)
            if len(self._kept) >= MAX_KEPT_PATHS:
                self._kept.clear()
            self._kept[path] = found
        return found

    def _match(self, path: str) -> PathMatch:
        for regex, by_method in self._patterns.values():
            matched = regex.fullmatch(path)
            if matched is not None:
                params = {name: value for name, value in matched.groupdict().items() if value is not None}
                return PathMatch(by_method, params, next(iter(by_method.values())).group)
        return NO_MATCH
