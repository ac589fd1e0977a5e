"""Personal access tokens: staff see and revoke them (audited), never read or set a secret."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from ..dispatch.confirmation import record_action
from ..models import AccessToken
from .base import ReadOnlyAdmin, badge


class UsableFilter(admin.SimpleListFilter):
    title = _("state")
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [
            ("usable", gettext("usable")),
            ("revoked", gettext("revoked")),
            ("expired", gettext("expired")),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        now = timezone.now()
        if self.value() == "usable":
            return queryset.filter(revoked_at__isnull=True).exclude(expires_at__lte=now)
        if self.value() == "revoked":
            return queryset.filter(revoked_at__isnull=False)
        if self.value() == "expired":
            return queryset.filter(revoked_at__isnull=True, expires_at__lte=now)
        return queryset


@admin.register(AccessToken)
class AccessTokenAdmin(ReadOnlyAdmin):
    list_display = [
        "name",
        "user",
        "key_prefix",
        "state",
        "created_at",
        "expires_at",
        "last_used_at",
        "revoked_at",
        "ceiling",
    ]
    list_filter = [UsableFilter, "max_risk", "created_at"]
    search_fields = ["user__username", "name", "=key_prefix"]
    list_select_related = ["user"]
    actions = ["revoke_tokens"]
    show_full_result_count = False
    fields = [
        "name",
        "user",
        "key_prefix",
        "state",
        "ceiling",
        "created_at",
        "expires_at",
        "last_used_at",
        "revoked_at",
    ]  # never the digest
    readonly_fields = list(fields)  # type: ignore[arg-type]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # The Revoke action needs it on the list; a token's own page is never editable.
        return obj is None and bool(request.user.has_perm("assistant.change_accesstoken"))

    @admin.display(description=_("state"))
    def state(self, token: AccessToken) -> str:
        if token.revoked_at is not None:
            return badge("revoked")
        if token.is_expired:
            return badge("expired")
        return badge("usable")

    @admin.display(description=_("ceiling"))
    def ceiling(self, token: AccessToken) -> str:
        parts = []
        if token.max_risk:
            parts.append(f"up to {token.max_risk}")
        if token.operations:
            parts.append(", ".join(token.operations))
        return "; ".join(parts) or "-"

    @admin.action(description=_("Revoke selected tokens"), permissions=["change"])
    def revoke_tokens(self, request: HttpRequest, queryset: QuerySet[AccessToken]) -> None:
        revoked = 0
        for token in queryset.filter(revoked_at__isnull=True).select_related("user"):
            if token.revoke():
                revoked += 1
                record_action(
                    request,
                    "revoke_access_token",
                    {"token": token.pk, "name": token.name, "owner": token.user.get_username()},
                    domain="tokens",
                )
        self.message_user(
            request,
            ngettext("Revoked %(count)s token.", "Revoked %(count)s tokens.", revoked)
            % {"count": revoked},
            messages.SUCCESS,
        )
