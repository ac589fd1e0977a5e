"""The audit trail: read-only, fast filters without DISTINCT scans, streamed export."""

from __future__ import annotations

import csv
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import datetime, timedelta
from typing import Any

from asgiref.sync import sync_to_async
from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ChangeList
from django.contrib.auth import get_user_model
from django.core.handlers.asgi import ASGIRequest
from django.core.paginator import Paginator
from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import Max, Min, Q, QuerySet
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.functional import cached_property
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from ..core.registry import registry
from ..models import AuditEntry, AuditQuerySet, Job
from .base import ReadOnlyAdmin, badge, change_link

EXPORT_CHUNK = 2000  # audit rows read per query while exporting


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
    title = _("source")
    parameter_name = "source"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(name, name) for name in ("rest", "websocket", "agui", "api", "cli", "admin")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(source=self.value()) if self.value() else queryset


class ChoicesFilter(admin.SimpleListFilter):
    """A filter whose choices are known without scanning the table."""

    field = ""

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(**{self.field: value}) if value else queryset


class OperationFilter(ChoicesFilter):
    title = _("operation")
    parameter_name = "operation"
    field = "operation"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return sorted((tool.operation, tool.operation) for tool in registry)


class DomainFilter(ChoicesFilter):
    title = _("domain")
    parameter_name = "domain"
    field = "domain"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return sorted({(tool.domain, tool.domain) for tool in registry})


class UserFilter(admin.SimpleListFilter):
    """By username (typed into the URL or picked among staff), without listing every user."""

    title = _("user")
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
    # Fits a 1280 px screen beside the admin's navigation and the filters: domain and risk are
    # filters and on the entry, the time is compact, long names are cut (admin.css).
    list_display = [
        "when",
        "username",
        "operation",
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
        ("arrival", admin.ChoicesFieldListFilter),
    ]
    search_fields = ["operation", "username", "conversation__id"]
    search_help_text = _("An operation, a username (exact), or a conversation id.")
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
        "client",
        "arrival",
        "request_ip",
        "entities_json",
        "error",
        "conversation_link",
        "pending_action_link",
        "job_links",
    ]
    readonly_fields = list(fields)  # type: ignore[arg-type]
    change_list_template = "admin/assistant/auditentry/change_list.html"

    class Media:
        css = {"all": ["assistant/admin.css"]}

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

    @admin.display(description=_("created at"), ordering="created_at")
    def when(self, entry: AuditEntry) -> str:
        return f"{timezone.localtime(entry.created_at):%Y-%m-%d %H:%M:%S}"

    @admin.display(description=_("decision"), ordering="decision")
    def coloured_decision(self, entry: AuditEntry) -> str:
        return badge(entry.decision)

    @admin.display(description=_("duration"), ordering="duration_ms")
    def duration(self, entry: AuditEntry) -> str:
        return f"{entry.duration_ms:.1f} ms"

    @admin.display(description=_("conversation"))
    def conversation_link(self, entry: AuditEntry) -> str:
        return change_link("conversation", entry.conversation_id, str(entry.conversation_id)[:8])

    @admin.display(description=_("entities (redacted)"))
    def entities_json(self, entry: AuditEntry) -> str:
        return format_html("<pre>{}</pre>", json.dumps(entry.entities, indent=2, sort_keys=True))

    @admin.display(description=_("pending action"))
    def pending_action_link(self, entry: AuditEntry) -> str:
        return change_link("pendingaction", entry.pending_action_id, entry.pending_action_id)

    @admin.display(description=_("jobs started"))
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
            return HttpResponse(gettext("Choose csv or jsonl."), status=404)
        try:
            changelist = self.get_changelist_instance(request)
        except IncorrectLookupParameters:
            return HttpResponse(gettext("The filter is not valid."), status=400)
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
    "client",
    "arrival",
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
        lines.append(writer.writerow([_inert(row[name]) for name in EXPORT_FIELDS]))
    return "".join(lines)


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _inert(value: Any) -> Any:
    """A text cell a spreadsheet would read as a formula, quoted so it stays text (OWASP)."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


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
