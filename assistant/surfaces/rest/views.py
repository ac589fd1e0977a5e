"""REST views: thin transports over ``chat`` and ``dispatch``, independent of the host's DRF settings."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from django.db.models import Count, QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime
from drf_spectacular.utils import OpenApiParameter
from rest_framework import exceptions, status
from rest_framework.pagination import CursorPagination, PageNumberPagination
from rest_framework.permissions import BasePermission, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ...access.permissions import access_for, denials
from ...access.tokens import issue
from ...core.registry import registry
from ...dispatch.catalog import get_catalog, visible_tools
from ...dispatch.confirmation import cancel_action, confirm_action, record_action, stop_job
from ...dispatch.door import dispatch
from ...exceptions import CredentialLapsed, SessionRequired, UnknownTokenOperations
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
from ...turns.conversations import (
    conversation_for,
    delete_conversations,
    rename_conversation,
    search_conversations,
)
from ...turns.runs import run_turn
from ...validation import ValidationTaskService
from ..drf.base import (
    OUTCOME_RESPONSES,
    AssistantAPIView,
    BrowserSessionAuthentication,
    WithinTokenScope,
    error_body,
    extend_schema,
)
from ..drf.parsers import JSON_ONLY
from ..drf.serializers import (
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
        """Lists only the tools this caller may call (the catalog the planner sees), in the
        requested style."""
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
        """Stores the message, runs one turn through the planner and dispatch, and answers with the
        stored reply."""
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
        """Calls one tool by operation name through dispatch, audited; a tool that needs
        confirmation answers with a pending action instead."""
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
        """Lists the caller's waiting actions, or with awaiting=approval those of others the caller
        may approve."""
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
        """Confirms a pending action once, re-checking its requester's permissions; a second
        confirmation gets 409 and an expired one 410."""
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
        """Refuses a pending action so it never runs; the refusal is audited as cancelled."""
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
        """Lists the caller's conversations, filterable by a search over titles and message text."""
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
        """Deletes every conversation of the caller, cancelling their waiting actions; the audit
        trail keeps its entries."""
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
        """Returns one of the caller's conversations with its messages; someone else's is a 404."""
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
        """Renames one of the caller's conversations."""
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
        """Deletes one of the caller's conversations and cancels its waiting actions."""
        conversation = self.conversation(request, conversation_id)
        delete_conversations(
            request.user,
            Conversation.objects.filter(pk=conversation.pk),
            source="rest",
            request_ip=self.client_ip(),
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


class IsAuditViewer(BasePermission):
    """Staff holding ``assistant.view_auditentry``."""

    message = "Staff with the assistant audit permission only."

    def has_permission(self, request: Request, view: APIView) -> bool:
        user = request.user
        return bool(
            user
            and user.is_authenticated
            and user.is_staff
            and user.has_perm("assistant.view_auditentry")
        )


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
        """Lists every user's conversations for staff who may read the audit, filterable by user."""
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
        """Deletes any user's conversation; needs assistant.delete_conversation, not only audit
        access."""
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
        """Returns any user's conversation with its messages for staff who may read the audit."""
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
        """Pages through the append-only audit trail, newest first, filtered by user, operation,
        decision and time."""
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
        """Lists the caller's background jobs, or everyone's with all=1 for holders of
        assistant.view_job."""
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
        """Returns one background job with its status, progress and result."""
        return Response(JobSerializer(job_for(request.user, job_id)).data)


class JobCancelView(AssistantAPIView):
    @extend_schema(
        summary="Ask a job to stop (a running one stops at its next check)",
        request=None,
        responses=JobSerializer,
    )
    def post(self, request: Request, job_id: str) -> Response:
        """Asks a background job to stop, audited as cancel_job; a running job stops at its next
        cancellation check."""
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
        """Lists the validation tasks the caller may view, globally or per task."""
        tasks = _tasks_for(request.user).select_related("owner", "target_type").order_by("name")
        return self.paginated(tasks, ValidationTaskSerializer)

    @extend_schema(
        summary="Create a validation task (you become its owner: view, change, run)",
        request=ValidationTaskInput,
        responses={201: ValidationTaskSerializer},
    )
    def post(self, request: Request) -> Response:
        """Creates a validation task owned by the caller, who may then view, change and run it."""
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
        """Returns one validation task the caller may view."""
        task = _task_for(request.user, task_id)
        return Response(ValidationTaskSerializer(task).data)


class ValidationTaskRunView(AssistantAPIView):
    @extend_schema(
        summary="Run a validation task now (a job)",
        request=None,
        responses={202: ValidationRunSerializer},
    )
    def post(self, request: Request, task_id: int) -> Response:
        """Starts a run of a validation task as a background job and answers with the job."""
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
        """Lists runs of the validation tasks the caller may view, newest first, optionally for one
        task."""
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
        """Lists the caller's personal access tokens without their secrets."""
        tokens = AccessToken.objects.owned_by(request.user).order_by("-created_at", "-id")
        return self.paginated(tokens, AccessTokenSerializer)

    @extend_schema(
        summary="Create a personal access token (from a browser session; the answer holds its "
        "secret, this once)",
        request=AccessTokenInput,
        responses={201: AccessTokenCreatedSerializer},
    )
    def post(self, request: Request) -> Response:
        """Creates a personal access token from a browser session and answers with its secret this
        one time."""
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
        """Revokes one of the caller's tokens at once and for good."""
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
