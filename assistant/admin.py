"""Staff views of what the assistant did: audit, conversations, approvals, jobs, validation, tools.

Audit entries are read-only for everyone; the changelists avoid full-table counts and
per-page DISTINCT scans (filter choices come from the registry and the models' choices), so
they stay fast on a large history.
"""

from __future__ import annotations

import csv
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import datetime, timedelta
from typing import Any

from asgiref.sync import sync_to_async
from django.contrib import admin, messages
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ChangeList
from django.contrib.auth import get_user_model
from django.core.handlers.asgi import ASGIRequest
from django.core.paginator import Paginator
from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import Count, Max, Min, Q, QuerySet
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.functional import cached_property
from django.utils.html import format_html, format_html_join
from guardian.admin import GuardedModelAdmin

from .confirmation import record_action
from .models import (
    AuditEntry,
    AuditQuerySet,
    Conversation,
    Job,
    Message,
    PendingAction,
    Tool,
    ValidationFinding,
    ValidationRun,
    ValidationTask,
)
from .permissions import explain, required_permissions
from .registry import registry

DECISION_COLOURS = {
    "executed": "#127a3c",
    "confirmed": "#127a3c",
    "passed": "#127a3c",
    "succeeded": "#127a3c",
    "confirmation_requested": "#9a6700",
    "cancelled": "#9a6700",
    "warned": "#9a6700",
    "queued": "#52606d",
    "running": "#2457c5",
    "pending": "#9a6700",
}
EXPORT_CHUNK = 2000


def badge(value: str) -> str:
    colour = DECISION_COLOURS.get(value, "#b42318")
    return format_html(
        '<span style="color:#fff;background:{};padding:1px 7px;border-radius:9px;'
        'font-size:11px;white-space:nowrap">{}</span>',
        colour,
        value.replace("_", " "),
    )


class ReadOnlyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class EstimatedCountPaginator(Paginator):  # type: ignore[type-arg]
    """Counts at most ``cap`` rows: page links stay right for small results, cheap for huge ones."""

    cap = 10_000

    @cached_property
    def count(self) -> int:
        rows: Any = self.object_list
        return int(rows[: self.cap + 1].count())


class CalendarQuerySet(AuditQuerySet):
    """The date hierarchy's links from the range's ends, not a DISTINCT over every row."""

    def datetimes(self, field_name: str, kind: str, order: str = "ASC", tzinfo: Any = None) -> Any:
        if kind not in ("year", "month", "day"):
            return super().datetimes(field_name, kind, order, tzinfo)  # type: ignore[arg-type]
        bounds = self.aggregate(first=Min(field_name), last=Max(field_name))
        if bounds["first"] is None:
            return []
        zone = tzinfo or timezone.get_current_timezone()
        first, last = (timezone.localtime(bounds[end], zone) for end in ("first", "last"))
        moments = []
        cursor = _truncate(first, kind)
        while cursor <= last:
            moments.append(cursor)
            cursor = _advance(cursor, kind)
        return moments if order == "ASC" else moments[::-1]


def _truncate(moment: datetime, kind: str) -> datetime:
    moment = moment.replace(hour=0, minute=0, second=0, microsecond=0)
    if kind in ("month", "year"):
        moment = moment.replace(day=1)
    if kind == "year":
        moment = moment.replace(month=1)
    return moment


def _advance(moment: datetime, kind: str) -> datetime:
    if kind == "day":
        return _truncate(moment + timedelta(days=1, hours=3), "day")
    if kind == "month":
        return _truncate(moment.replace(day=28) + timedelta(days=4), "month")
    return moment.replace(year=moment.year + 1)


class AuditChangeList(ChangeList):
    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> Any:
        queryset = super().get_queryset(request, exclude_parameters)
        queryset.__class__ = CalendarQuerySet
        return queryset


class SourceFilter(admin.SimpleListFilter):
    title = "source"
    parameter_name = "source"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(name, name) for name in ("rest", "websocket", "api", "cli", "admin")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(source=self.value()) if self.value() else queryset


class ChoicesFilter(admin.SimpleListFilter):
    """A filter whose choices are known without scanning the table."""

    field = ""

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(**{self.field: value}) if value else queryset


class OperationFilter(ChoicesFilter):
    title = "operation"
    parameter_name = "operation"
    field = "operation"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return sorted((tool.operation, tool.operation) for tool in registry)


class DomainFilter(ChoicesFilter):
    title = "domain"
    parameter_name = "domain"
    field = "domain"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return sorted({(tool.domain, tool.domain) for tool in registry})


