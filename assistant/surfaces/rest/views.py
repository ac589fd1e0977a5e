"""REST views: thin transports over ``chat`` and ``dispatch``, independent of the host's DRF settings."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from django.apps import apps
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.db.models import Count, QuerySet
from django.http import Http404
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime
from drf_spectacular.authentication import SessionScheme
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiParameter
from drf_spectacular.utils import extend_schema as spectacular_extend_schema
from rest_framework import exceptions, status
from rest_framework.authentication import (
    BaseAuthentication,
    SessionAuthentication,
    TokenAuthentication,
    get_authorization_header,
)
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.pagination import BasePagination, CursorPagination, PageNumberPagination
from rest_framework.permissions import SAFE_METHODS, BasePermission, IsAuthenticated
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import BaseSerializer
from rest_framework.views import APIView

from ...access.credentials import Credential, of_bearer, of_session
from ...access.permissions import IsAuditViewer, access_for, denials, session_user_is_inactive
from ...access.tokens import Bearer, authenticate_bearer, issue
from ...core.registry import registry
from ...dispatch.catalog import get_catalog, visible_tools
from ...dispatch.confirmation import cancel_action, confirm_action, record_action, stop_job
from ...dispatch.door import CallContext, Outcome, dispatch
from ...exceptions import (
    AccountInactive,
    AssistantError,
    CredentialLapsed,
    InvalidToken,
    SessionRequired,
    UnknownTokenOperations,
    outage,
)
from ...jobs import job_for
from ...models import (
    AccessToken,
    AuditEntry,
    Conversation,
    Job,
    PendingAction,
    ValidationRun,
    ValidationTask,
)
from ...turns.chat import (
    conversation_for,
    delete_conversations,
    rename_conversation,
    run_turn,
    search_conversations,
)
from ...validation import ValidationTaskService
from ..throttling import AssistantThrottle
from .parsers import BODY_PARSERS, JSON_ONLY
from .serializers import (
    AccessTokenCreatedSerializer,
    AccessTokenInput,
    AccessTokenSerializer,
    AuditEntrySerializer,
    CancelInput,
    ConfirmInput,
    ConversationDetailSerializer,
    ConversationInput,
    ConversationSerializer,
    DeletedSerializer,
    DispatchInput,
    ErrorSerializer,
    JobSerializer,
    MessageInput,
    MessageSerializer,
    OutcomeErrorSerializer,
    OutcomeSerializer,
    PendingActionSerializer,
    StaffConversationHistorySerializer,
    StaffConversationSerializer,
    ToolCatalogSerializer,
    ToolSerializer,
    TurnSerializer,
    ValidationRunSerializer,
    ValidationTaskInput,
    ValidationTaskSerializer,
)

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
                "Send one token: Authorization: Bearer <token>.", code=InvalidToken.code
            )
        try:
            bearer = authenticate_bearer(words[1].decode("ascii"))
        except UnicodeDecodeError:
            raise exceptions.AuthenticationFailed(
                "This token is not valid.", code=InvalidToken.code
            ) from None
        except InvalidToken as exc:
            raise exceptions.AuthenticationFailed(exc.message, code=exc.code) from None
        except AccountInactive:
            raise account_inactive() from None
        return bearer.user, bearer

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="assistant"'


class BrowserSessionScheme(SessionScheme):  # type: ignore[no-untyped-call]
    target_class = "assistant.surfaces.rest.views.BrowserSessionAuthentication"


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
            error_body("request_too_large", "The request body is too large."),
            status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
        )
    elif isinstance(exc, SuspiciousOperation):  # (too many fields, a malformed multipart body)
        return Response(
            error_body("bad_request", "The request could not be read."),
            status=status.HTTP_400_BAD_REQUEST,
        )
    if not isinstance(exc, exceptions.APIException):
        logger.exception("Unhandled error in the assistant API", exc_info=exc)
        return Response(
            error_body("server_error", "Something went wrong on our side."),
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
            error_body("invalid", "The request is not valid.", exc.detail),
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

    message = "This token may only use the tools within its ceiling."
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


MAX_SEARCH_LENGTH = 200


def owner_id(request: Request) -> Any:
    return request.user.pk


class PagePagination(PageNumberPagination):
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200


class AuditCursorPagination(CursorPagination):
    ordering = "-id"
    page_size = 100
    page_size_query_param = "page_size"
    max_page_size = 1000


class ToolsView(AssistantAPIView):
    @extend_schema(
        summary="The tools you may use",
        parameters=[
            OpenApiParameter(
                "style",
                str,
                enum=["inventory", "openai", "anthropic"],
                description="inventory (default), or an LLM tool format",
            )
        ],
        responses=ToolCatalogSerializer,
    )
    def get(self, request: Request) -> Response:
        style = request.query_params.get("style", "inventory")
        ceiling = self.call_context().ceiling
        if style == "openai" or style == "anthropic":
            return Response({"tools": get_catalog(request.user, style=style, ceiling=ceiling)})  # type: ignore[arg-type]
        if style != "inventory":
            raise exceptions.ValidationError({"style": "choose inventory, openai or anthropic"})
        tools = visible_tools(request.user, ceiling=ceiling)
        return Response({"tools": ToolSerializer(tools, many=True).data})


class MessagesView(AssistantAPIView):
    applies_ceiling = True

    @extend_schema(
        summary="Send a message: one turn",
        request=MessageInput,
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                str,
                OpenApiParameter.HEADER,
                description="A retry with the same key returns the first turn, not a second one.",
            )
        ],
        responses={
            201: TurnSerializer,
            400: ErrorSerializer,
            409: ErrorSerializer,
            503: ErrorSerializer,
        },
    )
    def post(self, request: Request) -> Response:
        data = MessageInput(data=request.data)
        data.is_valid(raise_exception=True)
        context = self.call_context()
        turn = run_turn(
            request.user,
            data.validated_data["message"],
            conversation_id=data.validated_data.get("conversation"),
            source=context.source,
            request_ip=context.request_ip,
            idempotency_key=request.headers.get("Idempotency-Key"),
            ceiling=context.ceiling,
            client=context.client,
            credential=self.credential(),
        )
        if isinstance(turn.error, CredentialLapsed):
            # it lapsed while the turn ran: the turn stopped there, and is stored as failed
            body = {**error_body(turn.error.code, turn.error.message)}
            body["conversation"] = str(turn.conversation.pk)
            header = self.get_authenticate_header(request)
            return Response(body, status=turn.error.status, headers={"WWW-Authenticate": header})
        return Response(TurnSerializer(turn).data, status=status.HTTP_201_CREATED)


class DispatchView(AssistantAPIView):
    applies_ceiling = True
    parser_classes = JSON_ONLY  # entities are typed JSON values

    @extend_schema(
        summary="Call one tool",
        request=DispatchInput,
        responses={**OUTCOME_RESPONSES, 202: OutcomeSerializer},
    )
    def post(self, request: Request) -> Response:
        data = DispatchInput(data=request.data)
        data.is_valid(raise_exception=True)
        conversation = None
        if data.validated_data.get("conversation"):
            conversation = conversation_for(request.user, data.validated_data["conversation"])
        outcome = dispatch(
            data.validated_data["operation"],
            data.validated_data["entities"],
            context=self.call_context(conversation=conversation),
        )
        return self.outcome_response(outcome)


class ActionListView(AssistantAPIView):
    pagination_class = PagePagination

    @extend_schema(
        summary="Your pending actions (or, ?awaiting=approval, others' you may approve)",
        parameters=[
            OpenApiParameter("status", str, enum=list(PendingAction.Status.values)),
            OpenApiParameter(
                "awaiting",
                str,
                enum=["approval"],
                description="other people's waiting two_person actions you may approve",
            ),
        ],
        responses=PendingActionSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        awaiting = request.query_params.get("awaiting")
        if awaiting is not None:
            if awaiting != "approval":
                raise exceptions.ValidationError({"awaiting": "only 'approval'"})
            return self.paginated(
                PendingAction.objects.awaiting_approval_by(request.user), PendingActionSerializer
            )
        actions = PendingAction.objects.owned_by(request.user).select_related("user")
        wanted = request.query_params.get("status")
        if wanted == PendingAction.Status.PENDING:
            actions = actions.waiting()
        elif wanted:
            if wanted not in PendingAction.Status.values:
                raise exceptions.ValidationError({"status": "unknown status"})
            actions = actions.filter(status=wanted)
        return self.paginated(actions, PendingActionSerializer)


class ActionConfirmView(AssistantAPIView):
    applies_ceiling = True

    @extend_schema(
        summary="Confirm a pending action (runs it once, as its requester)",
        request=ConfirmInput,
        responses=OUTCOME_RESPONSES,
    )
    def post(self, request: Request, action_id: str) -> Response:
        data = ConfirmInput(data=request.data)
        data.is_valid(raise_exception=True)
        return self.outcome_response(
            confirm_action(
                action_id,
                reason=data.validated_data["reason"],
                phrase=data.validated_data["phrase"],
                context=self.call_context(),
            )
        )


class ActionCancelView(AssistantAPIView):
    applies_ceiling = True

    @extend_schema(
        summary="Refuse a pending action", request=CancelInput, responses=OUTCOME_RESPONSES
    )
    def post(self, request: Request, action_id: str) -> Response:
        data = CancelInput(data=request.data)
        data.is_valid(raise_exception=True)
        return self.outcome_response(
            cancel_action(
                action_id, reason=data.validated_data["reason"], context=self.call_context()
            )
        )


def _with_counts(conversations: QuerySet[Conversation]) -> QuerySet[Conversation]:
    # GROUP BY drops Meta.ordering: restate it, newest activity first.
    return conversations.annotate(message_count=Count("messages")).order_by("-updated_at", "-id")


class ConversationListView(AssistantAPIView):
    pagination_class = PagePagination

    @extend_schema(
        summary="Your conversations, most recently used first",
        parameters=[
            OpenApiParameter(
                "search",
                str,
                description="only those whose title or messages hold every word (any case)",
            )
        ],
        responses=ConversationSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        conversations = Conversation.objects.filter(user_id=owner_id(request))
        wanted = request.query_params.get("search", "")
        if len(wanted) > MAX_SEARCH_LENGTH:
            raise exceptions.ValidationError({"search": f"at most {MAX_SEARCH_LENGTH} characters"})
        if wanted.strip():
            conversations = search_conversations(conversations, wanted)
        return self.paginated(_with_counts(conversations), ConversationSerializer)

    @extend_schema(
        summary="Delete all your conversations (their waiting actions are cancelled)",
        operation_id="conversations_destroy_all",
        responses={200: DeletedSerializer},
    )
    def delete(self, request: Request) -> Response:
        deleted = delete_conversations(
            request.user,
            Conversation.objects.filter(user_id=owner_id(request)),
            source="rest",
            request_ip=self.client_ip(),
        )
        return Response({"deleted": deleted})


class ConversationDetailView(AssistantAPIView):
    def conversation(self, request: Request, conversation_id: str) -> Conversation:
        return conversation_for(request.user, conversation_id)

    @extend_schema(
        summary="One of your conversations with its messages",
        responses=ConversationDetailSerializer,
    )
    def get(self, request: Request, conversation_id: str) -> Response:
        conversation = self.conversation(request, conversation_id)
        conversation = (
            _with_counts(Conversation.objects.filter(pk=conversation.pk))
            .prefetch_related("messages")
            .get()
        )
        return Response(ConversationDetailSerializer(conversation).data)

    @extend_schema(
        summary="Rename one of your conversations",
        request=ConversationInput,
        responses={200: ConversationSerializer},
    )
    def patch(self, request: Request, conversation_id: str) -> Response:
        data = ConversationInput(data=request.data)
        data.is_valid(raise_exception=True)
        conversation = rename_conversation(
            request.user, conversation_id, data.validated_data["title"]
        )
        row = _with_counts(Conversation.objects.filter(pk=conversation.pk)).get()
        return Response(ConversationSerializer(row).data)

    @extend_schema(
        summary="Delete one of your conversations (its waiting actions are cancelled)",
        responses={204: None},
    )
    def delete(self, request: Request, conversation_id: str) -> Response:
        conversation = self.conversation(request, conversation_id)
        delete_conversations(
            request.user,
            Conversation.objects.filter(pk=conversation.pk),
            source="rest",
            request_ip=self.client_ip(),
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


class StaffView(AssistantAPIView):
    permission_classes = [IsAuthenticated, WithinTokenScope, IsAuditViewer]

    def staff_conversation(self, conversation_id: str) -> Conversation:
        conversation = Conversation.objects.filter(pk=conversation_id).first()
        if conversation is None:
            raise exceptions.NotFound("No such conversation.")
        return conversation


class StaffConversationListView(StaffView):
    pagination_class = PagePagination

    @extend_schema(
        summary="Every user's conversations (staff)",
        parameters=[OpenApiParameter("user", str, description="user id or username")],
        responses=StaffConversationSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        conversations = _with_counts(Conversation.objects.select_related("user"))
        wanted = request.query_params.get("user")
        if wanted:
            conversations = conversations.filter(**_user_filter("user", wanted))
        return self.paginated(conversations, StaffConversationSerializer)


class IsConversationDeleter(BasePermission):
    """Staff holding ``assistant.delete_conversation``: reading the audit is not leave to erase."""

    message = "Staff with the permission to delete conversations only."

    def has_permission(self, request: Request, view: APIView) -> bool:
        user = request.user
        return bool(user.is_staff and user.has_perm("assistant.delete_conversation"))


class StaffConversationDetailView(StaffView):
    permission_classes = [IsAuthenticated, WithinTokenScope, IsConversationDeleter]

    @extend_schema(
        summary="Delete any user's conversation (staff with assistant.delete_conversation)",
        responses={204: None},
    )
    def delete(self, request: Request, conversation_id: str) -> Response:
        conversation = self.staff_conversation(conversation_id)
        delete_conversations(
            request.user,
            Conversation.objects.filter(pk=conversation.pk),
            source="rest",
            request_ip=self.client_ip(),
            as_staff=True,
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


class StaffConversationHistoryView(StaffView):
    @extend_schema(
        summary="A conversation's messages (staff)", responses=StaffConversationHistorySerializer
    )
    def get(self, request: Request, conversation_id: str) -> Response:
        conversation = self.staff_conversation(conversation_id)
        return Response(
            {
                "conversation": StaffConversationSerializer(
                    _with_counts(Conversation.objects.filter(pk=conversation.pk)).get()
                ).data,
                "messages": MessageSerializer(conversation.messages.all(), many=True).data,
            }
        )


MAX_ID = 2**63 - 1  # the largest id any database column here holds


def parse_id(value: str) -> int | None:
    """A positive id written in ASCII digits, or ``None`` (Unicode digits, out of range)."""
    if not (value.isascii() and value.isdigit()) or len(value) > len(str(MAX_ID)):
        return None
    number = int(value)
    return number if 0 < number <= MAX_ID else None


def query_id(name: str, value: str) -> int:
    """An id given as query parameter ``name``; a 400 ``invalid`` naming it otherwise."""
    number = parse_id(value)
    if number is None:
        raise exceptions.ValidationError(
            {name: f"expected an id from 1 to {MAX_ID}, in digits 0-9"}
        )
    return number


def _user_filter(field: str, value: str) -> dict[str, Any]:
    """Digits are a user id (``query_id`` rules apply), anything else a username."""
    if value.isdigit():
        return {f"{field}_id": query_id(field, value)}
    return {f"{field}__username": value}


def _bound(name: str, value: str) -> dict[str, Any]:
    """A ``since``/``until`` filter: a whole day for a date, an instant for a date-time."""
    end = name == "until"
    try:
        if len(value) == 10:
            day = parse_date(value)
            if day is not None:
                return {"created_at__date__lte" if end else "created_at__date__gte": day}
        moment = parse_datetime(value)
    except ValueError:
        moment = None
    if moment is None:
        raise exceptions.ValidationError({name: f"{value!r} is not a date or an ISO date-time"})
    try:
        if timezone.is_naive(moment):
            moment = timezone.make_aware(moment)
        moment.astimezone(dt.UTC)  # (as the database stores it: year 1 to 9999 in UTC)
    except OverflowError:
        raise exceptions.ValidationError({name: f"{value!r} is out of range"}) from None
    return {"created_at__lte" if end else "created_at__gte": moment}


class AuditListView(StaffView):
    pagination_class = AuditCursorPagination

    @extend_schema(
        summary="The audit trail (staff), newest first, cursor-paginated",
        parameters=[
            OpenApiParameter("user", str, description="user id or username"),
            OpenApiParameter("operation", str),
            OpenApiParameter("decision", str, enum=list(AuditEntry.Decision.values)),
            OpenApiParameter("since", str, description="date or ISO date-time (inclusive)"),
            OpenApiParameter("until", str, description="date or ISO date-time (inclusive)"),
        ],
        responses=AuditEntrySerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        entries = AuditEntry.objects.all()
        params = request.query_params
        if params.get("user"):
            entries = entries.filter(**_user_filter("user", params["user"]))
        if params.get("operation"):
            entries = entries.filter(operation=params["operation"])
        if params.get("decision"):
            if params["decision"] not in AuditEntry.Decision.values:
                raise exceptions.ValidationError({"decision": "unknown decision"})
            entries = entries.filter(decision=params["decision"])
        for name in ("since", "until"):
            if params.get(name):
                entries = entries.filter(**_bound(name, params[name]))
        return self.paginated(entries, AuditEntrySerializer)


class JobListView(AssistantAPIView):
    pagination_class = PagePagination

    @extend_schema(
        summary="Your background jobs (staff with assistant.view_job: everyone's with ?all=1)",
        parameters=[
            OpenApiParameter("status", str, enum=list(Job.Status.values)),
            OpenApiParameter("all", bool),
        ],
        responses=JobSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        jobs = Job.objects.select_related("user")
        if request.query_params.get("all") in ("1", "true"):
            jobs = jobs.visible_to(request.user)
        else:
            jobs = jobs.owned_by(request.user)
        wanted = request.query_params.get("status")
        if wanted:
            if wanted not in Job.Status.values:
                raise exceptions.ValidationError({"status": "unknown status"})
            jobs = jobs.filter(status=wanted)
        return self.paginated(jobs.order_by("-created_at"), JobSerializer)


class JobDetailView(AssistantAPIView):
    @extend_schema(summary="One job: status, progress, result", responses=JobSerializer)
    def get(self, request: Request, job_id: str) -> Response:
        return Response(JobSerializer(job_for(request.user, job_id)).data)


class JobCancelView(AssistantAPIView):
    @extend_schema(
        summary="Ask a job to stop (a running one stops at its next check)",
        request=None,
        responses=JobSerializer,
    )
    def post(self, request: Request, job_id: str) -> Response:
        job = stop_job(job_id, context=self.call_context())
        return Response(JobSerializer(job).data)


def _tasks_for(user: Any, perm: str = "view") -> QuerySet[ValidationTask]:
    """Validation tasks this user holds ``perm`` on, globally or on the task (guardian)."""
    from guardian.shortcuts import get_objects_for_user

    return get_objects_for_user(
        user, f"assistant.{perm}_validationtask", klass=ValidationTask, accept_global_perms=True
    )


def _task_for(user: Any, task_id: Any) -> ValidationTask:
    """The validation task with this path id that the user may view, or a 404."""
    pk = parse_id(str(task_id))
    task = _tasks_for(user).filter(pk=pk).first() if pk is not None else None
    if task is None:
        raise exceptions.NotFound("No such validation task.")
    return task


class ValidationTaskListView(AssistantAPIView):
    pagination_class = PagePagination
    parser_classes = JSON_ONLY  # rules, target_filter and schedule are nested JSON

    @extend_schema(
        summary="Validation tasks you may see", responses=ValidationTaskSerializer(many=True)
    )
    def get(self, request: Request) -> Response:
        tasks = _tasks_for(request.user).select_related("owner", "target_type").order_by("name")
        return self.paginated(tasks, ValidationTaskSerializer)

    @extend_schema(
        summary="Create a validation task (you become its owner: view, change, run)",
        request=ValidationTaskInput,
        responses={201: ValidationTaskSerializer},
    )
    def post(self, request: Request) -> Response:
        if not request.user.has_perm("assistant.add_validationtask"):
            raise exceptions.PermissionDenied("You may not create validation tasks.")
        data = ValidationTaskInput(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        task = ValidationTaskService.create_task(
            name=values.get("name") or "",
            target=values["target"],
            owner=request.user,
            rules=values.get("rules"),
            target_filter=values.get("target_filter"),
            schedule=values.get("schedule"),
            enabled=values.get("enabled", True),
        )
        return Response(ValidationTaskSerializer(task).data, status=status.HTTP_201_CREATED)


class ValidationTaskDetailView(AssistantAPIView):
    @extend_schema(summary="One validation task", responses=ValidationTaskSerializer)
    def get(self, request: Request, task_id: int) -> Response:
        task = _task_for(request.user, task_id)
        return Response(ValidationTaskSerializer(task).data)


class ValidationTaskRunView(AssistantAPIView):
    @extend_schema(
        summary="Run a validation task now (a job)",
        request=None,
        responses={202: ValidationRunSerializer},
    )
    def post(self, request: Request, task_id: int) -> Response:
        task = _task_for(request.user, task_id)
        if not _tasks_for(request.user, "run").filter(pk=task.pk).exists():
            raise exceptions.PermissionDenied("You may not run this validation task.")
        run = ValidationTaskService.trigger_run(task, ValidationRun.Trigger.USER, user=request.user)
        record_action(  # audited as the admin's Run now is
            request,
            "validation_run",
            {"task": task.pk, "run": run.pk},
            domain="validation",
            source="rest",
        )
        run.refresh_from_db()
        return Response(ValidationRunSerializer(run).data, status=status.HTTP_202_ACCEPTED)


class ValidationRunListView(AssistantAPIView):
    pagination_class = PagePagination

    @extend_schema(
        summary="Runs of the validation tasks you may see, newest first",
        parameters=[OpenApiParameter("task", int)],
        responses=ValidationRunSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        runs = ValidationRun.objects.filter(task__in=_tasks_for(request.user)).prefetch_related(
            "findings"
        )
        wanted = request.query_params.get("task")
        if wanted:
            runs = runs.filter(task_id=query_id("task", wanted))
        return self.paginated(runs.order_by("-created_at", "-id"), ValidationRunSerializer)


def _token_for(user: Any, token_id: Any) -> AccessToken:
    """One of the user's tokens by path id; someone else's is as missing as no token at all."""
    pk = parse_id(str(token_id))
    token = AccessToken.objects.owned_by(user).filter(pk=pk).first() if pk is not None else None
    if token is None:
        raise exceptions.NotFound("No such token of yours.")
    return token


class AccessTokenListView(AssistantAPIView):
    pagination_class = PagePagination

    @extend_schema(
        summary="Your personal access tokens, newest first (their secrets are never shown again)",
        responses=AccessTokenSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        tokens = AccessToken.objects.owned_by(request.user).order_by("-created_at", "-id")
        return self.paginated(tokens, AccessTokenSerializer)

    @extend_schema(
        summary="Create a personal access token (from a browser session; the answer holds its "
        "secret, this once)",
        request=AccessTokenInput,
        responses={201: AccessTokenCreatedSerializer},
    )
    def post(self, request: Request) -> Response:
        if not isinstance(request.successful_authenticator, BrowserSessionAuthentication):
            raise SessionRequired()
        data = AccessTokenInput(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        wanted = list(dict.fromkeys(values.get("operations") or []))
        if wanted:
            # the user's tools by permission (a toolset that is down now still counts)
            access = access_for(request.user)
            yours = {tool.operation for tool in registry if not denials(access, tool)}
            unknown = [name for name in wanted if name not in yours]
            if unknown:
                raise UnknownTokenOperations(unknown)
        token, secret = issue(
            request.user,
            name=values["name"],
            expires_at=values.get("expires_at"),
            max_risk=values["max_risk"],
            operations=wanted,
        )
        record_action(
            request,
            "create_access_token",
            {"token": token.pk, "name": token.name},
            domain="tokens",
            source="rest",
        )
        body = {**AccessTokenSerializer(token).data, "token": secret}
        return Response(body, status=status.HTTP_201_CREATED)


class AccessTokenDetailView(AssistantAPIView):
    @extend_schema(
        summary="Revoke one of your tokens (at once, for good)",
        responses={200: AccessTokenSerializer},
    )
    def delete(self, request: Request, token_id: int) -> Response:
        token = _token_for(request.user, token_id)
        if token.revoke():
            bearer = self.bearer()
            record_action(
                request,
                "revoke_access_token",
                {"token": token.pk, "name": token.name},
                domain="tokens",
                source="rest",
                client=bearer.name if bearer else "",
            )
        return Response(AccessTokenSerializer(token).data)
