"""The DRF set-up the HTTP transports share: authentication, errors, schema, the base view.

It declares everything itself, so the host project's ``REST_FRAMEWORK`` settings never leak in.
"""

from __future__ import annotations

import logging
from typing import Any

from django.apps import apps
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.http import Http404
from django.utils.translation import gettext, gettext_lazy
from drf_spectacular.authentication import SessionScheme
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import extend_schema as spectacular_extend_schema
from rest_framework import exceptions, status
from rest_framework.authentication import (
    BaseAuthentication,
    SessionAuthentication,
    TokenAuthentication,
    get_authorization_header,
)
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.pagination import BasePagination
from rest_framework.permissions import SAFE_METHODS, BasePermission, IsAuthenticated
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import BaseSerializer
from rest_framework.views import APIView

from ... import telemetry
from ...access.credentials import Credential, of_bearer, of_session
from ...access.permissions import session_user_is_inactive
from ...access.tokens import Bearer, authenticate_bearer
from ...dispatch.calls import CallContext, Outcome
from ...exceptions import AccountInactive, AssistantError, InvalidToken, outage
from ..throttling import AssistantThrottle
from .parsers import BODY_PARSERS
from .serializers import ErrorSerializer, OutcomeErrorSerializer, OutcomeSerializer

logger = logging.getLogger("assistant.api")


def account_inactive() -> exceptions.AuthenticationFailed:
    """The 401 a deactivated user's token or session gets (``account_inactive``)."""
    return exceptions.AuthenticationFailed(AccountInactive().message, code=AccountInactive.code)


class BrowserSessionAuthentication(SessionAuthentication):
    """Session auth (CSRF enforced) that still lets DRF answer 401 rather than 403."""

    def authenticate(self, request: Request) -> Any:
        authenticated = super().authenticate(request)
        if authenticated is None and session_user_is_inactive(
            getattr(request._request, "session", None)
        ):
            raise account_inactive()
        return authenticated

    def authenticate_header(self, request: Request) -> str:
        return 'Session realm="assistant"'


class AssistantTokenAuthentication(TokenAuthentication):
    """DRF's token auth (when ``rest_framework.authtoken`` is installed), a deactivated user's
    token answered ``account_inactive`` rather than DRF's generic failure."""

    def authenticate_credentials(self, key: str) -> Any:
        try:
            return super().authenticate_credentials(key)
        except exceptions.AuthenticationFailed:
            if self.get_model()._default_manager.filter(key=key, user__is_active=False).exists():
                raise account_inactive() from None
            raise


class BearerAuthentication(BaseAuthentication):
    """``Authorization: Bearer <key>``: a personal access token, or a DRF token's key
    (``tokens.authenticate_bearer``); ``request.auth`` is the ``tokens.Bearer``."""

    def authenticate(self, request: Request) -> tuple[Any, Bearer] | None:
        words = get_authorization_header(request).split()
        if not words or words[0].lower() != b"bearer":
            return None
        if len(words) != 2:
            raise exceptions.AuthenticationFailed(
                gettext("Send one token: Authorization: Bearer <token>."), code=InvalidToken.code
            )
        try:
            bearer = authenticate_bearer(words[1].decode("ascii"))
        except UnicodeDecodeError:
            raise exceptions.AuthenticationFailed(
                gettext("This token is not valid."), code=InvalidToken.code
            ) from None
        except InvalidToken as exc:
            raise exceptions.AuthenticationFailed(exc.message, code=exc.code) from None
        except AccountInactive:
            raise account_inactive() from None
        return bearer.user, bearer

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="assistant"'


class BrowserSessionScheme(SessionScheme):  # type: ignore[no-untyped-call]
    target_class = "assistant.surfaces.drf.base.BrowserSessionAuthentication"


