"""Conversations with their messages, and pending actions waiting for approval."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Count, QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from ..models import Conversation, Message, PendingAction
from .base import ReadOnlyAdmin, badge


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
