"""Pure ASGI middleware, outermost first: request context (id, access log, metrics,
last-resort 500), the client's address (trusted proxies only), the request body size limit,
and authentication of ``/v1`` requests before any byte of their body is read. None buffers
request bodies.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import re
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import anyio.to_thread
from fastapi.routing import APIRoute
from starlette.datastructures import Headers, MutableHeaders
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.routing import Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api.deps import authenticate_request, bearer_token
from service.api.errors import domain_error_response, internal_error_response, problem_response
from service.api.metrics import UNMATCHED_ROUTE, HttpMetrics
from service.domain.errors import DomainError
from service.logs import request_id_var
from service.settings import IPNetwork

__all__ = [
    "REQUEST_ID_HEADER",
    "AuthenticationMiddleware",
    "BodySizeLimitMiddleware",
    "ClientAddressMiddleware",
    "PayloadTooLargeError",
    "RequestContextMiddleware",
    "RouteInfo",
    "RouteTable",
]

REQUEST_ID_HEADER = "X-Request-ID"
_CLIENT_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
_KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

#: The ``openapi_extra`` key naming who may call a route (``service.api.deps.access``).
_ACCESS = "x-privfit-access"
#: Where :class:`RouteTable` keeps a request's route (a :class:`RouteInfo` or None).
_ROUTE_SCOPE_KEY = "privfit.route"

access_logger = logging.getLogger("privfit.access")
error_logger = logging.getLogger("privfit.error")


class RequestContextMiddleware:
    """Gives each request an id, logs it, measures it, and turns crashes into a bare 500.

    The id is the client's ``X-Request-ID`` when it is short and plain, else a fresh one; it is
    echoed in the response header, in ``request.state.request_id``, in every log line written
    while handling the request, and in problem bodies.
    """

    def __init__(self, app: ASGIApp, *, metrics: HttpMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = Headers(scope=scope).get(REQUEST_ID_HEADER)
        request_id = (
            incoming if incoming and _CLIENT_REQUEST_ID.match(incoming) else uuid.uuid4().hex
        )
        scope.setdefault("state", {})["request_id"] = request_id
        token = request_id_var.set(request_id)
        started = time.perf_counter()
        status = 500
        response_started = False

        async def send_with_id(message: Message) -> None:
            nonlocal status, response_started
            if message["type"] == "http.response.start":
                response_started = True
                status = int(message["status"])
                headers = MutableHeaders(scope=message)
                headers[REQUEST_ID_HEADER] = request_id
                _add_security_headers(headers, scope["path"])
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception:
            error_logger.exception(
                "unhandled error",
                extra={"method": scope["method"], "path": scope["path"], "request_id": request_id},
            )
            if response_started:
                raise
            await internal_error_response(Request(scope))(scope, receive, send_with_id)
        finally:
            elapsed = time.perf_counter() - started
            template = _route_template(scope)
            method = scope["method"] if scope["method"] in _KNOWN_METHODS else "OTHER"
            self.metrics.observe(method=method, route=template, status=status, seconds=elapsed)
            client = scope.get("client")
            access_logger.info(
                "%s %s %d",
                method,
                template,
                status,
                extra={
                    "method": method,
                    "path": scope["path"],
                    "route": template,
                    "status": status,
                    "duration_ms": round(elapsed * 1000, 2),
                    "client_ip": client[0] if client else None,
                    "request_id": request_id,
                },
            )
            request_id_var.reset(token)


#: Paths whose responses may be cached: the docs' static assets (they carry no key or data).
_CACHEABLE_PREFIXES = ("/docs-assets/",)


def _add_security_headers(headers: MutableHeaders, path: str) -> None:
    """``nosniff`` on every response; ``no-store`` on every response that is not a static asset
    (API keys, datasets' budgets and models must not stay in a browser's or proxy's cache)."""
    headers["X-Content-Type-Options"] = "nosniff"
    headers.setdefault("Referrer-Policy", "no-referrer")
    if not path.startswith(_CACHEABLE_PREFIXES):
        headers["Cache-Control"] = "no-store"


def _route_template(scope: Scope) -> str:
    """The matched route's path template (bounded label values), else ``<unmatched>``."""
    path = getattr(scope.get("route"), "path", None)
    if isinstance(path, str):
        return path
    # A request answered by the middleware (401, 413) before the router ran.
    info = scope.get(_ROUTE_SCOPE_KEY)
    if isinstance(info, RouteInfo):
        return info.path
    # Plain Starlette routes (/docs, /openapi.json) do not record themselves in the scope.
    for route in getattr(scope.get("app"), "routes", ()):
        if isinstance(route, Route) and route.matches(scope)[0] is Match.FULL:
            return route.path
    return UNMATCHED_ROUTE


@dataclass(frozen=True)
class RouteInfo:
    """What the middleware needs to know of a route before the app runs."""

    path: str  # the template, e.g. ``/v1/datasets/{dataset_id}/fits``
    access: str  # admin, site, any or public (``service.api.deps.access``)


class RouteTable:
    """The app's API routes, matched by method and path ahead of the router (which only runs
    inside the middleware stack). A request matching none is left to the router (404, 405)."""

    def __init__(self, routes: Iterable[APIRoute]) -> None:
        self._routes = [
            (
                route.path_regex,
                frozenset(route.methods or ()),
                RouteInfo(route.path, str((route.openapi_extra or {}).get(_ACCESS, "any"))),
            )
            for route in routes
        ]

    def find(self, scope: Scope) -> RouteInfo | None:
        """The route of this request (looked up once per request, then kept in the scope)."""
        if _ROUTE_SCOPE_KEY not in scope:
            method, path = scope["method"], scope["path"]
            scope[_ROUTE_SCOPE_KEY] = next(
                (
                    info
                    for regex, methods, info in self._routes
                    if method in methods and regex.match(path)
                ),
                None,
            )
        found: RouteInfo | None = scope[_ROUTE_SCOPE_KEY]
        return found


def _has_body(headers: Headers) -> bool:
    return "transfer-encoding" in headers or headers.get("content-length", "0") not in {"", "0"}


class ClientAddressMiddleware:
    """Sets the request's client address, believing ``X-Forwarded-For`` only from a trusted
    proxy (``PRIVFIT_TRUSTED_PROXIES``; none by default).

    When the connection comes from a trusted proxy, the client is the right-most address of
    ``X-Forwarded-For`` that is not itself a trusted proxy (each proxy appends the address it
    saw, so the entries left of the first untrusted one are the client's to invent); the
    scheme is taken from ``X-Forwarded-Proto``. From anyone else both headers are ignored, so
    rotating them cannot escape a per-address limit.
    """

    def __init__(self, app: ASGIApp, *, trusted: Sequence[IPNetwork]) -> None:
        self.app = app
        self.trusted = tuple(trusted)

    def _is_trusted(self, address: str) -> bool:
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        return any(ip in network for network in self.trusted)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in {"http", "websocket"} and self.trusted:
            client = scope.get("client")
            if client and self._is_trusted(client[0]):
                headers = Headers(scope=scope)
                hops = [
                    hop.strip()
                    for value in headers.getlist("x-forwarded-for")
                    for hop in value.split(",")
                    if hop.strip()
                ]
                address = client[0]
                for hop in reversed(hops):
                    address = hop[:64]
                    if not self._is_trusted(hop):
                        break
                scope["client"] = (address, 0)
                proto = headers.get("x-forwarded-proto", "").strip().lower()
                if proto in {"http", "https"}:
                    scope["scheme"] = (
                        proto if scope["type"] == "http" else proto.replace("http", "ws")
                    )
        await self.app(scope, receive, send)


class PayloadTooLargeError(StarletteHTTPException):
    """The request body went over the configured limit while being read."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, detail=f"the request body exceeds {limit} bytes")


class BodySizeLimitMiddleware:
    """Rejects bodies over their limit with 413, without buffering them.

    The limit is ``max_bytes`` (``PRIVFIT_MAX_JSON_BYTES``: every body but an upload's), or
    ``streamed_max_bytes`` (``PRIVFIT_MAX_REQUEST_BYTES``) on the ``streamed`` routes, given as
    (method, path template), whose handlers stream the body. A declared ``Content-Length``
    over the limit is refused before anything is read. Otherwise (including chunked bodies)
    bytes are counted as the app reads them; the first chunk past the limit raises
    :class:`PayloadTooLargeError`, which the error handlers render as 413.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_bytes: int,
        routes: RouteTable | None = None,
        streamed: Iterable[tuple[str, str]] = (),
        streamed_max_bytes: int | None = None,
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.routes = routes
        self.streamed = frozenset(streamed)
        self.streamed_max_bytes = streamed_max_bytes if streamed_max_bytes else max_bytes

    def limit_for(self, scope: Scope) -> int:
        """The largest body this request may have."""
        route = self.routes.find(scope) if self.routes is not None else None
        if route is not None and (scope["method"], route.path) in self.streamed:
            return self.streamed_max_bytes
        return self.max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope)
        declared = Headers(scope=scope).get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await self._reject(limit, scope, receive, send)
            return
        received = 0
        response_started = False

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise PayloadTooLargeError(limit)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal response_started
            if message["type"] == "http.response.start":
                response_started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except PayloadTooLargeError:
            # Only reached when something read the body outside FastAPI's error handling.
            if response_started:
                raise
            await self._reject(limit, scope, receive, send)

    @staticmethod
    async def _reject(limit: int, scope: Scope, receive: Receive, send: Send) -> None:
        response = problem_response(
            Request(scope),
            status=413,
            slug="payload-too-large",
            title="Request body too large",
            detail=f"the request body exceeds {limit} bytes",
            headers={"Connection": "close"},
        )
        await response(scope, receive, send)


class AuthenticationMiddleware:
    """Authenticates every request to a non-public API route before any of its body is read.

    A missing, malformed or invalid key is answered at once (401, or 429 past the
    failed-authentication limit), so an unauthenticated request costs one key lookup however
    large its body; the connection is then closed rather than drained. The key is checked on a
    worker thread (it reads the database), and the caller is left in ``request.state.principal``
    for :func:`service.api.deps.get_principal`.
    """

    def __init__(self, app: ASGIApp, *, routes: RouteTable) -> None:
        self.app = app
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = self.routes.find(scope) if scope["type"] == "http" else None
        if route is None or route.access == "public":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        token = bearer_token(request.headers.get("authorization"))
        try:
            principal = await anyio.to_thread.run_sync(
                functools.partial(authenticate_request, request, token)
            )
        except DomainError as exc:
            response = domain_error_response(request, exc, close=_has_body(request.headers))
            await response(scope, receive, send)
            return
        scope.setdefault("state", {})["principal"] = principal
        await self.app(scope, receive, send)
