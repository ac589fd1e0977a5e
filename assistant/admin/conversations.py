"""Conversations with their messages, and pending actions waiting for approval."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.db.models import Count, Q, QuerySet, Sum
from django.db.models.functions import TruncDate
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from ..models import BudgetUsage, Conversation, Message, PendingAction
from ..turns.budgets import budget_for
from ..turns.conversations import delete_conversations
from .base import ReadOnlyAdmin, badge, change_link, page_context


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

    @admin.display(description=_("tool calls"))
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
    list_display = ["title", "user", "message_count", "tokens", "updated_at", "audit_link"]
    search_fields = ["title", "=user__username", "=id"]
    fields = ["id", "user", "title", "created_at", "updated_at", "token_usage", "audit_link"]
    readonly_fields = list(fields)  # type: ignore[arg-type]
    inlines = [MessageInline]
    list_select_related = ["user"]
    show_full_result_count = False
    change_list_template = "admin/assistant/conversation/change_list.html"

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return super(ReadOnlyAdmin, self).has_delete_permission(request, obj)

    def delete_model(self, request: HttpRequest, obj: Conversation) -> None:
        self.delete_queryset(request, Conversation.objects.filter(pk=obj.pk))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Conversation]) -> None:
        """As a user's own deletion does (waiting actions refused, running turns stopped),
        each deletion audited."""
        delete_conversations(
            request.user,
            Conversation.objects.filter(pk__in=list(queryset.values_list("pk", flat=True))),
            source="admin",
            request_ip=request.META.get("REMOTE_ADDR") or None,
            as_staff=True,
        )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Conversation]:
        return (
            super()
            .get_queryset(request)
            .annotate(message_count=Count("messages"), tokens=Sum("messages__total_tokens"))
        )

    @admin.display(description=_("messages"), ordering="message_count")
    def message_count(self, conversation: Any) -> int:
        return int(getattr(conversation, "message_count", 0))

    @admin.display(description=_("LLM tokens"), ordering="tokens")
    def tokens(self, conversation: Any) -> str:
        spent = getattr(conversation, "tokens", None)
        return f"{spent:,}" if spent else "-"

    @admin.display(description=_("LLM tokens"))
    def token_usage(self, conversation: Conversation) -> str:
        """The conversation's model turns and their tokens: total, prompt and completion."""
        spent = _summed(
            conversation.messages.exclude(model="").values("conversation"), "conversation"
        )
        if not spent or not spent[0]["total"]:
            return "-"
        row = spent[0]
        return (
            f"{row['total']:,} ({row['prompt'] or 0:,} prompt + {row['completion'] or 0:,} "
            f"completion, {row['turns']} model turn{'s' if row['turns'] != 1 else ''})"
        )

    def get_urls(self) -> list[Any]:
        usage = self.admin_site.admin_view(self.usage_view)
        return [
            path("usage/", usage, name="assistant_conversation_usage"),
            *super().get_urls(),
        ]

    def usage_view(self, request: HttpRequest) -> TemplateResponse:
        """Language-model tokens per day (with a chart) and per user, over the last 30 days."""
        if not self.has_view_permission(request):
            raise DjangoPermissionDenied
        since = timezone.now() - timedelta(days=USAGE_DAYS)
        spent = Message.objects.filter(created_at__gte=since).exclude(model="")
        per_day = _summed(spent.annotate(day=TruncDate("created_at")).values("day"), "day")
        per_user = _summed(spent.values("conversation__user__username"), "-total")[:50]
        context = {
            **page_context(
                self,
                request,
                gettext("Language-model usage, last %(days)s days") % {"days": USAGE_DAYS},
            ),
            "per_day": per_day,
            "per_user": per_user,
            "chart": usage_chart(per_day),
            "budgets": budgets_today(),
        }
        return TemplateResponse(request, "admin/assistant/conversation/usage.html", context)

    @admin.display(description=_("audit"))
    def audit_link(self, conversation: Conversation) -> str:
        url = reverse("admin:assistant_auditentry_changelist") + f"?q={conversation.pk}"
        return format_html('<a href="{}">{}</a>', url, _("audit entries"))


USAGE_DAYS = 30


