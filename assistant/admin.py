"""Staff views of what the assistant did; audit entries are read-only for everyone."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from .models import AuditEntry, Conversation, Message, PendingAction


class ReadOnlyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    list_display = [
        "created_at",
        "username",
        "operation",
        "domain",
        "risk_level",
        "decision",
        "duration_ms",
        "conversation",
    ]
    list_filter = ["decision", "risk_level", "domain", "source"]
    search_fields = ["operation", "username", "=conversation__id"]
    date_hierarchy = "created_at"
    show_full_result_count = False
    list_select_related = ["conversation"]


class MessageInline(admin.TabularInline):  # type: ignore[type-arg]
    model = Message
    fields = ["created_at", "role", "status", "text", "tool_calls"]
    readonly_fields = ["created_at", "role", "status", "text", "tool_calls"]
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Conversation)
class ConversationAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ["title", "user", "created_at", "updated_at"]
    search_fields = ["title", "user__username", "=id"]
    readonly_fields = ["id", "user", "created_at", "updated_at"]
    inlines = [MessageInline]
    list_select_related = ["user"]


@admin.register(PendingAction)
class PendingActionAdmin(ReadOnlyAdmin):
    list_display = [
        "created_at",
        "user",
        "operation",
        "status",
        "expires_at",
        "decided_by",
        "decided_at",
    ]
    list_filter = ["status", "operation"]
    list_select_related = ["user", "decided_by"]
