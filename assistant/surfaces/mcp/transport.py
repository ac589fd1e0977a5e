"""Streamable HTTP: one session manager per event loop, and the Django view that authenticates, checks the origin and hands the request to the SDK."""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import suppress
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import DisallowedHost, RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.http.request import validate_host
from django.utils.translation import gettext
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken as SdkAccessToken
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings

from ...access import oauth
from ...access.tokens import Bearer, aauthenticate_bearer
from ...core.registry import ToolRegistry, registry
from ...exceptions import AssistantError, DatabaseUnavailable, outage
from .callers import SCOPE_KEY, Caller
from .server import build_server
from .sessions import CappedSessionManager

logger = logging.getLogger("assistant.mcp")


# -- Streamable HTTP: one session manager per event loop, started on first use --------------------


class Endpoint:
    """The SDK's session manager, run lazily inside whatever loop serves requests.

    daphne sends no ASGI lifespan and Django's handler takes none, so the manager's task group
    starts with the first request of each event loop and lives as long as the loop.
    """

    def __init__(self, site: ToolRegistry = registry) -> None:
        self.site = site
        self._managers: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, StreamableHTTPSessionManager
        ] = weakref.WeakKeyDictionary()
        self._runners: set[asyncio.Task[None]] = set()

    async def manager(self) -> StreamableHTTPSessionManager:
        loop = asyncio.get_running_loop()
        manager = self._managers.get(loop)
        if manager is not None:
            return manager
        manager = CappedSessionManager(
            app=build_server(site=self.site),
            stateless=False,
            # Host is checked by Django (ALLOWED_HOSTS) and Origin by the view, before the SDK
            security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        self._managers[loop] = manager
        started = asyncio.Event()

        async def run() -> None:
            async with manager.run():
                started.set()
                await asyncio.Event().wait()  # until the loop is closed (cancelled with it)

        runner = loop.create_task(run(), name="assistant-mcp-session-manager")
        self._runners.add(runner)
        runner.add_done_callback(self._runners.discard)
        await started.wait()
        return manager

    async def handle(
        self,
        scope: dict[str, Any],
        receive: Callable[[], Awaitable[dict[str, Any]]],
        send: Callable[[MutableMapping[str, Any]], Awaitable[None]],
    ) -> None:
        manager = await self.manager()
        await manager.handle_request(scope, receive, send)


endpoint = Endpoint()


def sdk_user(bearer: Bearer) -> AuthenticatedUser:
    """The SDK's view of the caller: a session may only be used by the credential that opened it."""
    return AuthenticatedUser(
        SdkAccessToken(
            token="",
            client_id=f"{bearer.kind}:{bearer.token_id or ''}",
            subject=str(bearer.user.pk),
            scopes=sorted(bearer.scopes),
        )
    )


# -- the Django view: authenticate, check the origin, hand the request to the SDK ----------------


TRANSPORT_CODES = {
    400: "bad_request",
    404: "session_not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    413: "request_too_large",
    415: "unsupported_media_type",
    503: "mcp_unavailable",
}


def refused(status: int, code: str, detail: str, **headers: str) -> HttpResponse:
    response = JsonResponse({"code": code, "detail": detail}, status=status)
    for name, value in headers.items():
        response.headers[name.replace("_", "-")] = value
    return response


def unavailable_response(exc: DatabaseUnavailable) -> HttpResponse:
    """The 503 every surface answers while the database is down."""
    return refused(exc.status, exc.code, exc.message, Retry_After=str(exc.retry_after))


def origin_allowed(request: HttpRequest) -> bool:
    """A browser's cross-site request is refused (DNS rebinding); the host rules are Django's own."""
    origin = request.headers.get("Origin")
    if not origin or origin == "null":
        return not origin
    try:
        netloc = urlsplit(origin).netloc
    except ValueError:  # (a malformed one: "http://[::1")
        return False
    if netloc and netloc == request.get_host():
        return True
    if origin in getattr(settings, "CSRF_TRUSTED_ORIGINS", []):
        return True
    allowed = list(settings.ALLOWED_HOSTS)
    if settings.DEBUG and not allowed:
        allowed = [".localhost", "127.0.0.1", "[::1]"]
    host, _, _ = netloc.rpartition(":") if netloc.count(":") == 1 else (netloc, "", "")
    return bool(netloc) and validate_host(host or netloc, allowed)


async def serve(request: HttpRequest) -> HttpResponse | StreamingHttpResponse:
    """The Streamable HTTP endpoint: a bearer token (never a cookie), then the SDK's transport."""
    try:
        request.get_host()  # ALLOWED_HOSTS, as for every Django view
    except DisallowedHost:
        return refused(400, "bad_host", gettext("This host is not allowed."))
    if not origin_allowed(request):
        return refused(
            403, "origin_not_allowed", gettext("Requests from this origin are not allowed.")
        )
    scheme, _, key = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        return refused(
            401,
            "not_authenticated",
            gettext("Send a bearer token: Authorization: Bearer <token>."),
            WWW_Authenticate=oauth.challenge(request),
        )
    try:
        bearer = await aauthenticate_bearer(key, resource=oauth.resource_of(request))
    except Exception as exc:
        unavailable = outage(exc)
        if unavailable is not None:
            return unavailable_response(unavailable)
        if not isinstance(exc, AssistantError):
            raise
        return refused(
            401,
            exc.code,
            exc.message,
            WWW_Authenticate=oauth.challenge(request, error="invalid_token"),
        )
    caller = Caller(
        bearer=bearer,
        request_ip=request.META.get("REMOTE_ADDR") or None,
        base_url=f"{request.scheme}://{request.get_host()}",
    )
    scope = dict(getattr(request, "scope", None) or _scope_of(request))
    scope[SCOPE_KEY] = caller
    scope["user"] = sdk_user(bearer)
    try:
        body = request.body
    except RequestDataTooBig:  # past DATA_UPLOAD_MAX_MEMORY_SIZE, before the SDK's own limit
        return refused(413, "request_too_large", gettext("The request body is too large."))
    return await _bridged(scope, body)


def _scope_of(request: HttpRequest) -> dict[str, Any]:
    """An ASGI scope for a request that came without one (a WSGI server, Django's test client)."""
    headers = [
        (name.lower().encode("latin-1"), value.encode("latin-1"))
        for name, value in request.headers.items()
    ]
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": request.method,
        "scheme": request.scheme,
        "path": request.path,
        "raw_path": request.path.encode(),
        "query_string": request.META.get("QUERY_STRING", "").encode(),
        "headers": headers,
        "client": (request.META.get("REMOTE_ADDR") or "", 0),
        "server": (request.get_host(), 0),
    }