def budgets_today() -> list[dict[str, Any]]:
    """Today's token budgets in use: each user's limit, what was spent, held now and reserved."""
    now = timezone.now()
    rows = (
        BudgetUsage.objects.filter(day=timezone.localdate())
        .select_related("user")
        .annotate(held_now=Sum("reservations__tokens", filter=Q(reservations__expires_at__gt=now)))
        .order_by("-spent_tokens")[:50]
    )
    shown = []
    for usage in rows:
        daily = budget_for(usage.user).tokens_per_day
        shown.append(
            {
                "user": usage.user.get_username(),
                "limit": "unlimited" if daily is None else f"{daily:,}",
                "spent": f"{usage.spent_tokens:,}",
                "held": f"{usage.held_now or 0:,}",
                "reserved": f"{usage.reserved_tokens:,}",
                "calls": usage.calls,
                "refusals": usage.refusals,
            }
        )
    return shown


def _summed(groups: Any, order: str) -> list[dict[str, Any]]:
    """Turns and tokens for each group of model turns."""
    return list(
        groups.annotate(
            turns=Count("id"),
            prompt=Sum("prompt_tokens"),
            completion=Sum("completion_tokens"),
            total=Sum("total_tokens"),
        ).order_by(order)
    )


def usage_chart(per_day: list[dict[str, Any]]) -> str:
    """Tokens per day as an SVG bar chart (empty when nothing was spent)."""
    highest = max((row["total"] or 0 for row in per_day), default=0)
    if not highest:
        return ""
    bars = [
        (
            index * 16,
            122 - max(2, int(120 * (row["total"] or 0) / highest)),
            max(2, int(120 * (row["total"] or 0) / highest)),
            f"{row['day']:%Y-%m-%d}: {row['total'] or 0:,} tokens in {row['turns']} turns",
        )
        for index, row in enumerate(per_day)
    ]
    rects = format_html_join(
        "",
        '<rect x="{}" y="{}" width="12" height="{}" fill="#1f5fa8"><title>{}</title></rect>',
        bars,
    )
    return format_html(
        '<svg width="{}" height="124" role="img" aria-label="{}">{}</svg>',
        len(bars) * 16,
        _("tokens per day"),
        rects,
    )


Status = PendingAction.Status


class WaitingFilter(admin.SimpleListFilter):
    title = _("state")
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [
            ("waiting", gettext("waiting")),
            ("expired", gettext("expired, undecided")),
            ("decided", gettext("decided")),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:

        now = timezone.now()
        if self.value() == "waiting":
            return queryset.filter(status=Status.PENDING, expires_at__gt=now)
        if self.value() == "expired":
            return queryset.filter(status__in=[Status.PENDING, Status.EXPIRED], expires_at__lte=now)
        if self.value() == "decided":
            return queryset.filter(status__in=[Status.CONFIRMED, Status.CANCELLED])
        return queryset


@admin.register(PendingAction)
class PendingActionAdmin(ReadOnlyAdmin):
    """The approvals view: what waits for whom, what expired, who decided what and when."""

    list_display = [
        "created_at",
        "user",
        "operation",
        "summary_link",
        "coloured_status",
        "expires_at",
        "decided_by",
        "decided_at",
        "conversation_link",
    ]
    list_filter = [WaitingFilter, ("status", admin.ChoicesFieldListFilter), "operation"]
    search_fields = ["=operation", "=user__username", "=id"]
    list_select_related = ["user", "decided_by", "conversation"]
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
        "result",  # what it came to, kept for a caller that asks again (an MCP retry)
        "delivered_at",
    ]
    readonly_fields = list(fields)  # type: ignore[arg-type]

    @admin.display(description=_("summary"))
    def summary_link(self, action: PendingAction) -> str:
        """The summary its approval card shows; a waiting one links to the approvals inbox."""
        text = action.summary or action.operation
        if action.status != Status.PENDING or action.is_expired:
            return text
        url = reverse("assistant:approvals") + f"?action={action.pk}"
        return format_html('<a href="{}">{}</a>', url, text)

    @admin.display(description=_("conversation"))
    def conversation_link(self, action: PendingAction) -> str:
        return change_link("conversation", action.conversation_id, action.conversation)

    @admin.display(description=_("status"), ordering="status")
    def coloured_status(self, action: PendingAction) -> str:
        return badge(
            Status.EXPIRED
            if action.status == Status.PENDING and action.is_expired
            else action.status
        )