class UserFilter(admin.SimpleListFilter):
    """By username (typed into the URL or picked among staff), without listing every user."""

    title = "user"
    parameter_name = "username"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        names = (
            get_user_model()
            ._default_manager.filter(is_staff=True)
            .order_by(get_user_model().USERNAME_FIELD)
            .values_list(get_user_model().USERNAME_FIELD, flat=True)[:50]
        )
        return [(name, name) for name in names]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(username=self.value()) if self.value() else queryset


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    list_display = [
        "created_at",
        "username",
        "operation",
        "domain",
        "risk_level",
        "coloured_decision",
        "duration",
        "conversation_link",
    ]
    list_filter = [
        ("decision", admin.ChoicesFieldListFilter),
        ("risk_level", admin.ChoicesFieldListFilter),
        DomainFilter,
        OperationFilter,
        UserFilter,
        SourceFilter,
    ]
    search_fields = ["operation", "username", "conversation__id"]
    search_help_text = "An operation, a username (exact), or a conversation id."
    date_hierarchy = "created_at"
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER  # a count per filter choice is a scan per choice
    paginator = EstimatedCountPaginator
    list_per_page = 100
    ordering = ["-id"]
    fields = [
        "created_at",
        "username",
        "user",
        "operation",
        "domain",
        "risk_level",
        "coloured_decision",
        "duration",
        "source",
        "request_ip",
        "entities_json",
        "error",
        "conversation_link",
        "pending_action_link",
        "job_links",
    ]
    readonly_fields = list(fields)  # type: ignore[arg-type]
    change_list_template = "admin/assistant/auditentry/change_list.html"

    def get_queryset(self, request: HttpRequest) -> QuerySet[AuditEntry]:
        return super().get_queryset(request).select_related("conversation")

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return AuditChangeList

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[AuditEntry], search_term: str
    ) -> tuple[QuerySet[AuditEntry], bool]:
        """Exact matches the indexes can answer (a case-insensitive scan of a million rows can't)."""
        term = search_term.strip()
        if not term:
            return queryset, False
        try:
            return queryset.filter(conversation_id=uuid.UUID(term)), False
        except ValueError:
            pass
        return queryset.filter(Q(operation=term) | Q(username=term)), False

    @admin.display(description="decision", ordering="decision")
    def coloured_decision(self, entry: AuditEntry) -> str:
        return badge(entry.decision)

    @admin.display(description="duration", ordering="duration_ms")
    def duration(self, entry: AuditEntry) -> str:
        return f"{entry.duration_ms:.1f} ms"

    @admin.display(description="conversation")
    def conversation_link(self, entry: AuditEntry) -> str:
        if entry.conversation_id is None:
            return "-"
        url = reverse("admin:assistant_conversation_change", args=[entry.conversation_id])
        return format_html('<a href="{}">{}</a>', url, str(entry.conversation_id)[:8])

    @admin.display(description="entities (redacted)")
    def entities_json(self, entry: AuditEntry) -> str:
        return format_html("<pre>{}</pre>", json.dumps(entry.entities, indent=2, sort_keys=True))

    @admin.display(description="pending action")
    def pending_action_link(self, entry: AuditEntry) -> str:
        if entry.pending_action_id is None:
            return "-"
        url = reverse("admin:assistant_pendingaction_change", args=[entry.pending_action_id])
        return format_html('<a href="{}">{}</a>', url, entry.pending_action_id)

    @admin.display(description="jobs started")
    def job_links(self, entry: AuditEntry) -> str:
        if entry.conversation_id is None:
            return "-"
        # The handler enqueued them while it ran, just before the entry was written.
        started = entry.created_at - timedelta(milliseconds=entry.duration_ms + 1000)
        jobs = Job.objects.filter(
            conversation_id=entry.conversation_id,
            operation=entry.operation,
            created_at__gte=started,
            created_at__lte=entry.created_at,
        ).order_by("created_at")[:3]
        return (
            format_html_join(
                ", ",
                '<a href="{}">{}</a>',
                (
                    (
                        reverse("admin:assistant_job_change", args=[job.pk]),
                        f"{job.pk} ({job.status})",
                    )
                    for job in jobs
                ),
            )
            or "-"
        )

    def get_urls(self) -> list[Any]:
        return [
            path(
                "export/<str:fmt>/",
                self.admin_site.admin_view(self.export_view),
                name="assistant_auditentry_export",
            ),
            *super().get_urls(),
        ]

    def export_view(self, request: HttpRequest, fmt: str) -> HttpResponse | StreamingHttpResponse:
        """The changelist's current filter, streamed as CSV or JSON Lines in constant memory."""
        if not self.has_view_permission(request):
            return HttpResponse(status=403)
        if fmt not in ("csv", "jsonl"):
            return HttpResponse("Choose csv or jsonl.", status=404)
        try:
            changelist = self.get_changelist_instance(request)
        except IncorrectLookupParameters:
            return HttpResponse("The filter is not valid.", status=400)
        rows = changelist.get_queryset(request).order_by("-id")
        render = render_csv if fmt == "csv" else render_jsonl
        # Under ASGI an async iterator streams; a sync one would be read whole first.
        stream: Any = (
            astream(rows, render) if isinstance(request, ASGIRequest) else stream_rows(rows, render)
        )
        response = StreamingHttpResponse(
            stream, content_type="text/csv" if fmt == "csv" else "application/x-ndjson"
        )
        response["Content-Disposition"] = f'attachment; filename="audit.{fmt}"'
        return response