async def _bridged(scope: dict[str, Any], body: bytes) -> HttpResponse | StreamingHttpResponse:
    """Run the SDK's ASGI handler for one request and answer with what it sends (streamed)."""
    messages: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    gone = asyncio.Event()
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        await messages.put(dict(message))

    async def handle() -> None:
        try:
            await endpoint.handle(scope, receive, send)
        finally:
            await messages.put({"type": "assistant.done"})

    task = asyncio.ensure_future(handle())
    try:
        start = await messages.get()
        first = await messages.get() if start["type"] == "http.response.start" else start
    except asyncio.CancelledError:  # the client left before the answer began (Django noticed)
        gone.set()
        with suppress(TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(asyncio.shield(task), 5)
        raise
    if start["type"] != "http.response.start":
        gone.set()
        await task
        logger.error("The MCP transport answered without a response")
        return refused(
            503, "mcp_unavailable", gettext("The MCP endpoint could not answer; try again.")
        )
    status = start["status"]
    headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in start.get("headers", [])]
    if first["type"] != "http.response.body" or not first.get("more_body", False):
        gone.set()
        await task
        body = first.get("body", b"")
        kind = next((v for k, v in headers if k.lower() == "content-type"), "")
        if status >= 400 and not kind.startswith("application/json"):
            # the transport's own refusals (a wrong content type or method) speak JSON too
            detail = body.decode("utf-8", "replace").strip() or gettext("The request was refused.")
            return refused(status, TRANSPORT_CODES.get(status, "bad_request"), detail)
        response = HttpResponse(body, status=status)
        _copy_headers(response, headers)
        return response

    async def chunks() -> AsyncIterator[bytes]:
        message = first
        try:
            while message["type"] == "http.response.body":
                if message.get("body"):
                    yield message["body"]
                if not message.get("more_body", False):
                    break
                message = await messages.get()
        finally:
            gone.set()  # the client went away, or the stream ended: the SDK cleans up
            if not task.done():
                try:
                    await asyncio.wait_for(asyncio.shield(task), 5)
                except (TimeoutError, asyncio.CancelledError):
                    task.cancel()

    streaming = StreamingHttpResponse(chunks(), status=status)
    _copy_headers(streaming, headers)
    streaming.headers.setdefault("X-Accel-Buffering", "no")
    return streaming


def _copy_headers(
    response: HttpResponse | StreamingHttpResponse, headers: list[tuple[str, str]]
) -> None:
    for name, value in headers:
        if name.lower() not in ("content-length",):
            response.headers[name] = value
