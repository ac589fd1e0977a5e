"""What every assistant admin page shares: read-only pages, coloured status badges, page context."""

from __future__ import annotations

from typing import Any

import django
from django.contrib import admin
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

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
    "usable": "#127a3c",
    "expired": "#52606d",
}


# What a badge says, in the active language (a value not listed: its own words).
BADGE_LABELS = {
    "executed": _("executed"),
    "failed": _("failed"),
    "denied": _("denied"),
    "invalid": _("invalid"),
    "unknown": _("unknown"),
    "confirmation_requested": _("confirmation requested"),
    "clarify": _("clarify"),
    "confirmed": _("confirmed"),
    "cancelled": _("cancelled"),
    "expired": _("expired"),
    "timeout": _("timeout"),
    "unavailable": _("unavailable"),
    "not_ready": _("not ready"),
    "over_budget": _("over budget"),
    "client_tool": _("client tool"),
    "over_limit": _("over limit"),
    "queued": _("queued"),
    "running": _("running"),
    "succeeded": _("succeeded"),
    "passed": _("passed"),
    "warned": _("warned"),
    "errored": _("errored"),
    "pending": _("pending"),
    "usable": _("usable"),
    "revoked": _("revoked"),
}


def badge(value: str) -> str:
    colour = DECISION_COLOURS.get(value, "#b42318")
    return format_html(
        '<span style="color:#fff;background:{};padding:1px 7px;border-radius:9px;'
        'font-size:11px;white-space:nowrap">{}</span>',
        colour,
        BADGE_LABELS.get(value, value.replace("_", " ")),
    )


def change_link(model_name: str, pk: Any, text: Any) -> str:
    """A link to one of the app's rows in the admin ("-" when there is none)."""
    if pk is None:
        return "-"
    url = reverse(f"admin:assistant_{model_name}_change", args=[pk])
    return format_html('<a href="{}">{}</a>', url, text)


class ReadOnlyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


BREADCRUMBS_AS_LIST = django.VERSION >= (6, 0)  # the admin drew them as a <div> before


def page_context(model_admin: admin.ModelAdmin, request: HttpRequest, title: str) -> dict[str, Any]:  # type: ignore[type-arg]
    """What an app's own admin page renders with: the site's context, the model, breadcrumbs."""
    return {
        **model_admin.admin_site.each_context(request),
        "title": title,
        "opts": model_admin.model._meta,
        "media": model_admin.media,
        "breadcrumbs_as_list": BREADCRUMBS_AS_LIST,
    }