ERROR_RESPONSES = {
    "400": "The request is not valid (`errors` names the fields)",
    "401": "Not signed in: no, or a bad, token or session",
    "403": "Refused: a missing permission, or a session request without its CSRF token",
    "404": "No such object of yours (or no such page)",
    "429": "Too many requests: wait `Retry-After` seconds",
    "503": "The database cannot be reached (`database_unavailable`): wait `Retry-After` seconds",
}


class AssistantAutoSchema(AutoSchema):
    """Documents, besides each operation's own answers, the error bodies every view may send
    (400 too: every view refuses a query string holding a NUL character, whatever it reads)."""

    def _get_response_bodies(self, direction: Any = "response") -> dict[str, Any]:
        responses: dict[str, Any] = super()._get_response_bodies(direction)
        for code, description in ERROR_RESPONSES.items():
            if code not in responses:
                response = self._get_response_for_code(  # type: ignore[no-untyped-call]
                    ErrorSerializer, code, direction=direction
                )
                responses[code] = {**response, "description": description}
        return responses


def extend_schema(**kwargs: Any) -> Any:
    """drf-spectacular's ``extend_schema`` on our own AutoSchema, whatever the host's default."""

    def decorator(method: Any) -> Any:
        method.schema = AssistantAutoSchema
        return spectacular_extend_schema(**kwargs)(method)

    return decorator


# A tool call answers with its outcome; refused, the outcome carries code and detail too (its
# 400/403/404 share the plain error body's fields).
OUTCOME_RESPONSES = {
    200: OutcomeSerializer,
    **{status: OutcomeErrorSerializer for status in (409, 410, 503, 504)},
}


def error_body(code: str, detail: Any, errors: Any = None) -> dict[str, Any]:
    body: dict[str, Any] = {"code": code, "detail": str(detail)}
    if errors:
        body["errors"] = errors
    return body


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    """Every error as JSON with a stable ``code``; never an HTML page, never a bare 500."""
    exc = outage(exc) or exc  # the database down: 503 database_unavailable, not a 500
    if isinstance(exc, AssistantError):
        retry_after = getattr(exc, "retry_after", None)
        return Response(
            error_body(exc.code, exc.message, getattr(exc, "errors", None)),
            status=exc.status,
            headers={"Retry-After": str(retry_after)} if retry_after else None,
        )
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    elif isinstance(exc, RequestDataTooBig):  # past DATA_UPLOAD_MAX_MEMORY_SIZE: nothing read
        return Response(
            error_body("request_too_large", gettext("The request body is too large.")),
            status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
        )
    elif isinstance(exc, SuspiciousOperation):  # (too many fields, a malformed multipart body)
        return Response(
            error_body("bad_request", gettext("The request could not be read.")),
            status=status.HTTP_400_BAD_REQUEST,
        )
    if not isinstance(exc, exceptions.APIException):
        logger.exception("Unhandled error in the assistant API", exc_info=exc)
        return Response(
            error_body("server_error", gettext("Something went wrong on our side.")),
            status=status.HTTP_500_INTERNAL_SERVER_ERROR,
        )
    headers: dict[str, str] = {}
    if getattr(exc, "auth_header", None):
        headers["WWW-Authenticate"] = exc.auth_header  # type: ignore[attr-defined]
    wait = getattr(exc, "wait", None) if isinstance(exc, exceptions.Throttled) else None
    if wait is not None:
        headers["Retry-After"] = str(int(wait))
    if isinstance(exc, exceptions.ValidationError):
        return Response(
            error_body("invalid", gettext("The request is not valid."), exc.detail),
            status=exc.status_code,
            headers=headers,
        )
    code = exc.get_codes()
    return Response(
        error_body(code if isinstance(code, str) else exc.default_code, exc.detail),
        status=exc.status_code,
        headers=headers,
    )


