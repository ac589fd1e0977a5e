"""The tool inventory: every registered tool, and why a user may not see it."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.utils.translation import gettext

from ..access.requirements import required_permissions
from ..core.registry import registry
from ..dispatch.catalog import hidden_reasons, inventory_row
from ..models import Tool
from .base import page_context


@admin.register(Tool)
class ToolInventoryAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Every registered tool, and which of them a chosen user sees (and why not)."""

    class Media:
        css = {"all": ["assistant/admin.css"]}

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

        User = get_user_model()
        username = request.GET.get("user", "").strip()
        subject = None
        reasons: dict[str, tuple[str, ...]] = {}
        if username:
            subject = User._default_manager.filter(**{User.USERNAME_FIELD: username}).first()
            if subject is not None:
                reasons = hidden_reasons(subject, registry)
        rows = []
        for tool in sorted(registry, key=lambda tool: (tool.domain, tool.operation)):
            row = inventory_row(tool)
            row["permissions"] = ", ".join(required_permissions(tool)) or gettext("public")
            if subject is not None:
                row["hidden_because"] = "; ".join(reasons.get(tool.operation, ()))
                row["visible"] = not reasons.get(tool.operation)
            rows.append(row)
        context = {
            **page_context(self, request, gettext("Tool inventory")),
            "rows": rows,
            "username": username,
            "subject": subject,
            "unknown_user": bool(username) and subject is None,
            "visible_count": sum(1 for row in rows if row.get("visible")),
        }
        return TemplateResponse(request, "admin/assistant/tool_inventory.html", context)