EXPORT_FIELDS = [
    "id",
    "created_at",
    "username",
    "operation",
    "domain",
    "risk_level",
    "decision",
    "duration_ms",
    "source",
    "request_ip",
    "conversation_id",
    "pending_action_id",
    "error",
    "entities",
]


class _Echo:
    def write(self, value: str) -> str:
        return value


def render_csv(rows: list[dict[str, Any]], first: bool) -> str:
    writer = csv.writer(_Echo())
    lines = [writer.writerow(EXPORT_FIELDS)] if first else []
    for row in rows:
        row["created_at"] = row["created_at"].isoformat()
        row["entities"] = json.dumps(row["entities"], sort_keys=True)
        lines.append(writer.writerow([row[name] for name in EXPORT_FIELDS]))
    return "".join(lines)


def render_jsonl(rows: list[dict[str, Any]], first: bool) -> str:
    return "".join(json.dumps(row, cls=DjangoJSONEncoder, sort_keys=True) + "\n" for row in rows)


def _chunk(rows: QuerySet[AuditEntry], before: int | None) -> list[dict[str, Any]]:
    """The next rows, newest first, by id (keyset: no OFFSET, constant cost per chunk)."""
    page = rows if before is None else rows.filter(id__lt=before)
    return list(page.values(*EXPORT_FIELDS)[:EXPORT_CHUNK])


def stream_rows(rows: QuerySet[AuditEntry], render: Any) -> Iterator[str]:
    before, first = None, True
    while True:
        chunk = _chunk(rows, before)
        if chunk or first:
            yield render(chunk, first)
        if len(chunk) < EXPORT_CHUNK:
            return
        before, first = chunk[-1]["id"], False


async def astream(rows: QuerySet[AuditEntry], render: Any) -> AsyncIterator[str]:
    before, first = None, True
    while True:
        chunk = await sync_to_async(_chunk)(rows, before)
        if chunk or first:
            yield render(chunk, first)
        if len(chunk) < EXPORT_CHUNK:
            return
        before, first = chunk[-1]["id"], False


class MessageInline(admin.TabularInline):  # type: ignore[type-arg]
    model = Message
    fields = ["created_at", "role", "status", "text", "tool_calls_summary"]
    readonly_fields = ["created_at", "role", "status", "text", "tool_calls_summary"]
    extra = 0
    can_delete = False
    ordering = ["created_at", "id"]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="tool calls")
    def tool_calls_summary(self, message: Message) -> str:
        return (
            format_html_join(
                "<br>",
                "{} {}",
                (
                    (call.get("operation", "?"), badge(str(call.get("decision", ""))))
                    for call in message.tool_calls or []
                ),
            )
            or "-"
        )


@admin.register(Conversation)
class ConversationAdmin(ReadOnlyAdmin):
    list_display = ["title", "user", "message_count", "updated_at", "audit_link"]
    search_fields = ["title", "=user__username", "=id"]
    fields = ["id", "user", "title", "created_at", "updated_at", "audit_link"]
    readonly_fields = list(fields)  # type: ignore[arg-type]
    inlines = [MessageInline]
    list_select_related = ["user"]
    show_full_result_count = False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return super(ReadOnlyAdmin, self).has_delete_permission(request, obj)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Conversation]:
        return super().get_queryset(request).annotate(message_count=Count("messages"))

    @admin.display(description="messages", ordering="message_count")
    def message_count(self, conversation: Any) -> int:
        return int(getattr(conversation, "message_count", 0))

    @admin.display(description="audit")
    def audit_link(self, conversation: Conversation) -> str:
        url = reverse("admin:assistant_auditentry_changelist") + f"?q={conversation.pk}"
        return format_html('<a href="{}">audit entries</a>', url)


class WaitingFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("waiting", "waiting"), ("expired", "expired, undecided"), ("decided", "decided")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        from django.utils import timezone

        now = timezone.now()
        if self.value() == "waiting":
            return queryset.filter(status=PendingAction.Status.PENDING, expires_at__gt=now)
        if self.value() == "expired":
            return queryset.filter(status__in=["pending", "expired"], expires_at__lte=now)
        if self.value() == "decided":
            return queryset.filter(status__in=["confirmed", "cancelled"])
        return queryset


@admin.register(PendingAction)
class PendingActionAdmin(ReadOnlyAdmin):
    """The approvals view: what waits for whom, what expired, who decided what and when."""

    list_display = [
        "created_at",
        "user",
        "operation",
        "coloured_status",
        "expires_at",
        "decided_by",
        "decided_at",
    ]
    list_filter = [WaitingFilter, ("status", admin.ChoicesFieldListFilter), "operation"]
    search_fields = ["=operation", "=user__username", "=id"]
    list_select_related = ["user", "decided_by"]
    fields = [
        "id",
        "user",
        "operation",
        "summary",
        "coloured_status",
        "created_at",
        "expires_at",
        "decided_by",
        "decided_at",
        "conversation",
    ]
    readonly_fields = list(fields)  # type: ignore[arg-type]

    @admin.display(description="status", ordering="status")
    def coloured_status(self, action: PendingAction) -> str:
        return badge(
            "expired" if action.status == "pending" and action.is_expired else action.status
        )


@admin.register(Job)
class JobAdmin(ReadOnlyAdmin):
    list_display = [
        "created_at",
        "operation",
        "user",
        "coloured_status",
        "progress_bar",
        "duration",
        "short_error",
    ]
    list_filter = [("status", admin.ChoicesFieldListFilter), "operation"]
    search_fields = ["=id", "=operation", "=user__username"]
    list_select_related = ["user"]
    actions = ["cancel_jobs"]
    show_full_result_count = False
    fields = [
        "id",
        "operation",
        "function",
        "user",
        "conversation",
        "coloured_status",
        "progress_bar",
        "progress_message",
        "result",
        "error",
        "cancel_requested",
        "worker",
        "created_at",
        "started_at",
        "finished_at",
        "heartbeat_at",
    ]
    readonly_fields = list(fields)  # type: ignore[arg-type]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # The Cancel action needs it on the list; a job's own page is never editable (a worker
        # may be writing the row).
        return obj is None and bool(request.user.has_perm("assistant.change_job"))

    @admin.display(description="status", ordering="status")
    def coloured_status(self, job: Job) -> str:
        return badge(job.status)

    @admin.display(description="progress")
    def progress_bar(self, job: Job) -> str:
        return format_html(
            '<progress max="100" value="{}"></progress> {}%', job.progress, job.progress
        )

    @admin.display(description="duration")
    def duration(self, job: Job) -> str:
        if job.started_at is None:
            return "-"
        from django.utils import timezone

        seconds = ((job.finished_at or timezone.now()) - job.started_at).total_seconds()
        return f"{seconds:.1f} s"

    @admin.display(description="error")
    def short_error(self, job: Job) -> str:
        return job.error.splitlines()[0][:80] if job.error else ""

    @admin.action(description="Cancel the selected jobs", permissions=["change"])
    def cancel_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        from .jobs import announce_completion

        asked = 0
        for job in queryset.filter(status__in=["queued", "running"]):
            if job.request_cancel():
                asked += 1
                record_action(request, "cancel_job", {"job": str(job.pk)}, domain="jobs")
            if job.status == Job.Status.CANCELLED:
                announce_completion(job)  # it never started: no worker will say so
        self.message_user(request, f"Asked {asked} job(s) to stop.", messages.SUCCESS)


class FindingInline(admin.TabularInline):  # type: ignore[type-arg]
    model = ValidationFinding
    fields = ["rule", "target_repr", "coloured_outcome", "message"]
    readonly_fields = list(fields)  # type: ignore[arg-type]
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="outcome")
    def coloured_outcome(self, finding: ValidationFinding) -> str:
        return badge({"pass": "passed", "fail": "failed", "warn": "warned"}[finding.outcome])