class WithinTokenScope(BasePermission):
    """A token with a ceiling changes things only through the tools it reaches: its writes go to
    views that apply the ceiling themselves (dispatch, turns, confirmations); reads go anywhere."""

    message = gettext_lazy("This token may only use the tools within its ceiling.")
    code = "token_scope"

    def has_permission(self, request: Request, view: APIView) -> bool:
        auth = request.auth
        if not isinstance(auth, Bearer) or auth.ceiling is None:
            return True
        if request.method in SAFE_METHODS or getattr(view, "applies_ceiling", False):
            return True
        # any token may revoke itself (a leaked one, say), whatever its ceiling
        revokes_itself = auth.kind == "personal" and view.kwargs.get("token_id") == auth.token_id
        return request.method == "DELETE" and revokes_itself


class AssistantAPIView(APIView):
    """Declares everything itself, so the host project's REST_FRAMEWORK settings never leak in."""

    permission_classes = [IsAuthenticated, WithinTokenScope]
    applies_ceiling = False  # its writes are tool calls that dispatch checks against the ceiling
    throttle_classes = [AssistantThrottle]
    renderer_classes = [JSONRenderer]
    parser_classes = BODY_PARSERS  # JSON, and a browser form (JSON_ONLY where values are typed)
    content_negotiation_class = DefaultContentNegotiation
    versioning_class = None
    schema = AssistantAutoSchema()
    pagination_class: type[BasePagination]  # list views say how they page (and the schema shows it)

    def paginated(self, rows: Any, serializer: type[BaseSerializer[Any]]) -> Response:
        """One page of ``rows`` in this view's pagination envelope."""
        paginator = self.pagination_class()
        page: Any = paginator.paginate_queryset(rows, self.request, view=self)
        return paginator.get_paginated_response(serializer(page, many=True).data)

    def get_authenticators(self) -> list[BaseAuthentication]:
        # the first one's authenticate_header is every 401's WWW-Authenticate
        authenticators: list[BaseAuthentication] = [BearerAuthentication()]
        if apps.is_installed("rest_framework.authtoken"):
            authenticators.append(AssistantTokenAuthentication())
        authenticators.append(BrowserSessionAuthentication())
        return authenticators

    def get_exception_handler(self) -> Any:
        return exception_handler

    def dispatch(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        """The view, continuing its caller's trace (a ``traceparent`` header) when traced."""
        with telemetry.incoming(telemetry.carrier_of(request.headers)):
            return super().dispatch(request, *args, **kwargs)

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        for name, values in request.query_params.lists():
            if "\x00" in name or any("\x00" in value for value in values):
                name = name.replace("\x00", "\\x00")
                raise exceptions.ValidationError({name: "a NUL character is not allowed"})

    def client_ip(self) -> str | None:
        return self.request.META.get("REMOTE_ADDR") or None

    def bearer(self) -> Bearer | None:
        """The bearer token this request came with (None for a session or a ``Token`` key)."""
        auth = self.request.auth
        return auth if isinstance(auth, Bearer) else None

    def credential(self) -> Credential | None:
        """What signed this request in, for a run to confirm again between its steps."""
        auth = self.request.auth
        if isinstance(auth, Bearer):
            return of_bearer(auth)
        if auth is not None and getattr(auth, "key", None) and getattr(auth, "user_id", None):
            return Credential(kind="drf", user_id=auth.user_id, key=auth.key)  # a DRF ``Token``
        return of_session(getattr(self.request._request, "session", None), self.request.user)

    def call_context(self, **changes: Any) -> CallContext:
        """The context of the calls this request makes: under its bearer token's ceiling."""
        bearer = self.bearer()
        return CallContext(
            user=self.request.user,
            source="rest",
            request_ip=self.client_ip(),
            ceiling=bearer.ceiling if bearer else None,
            client=bearer.name if bearer else "",
            **changes,
        )

    def outcome_response(self, outcome: Outcome) -> Response:
        serializer: Any = OutcomeSerializer(outcome)  # its "data" field shadows .data for mypy
        body: dict[str, Any] = dict(serializer.data)
        if outcome.error is not None and outcome.status >= 400:
            body = {**error_body(outcome.error.code, outcome.error.message), **body}
        return Response(body, status=outcome.status)
