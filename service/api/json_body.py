"""JSON documents from clients: parsed off the event loop, and never deeper than
:data:`MAX_JSON_DEPTH`.

Every router uses :class:`JsonRoute`, whose requests parse their JSON body on a worker thread
(``anyio.to_thread``) rather than on the event loop, so one large body cannot hold up every
other request (``/healthz`` included); the body's size is already bounded by
``PRIVFIT_MAX_JSON_BYTES`` (:class:`~service.api.middleware.BodySizeLimitMiddleware`). A
document nested deeper than :data:`MAX_JSON_DEPTH` (arrays and objects) is refused with 422,
whether the parser's recursion limit stops it or the depth is counted after parsing: nothing
downstream ever walks a structure deep enough to exhaust the stack.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Coroutine
from typing import Any, Final

import anyio.to_thread
from fastapi import HTTPException
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response

__all__ = [
    "MAX_JSON_DEPTH",
    "JsonBodyTooDeepError",
    "JsonRoute",
    "JsonTooDeepError",
    "exceeds_depth",
    "parse_json",
]

#: Deepest nesting of arrays and objects accepted in any JSON a client sends (a body or the
#: upload's ``spec`` part). PrivFit's own documents are at most about 6 levels deep.
MAX_JSON_DEPTH: Final[int] = 64


class JsonTooDeepError(ValueError):
    """A JSON document nested deeper than the limit."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the JSON document is nested deeper than {limit} levels")
        self.limit = limit


def exceeds_depth(value: Any, limit: int) -> bool:
    """True when ``value`` nests lists and dicts deeper than ``limit`` (``[]`` and ``{}``
    are depth 1, a scalar 0). Iterative: no recursion, whatever the depth."""
    if not isinstance(value, dict | list):
        return False
    stack: list[tuple[dict[str, Any] | list[Any], int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def parse_json(data: bytes | str, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads(data)``, refusing documents nested deeper than ``max_depth``.

    Raises :class:`JsonTooDeepError` (before the parser's own recursion limit, ~1000 levels,
    turns into a ``RecursionError``) or the ``ValueError`` of ``json.loads`` for text that is
    not JSON (or bytes that are not UTF-8)."""
    try:
        value = json.loads(data)
    except RecursionError:
        raise JsonTooDeepError(max_depth) from None
    if exceeds_depth(value, max_depth):
        raise JsonTooDeepError(max_depth)
    return value


class JsonBodyTooDeepError(HTTPException):
    """The request's JSON body is nested too deep: 422 (rendered by ``service.api.errors``)."""

    def __init__(self, limit: int) -> None:
        super().__init__(422, detail=f"the JSON body is nested deeper than {limit} levels")


class _OffLoopJsonRequest(Request):
    """A request whose :meth:`json` parses on a worker thread, with the depth limit."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            try:
                self._json = await anyio.to_thread.run_sync(
                    functools.partial(parse_json, body, max_depth=MAX_JSON_DEPTH)
                )
            except JsonTooDeepError as exc:
                raise JsonBodyTooDeepError(exc.limit) from None
        return self._json


class JsonRoute(APIRoute):
    """The route class of every PrivFit router: its handler reads JSON bodies with
    :class:`_OffLoopJsonRequest` (never parsed on the event loop, never too deep)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            return await handler(_OffLoopJsonRequest(request.scope, request.receive))

        return handle