@admin.register(ValidationRun)
class ValidationRunAdmin(ReadOnlyAdmin):
    list_display = [
        "created_at",
        "task",
        "coloured_status",
        "passed",
        "failed",
        "warned",
        "triggered_by",
    ]
    list_filter = [("status", admin.ChoicesFieldListFilter), "triggered_by"]
    list_select_related = ["task"]
    inlines = [FindingInline]
    fields = [
        "task",
        "coloured_status",
        "passed",
        "failed",
        "warned",
        "triggered_by",
        "triggered_by_user",
        "job",
        "error",
        "created_at",
        "started_at",
        "finished_at",
    ]
    readonly_fields = list(fields)  # type: ignore[arg-type]

    @admin.display(description="status", ordering="status")
    def coloured_status(self, run: ValidationRun) -> str:
        return badge(run.status)


@admin.register(ValidationTask)
class ValidationTaskAdmin(GuardedModelAdmin):
    list_display = ["name", "target", "schedule", "enabled", "last_run_at", "latest_status"]
    list_filter = ["enabled", "schedule"]
    search_fields = ["name"]
    actions = ["run_now"]
    readonly_fields = ["pass_rate_chart", "last_run_at", "next_run_at", "created_at"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[ValidationTask]:
        queryset: QuerySet[ValidationTask] = super().get_queryset(request)  # type: ignore[no-untyped-call]
        return queryset.select_related("target_type")

    @admin.display(description="target")
    def target(self, task: ValidationTask) -> str:
        return task.target_label

    @admin.display(description="latest run")
    def latest_status(self, task: ValidationTask) -> str:
        run = task.runs.order_by("-created_at").first()
        return badge(run.status) if run is not None else "-"

    @admin.display(description="pass rate of the recent runs")
    def pass_rate_chart(self, task: ValidationTask) -> str:
        runs = list(
            task.runs.exclude(status__in=["queued", "running"]).order_by("-created_at")[:20]
        )
        if not runs:
            return "No finished runs yet."
        bars = []
        for index, run in enumerate(reversed(runs)):
            total = run.passed + run.failed + run.warned
            rate = run.passed / total if total else 0.0
            height = max(2, int(60 * rate))
            colour = "#127a3c" if rate == 1 else "#9a6700" if rate >= 0.5 else "#b42318"
            bars.append((index * 14, 62 - height, height, colour, f"run {run.pk}: {rate:.0%}"))
        rects = format_html_join(
            "",
            '<rect x="{}" y="{}" width="10" height="{}" fill="{}"><title>{}</title></rect>',
            bars,
        )
        return format_html(
            '<svg width="{}" height="64" role="img" aria-label="pass rate per run">{}</svg>',
            len(bars) * 14,
            rects,
        )

    @admin.action(description="Run now", permissions=["run"])
    def run_now(self, request: HttpRequest, queryset: QuerySet[ValidationTask]) -> None:
        from .validation import ValidationTaskService

        for task in queryset:
            run = ValidationTaskService.trigger_run(
                task, ValidationRun.Trigger.USER, user=request.user
            )
            record_action(
                request, "validation_run", {"task": task.pk, "run": run.pk}, domain="validation"
            )
        self.message_user(request, f"Started {queryset.count()} run(s).", messages.SUCCESS)

    def has_run_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm("assistant.run_validationtask"))


@admin.register(Tool)
class ToolInventoryAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Every registered tool, and which of them a chosen user sees (and why not)."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.is_active and request.user.is_staff)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.has_view_permission(request)

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> TemplateResponse:
        if not self.has_view_permission(request):
            from django.core.exceptions import PermissionDenied

            raise PermissionDenied
        from .management.commands.assistant_tools import inventory_row

        User = get_user_model()
        username = request.GET.get("user", "").strip()
        subject = None
        reasons: dict[str, tuple[str, ...]] = {}
        if username:
            subject = User._default_manager.filter(**{User.USERNAME_FIELD: username}).first()
            if subject is not None:
                reasons = {tool.operation: why for tool, why in explain(subject, registry)}
        rows = []
        for tool in sorted(registry, key=lambda tool: (tool.domain, tool.operation)):
            row = inventory_row(tool)
            row["permissions"] = ", ".join(required_permissions(tool)) or "public"
            if subject is not None:
                row["hidden_because"] = "; ".join(reasons.get(tool.operation, ()))
                row["visible"] = not reasons.get(tool.operation)
            rows.append(row)
        context = {
            **self.admin_site.each_context(request),
            "title": "Tool inventory",
            "opts": self.model._meta,
            "rows": rows,
            "username": username,
            "subject": subject,
            "unknown_user": bool(username) and subject is None,
            "visible_count": sum(1 for row in rows if row.get("visible")),
        }
        return TemplateResponse(request, "admin/assistant/tool_inventory.html", context)
