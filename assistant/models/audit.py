"""The append-only audit trail: one entry per dispatch."""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from ..core.declaration import RiskLevel
from .actions import PendingAction
from .conversations import Conversation


class AuditQuerySet(models.QuerySet["AuditEntry"]):
    """Audit rows are append-only: bulk changes are refused; ``prune`` is the one way out."""

    def update(self, **kwargs: Any) -> int:
        raise TypeError("Audit entries are append-only; they cannot be updated.")

    def delete(self) -> tuple[int, dict[str, int]]:
        raise TypeError("Audit entries are append-only; use AuditEntry.objects.prune().")

    def prune(self, older_than: datetime) -> int:
        """Delete entries created before ``older_than`` (retention), returning how many went."""
        doomed = AuditEntry.objects.filter(created_at__lt=older_than)
        return doomed._raw_delete(doomed.db)


class AuditEntry(models.Model):
    """One dispatch: who asked for what, what was decided, how long it took."""

    class Arrival(models.TextChoices):
        NATIVE = "native", _("Native")  # the model server's tool_calls
        TEXT = "text", _("Text")  # a reply that was only the call, written as JSON

    class Decision(models.TextChoices):
        EXECUTED = "executed", _("Executed")
        FAILED = "failed", _("Failed")
        DENIED = "denied", _("Denied")
        INVALID = "invalid", _("Invalid")
        UNKNOWN = "unknown", _("Unknown")
        CONFIRMATION_REQUESTED = "confirmation_requested", _("Confirmation Requested")
        # the tool's prepare hook asked which object was meant; nothing ran
        CLARIFY = "clarify", _("Clarify")
        CONFIRMED = "confirmed", _("Confirmed")
        CANCELLED = "cancelled", _("Cancelled")
        EXPIRED = "expired", _("Expired")
        TIMEOUT = "timeout", _("Timeout")
        UNAVAILABLE = "unavailable", _("Unavailable")
        NOT_READY = "not_ready", _("Not Ready")
        OVER_BUDGET = "over_budget", _("Over Budget")
        # the model proposed one of an AG-UI client's own tools
        CLIENT_TOOL = "client_tool", _("Client Tool")
        # a bound refused calls or ended a turn (count, size, time)
        OVER_LIMIT = "over_limit", _("Over Limit")

    id = models.BigAutoField(primary_key=True, verbose_name=_("ID"))
    created_at = models.DateTimeField(
        default=timezone.now, editable=False, verbose_name=_("created at")
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="assistant_audit_entries",
        verbose_name=_("user"),
    )
    username = models.CharField(max_length=150, blank=True, verbose_name=_("username"))
    operation = models.CharField(max_length=64, verbose_name=_("operation"))
    domain = models.CharField(max_length=64, blank=True, verbose_name=_("domain"))
    risk_level = models.CharField(
        max_length=16,
        choices=[(level.value, level.value) for level in RiskLevel],
        blank=True,
        verbose_name=_("risk level"),
    )
    decision = models.CharField(max_length=32, choices=Decision.choices, verbose_name=_("decision"))
    entities = models.JSONField(
        default=dict, blank=True, encoder=DjangoJSONEncoder, verbose_name=_("entities")
    )
    duration_ms = models.FloatField(default=0, verbose_name=_("duration (ms)"))
    error = models.TextField(blank=True, verbose_name=_("error"))
    reason = models.TextField(
        blank=True, verbose_name=_("reason")
    )  # the approver's reason, where the policy asks for one
    source = models.CharField(max_length=16, blank=True, verbose_name=_("source"))
    client = models.CharField(
        max_length=200, blank=True, verbose_name=_("client")
    )  # an MCP client's name and version, a token's name
    # how a model proposed the call: its server's tool_calls, or JSON it wrote as its reply
    arrival = models.CharField(
        max_length=8, choices=Arrival.choices, blank=True, verbose_name=_("arrival")
    )
    request_ip = models.GenericIPAddressField(null=True, blank=True, verbose_name=_("request IP"))
    conversation = models.ForeignKey(
        Conversation,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="audit_entries",
        verbose_name=_("conversation"),
    )
    pending_action = models.ForeignKey(
        PendingAction,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="audit_entries",
        verbose_name=_("pending action"),
    )

    objects: ClassVar[AuditQuerySet] = AuditQuerySet.as_manager()  # type: ignore[assignment]

    class Meta:
        verbose_name = _("audit entry")
        ordering = ["-id"]
        verbose_name_plural = _("audit entries")
        indexes = [
            models.Index(fields=["created_at"], name="assistant_audit_time"),
            models.Index(fields=["decision", "-id"], name="assistant_audit_decision"),
            models.Index(fields=["operation", "-id"], name="assistant_audit_operation"),
            models.Index(fields=["user", "-id"], name="assistant_audit_user"),
            models.Index(fields=["username", "-id"], name="assistant_audit_username"),
        ]

    def __str__(self) -> str:
        return f"{self.operation} → {self.decision}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise TypeError("Audit entries are append-only; they cannot be changed.")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise TypeError("Audit entries are append-only; use AuditEntry.objects.prune().")
