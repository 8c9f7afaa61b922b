"""Pure ASGI middleware: request context (id, access log, metrics, last-resort 500) and the
request body size limit. Neither buffers request bodies.
"""

from __future__ import annotations

import logging
import re
import time
import uuid

from starlette.datastructures import Headers, MutableHeaders
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.routing import Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api.errors import internal_error_response, problem_response
from service.api.metrics import UNMATCHED_ROUTE, HttpMetrics
from service.logs import request_id_var

__all__ = [
    "REQUEST_ID_HEADER",
    "BodySizeLimitMiddleware",
    "PayloadTooLargeError",
    "RequestContextMiddleware",
]

REQUEST_ID_HEADER = "X-Request-ID"
_CLIENT_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
_KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

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
    # Plain Starlette routes (/docs, /openapi.json) do not record themselves in the scope.
    for route in getattr(scope.get("app"), "routes", ()):
        if isinstance(route, Route) and route.matches(scope)[0] is Match.FULL:
            return route.path
    return UNMATCHED_ROUTE


class PayloadTooLargeError(StarletteHTTPException):
    """The request body went over the configured limit while being read."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, detail=f"the request body exceeds {limit} bytes")


class BodySizeLimitMiddleware:
    """Rejects bodies over ``max_bytes`` with 413, without buffering them.

    A declared ``Content-Length`` over the limit is refused before anything is read. Otherwise
    (including chunked uploads) bytes are counted as the app reads them; the first chunk past the
    limit raises :class:`PayloadTooLargeError`, which the error handlers render as 413.
    """

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._reject(scope, receive, send)
            return
        received = 0
        response_started = False

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise PayloadTooLargeError(self.max_bytes)
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
            await self._reject(scope, receive, send)

    async def _reject(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = problem_response(
            Request(scope),
            status=413,
            slug="payload-too-large",
            title="Request body too large",
            detail=f"the request body exceeds {self.max_bytes} bytes",
            headers={"Connection": "close"},
        )
        await response(scope, receive, send)
