"""Pending actions: risky calls waiting for a confirmation, single use, bound to their arguments."""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import timedelta
from typing import Any, ClassVar

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.db.models import ExpressionWrapper, Value
from django.db.models.functions import Now
from django.utils import timezone
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from .. import signals
from ..core.declaration import RiskLevel
from ..core.redaction import hidden_entities, redacted, redacted_entities
from ..core.registry import registry
from ..core.sealing import seal, unseal
from ..core.storable import shows_something, storable, storable_text, typed_text
from ..exceptions import (
    ActionExpired,
    ActionNotFound,
    AlreadyDecided,
    PhraseMismatch,
    ReasonRequired,
    SecondPersonRequired,
    UnknownOperation,
)
from .conversations import Conversation


def entities_digest(entities: dict[str, Any]) -> str:
    """A stable digest of validated entities, binding a pending action to its exact arguments."""
    canonical = json.dumps(entities, sort_keys=True, cls=DjangoJSONEncoder, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


# How far the database's clock may run ahead of the servers' for ``may_concern`` to hide nothing.
CLOCK_MARGIN = Value(timedelta(minutes=5), output_field=models.DurationField())


class PendingActionQuerySet(models.QuerySet["PendingAction"]):
    def waiting(self) -> PendingActionQuerySet:
        return self.filter(status=PendingAction.Status.PENDING, expires_at__gt=timezone.now())

    def owned_by(self, user: Any) -> PendingActionQuerySet:
        return self.filter(user_id=user.pk)

    def awaiting_approval_by(self, user: Any) -> PendingActionQuerySet:
        """Other people's waiting ``two_person`` actions whose approver permission ``user`` holds."""
        others = (
            self.waiting().filter(policy=PendingAction.Policy.TWO_PERSON).exclude(user_id=user.pk)
        )
        held = [
            permission
            for permission in others.order_by()
            .values_list("approver_permission", flat=True)
            .distinct()
            if permission and user.has_perm(permission)
        ]
        return others.filter(approver_permission__in=held)

    def may_concern(self, user: Any) -> PendingActionQuerySet:
        """Every waiting action ``answerable_by`` could list, and more, in one plain query: the
        user's own and every two-person one (no permission read). Nothing here: nothing for them.

        Its clock is the database's, a few minutes generous (a clock ahead of ours hides
        nothing), so the query is the same for every user but their key; without ``USE_TZ`` it
        is ours (stored times are then local, and SQLite's clock is UTC).
        """
        due: Any = timezone.now()
        if settings.USE_TZ:
            due = ExpressionWrapper(Now() - CLOCK_MARGIN, output_field=models.DateTimeField())
        return self.filter(status=PendingAction.Status.PENDING, expires_at__gt=due).filter(
            models.Q(user_id=user.pk) | models.Q(policy=PendingAction.Policy.TWO_PERSON)
        )

    def answerable_by(self, user: Any) -> PendingActionQuerySet:
        """The waiting actions a user's inbox lists: their own, and others' two-person ones
        whose approver permission they hold (the server decides who may approve)."""
        if not user.is_active:
            return self.none()
        return self.waiting().owned_by(user) | self.awaiting_approval_by(user)

    def expire_due(self) -> int:
        """Close the actions whose time ran out unanswered, keeping only redacted entities."""
        now = timezone.now()
        closed = 0
        for action in self.filter(status=PendingAction.Status.PENDING, expires_at__lte=now):
            if PendingAction.objects.filter(
                pk=action.pk, status=PendingAction.Status.PENDING
            ).update(status=PendingAction.Status.EXPIRED, decided_at=now, **action.forgotten()):
                closed += 1
                action.refresh_from_db()
                action._decided()
        return closed


class PendingAction(models.Model):
    """A risky call waiting for its user's confirmation: single use, bound to its arguments, expiring."""

    class Status(models.TextChoices):
        PENDING = "pending", _("Pending")
        CONFIRMED = "confirmed", _("Confirmed")
        CANCELLED = "cancelled", _("Cancelled")
        EXPIRED = "expired", _("Expired")

    class Policy(models.TextChoices):
        """Who may approve, and how: from the tool's risk class unless settings say otherwise."""

        AUTO = "auto", _("Auto")
        CONFIRM = "confirm", _("Confirm")
        CONFIRM_WITH_REASON = "confirm_with_reason", _("Confirm With Reason")
        TWO_PERSON = "two_person", _("Two Person")

    id = models.UUIDField(
        primary_key=True, default=uuid.uuid4, editable=False, verbose_name=_("ID")
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="assistant_pending_actions",
        verbose_name=_("user"),
    )
    conversation = models.ForeignKey(
        Conversation,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="pending_actions",
        verbose_name=_("conversation"),
    )
    operation = models.CharField(max_length=64, verbose_name=_("operation"))
    entities = models.JSONField(
        default=dict, encoder=DjangoJSONEncoder, verbose_name=_("entities")
    )  # sensitive ones redacted
    entities_digest = models.CharField(max_length=64, verbose_name=_("entities digest"))
    # the sensitive entities, encrypted (``sealing``) while it waits; emptied once it is decided
    sealed = models.TextField(blank=True, editable=False, verbose_name=_("sealed"))
    summary = models.TextField(blank=True, verbose_name=_("summary"))
    # What will change, as the tool's prepare hook showed it: {"kind": "changes"|"rows"|"list"|"text", ...}
    preview = models.JSONField(
        null=True, blank=True, encoder=DjangoJSONEncoder, verbose_name=_("preview")
    )
    policy = models.CharField(
        max_length=24, choices=Policy.choices, default=Policy.CONFIRM, verbose_name=_("policy")
    )
    # two_person: the permission ("app_label.codename") the second user must hold
    approver_permission = models.CharField(
        max_length=150, blank=True, verbose_name=_("approver permission")
    )
    # what a dangerous action's approver types to approve (the object's name); empty: hold to confirm
    confirm_phrase = models.CharField(max_length=200, blank=True, verbose_name=_("confirm phrase"))
    reason = models.TextField(
        blank=True, verbose_name=_("reason")
    )  # confirm_with_reason: why the approver said yes
    status = models.CharField(
        max_length=16, choices=Status.choices, default=Status.PENDING, verbose_name=_("status")
    )
    created_at = models.DateTimeField(
        default=timezone.now, editable=False, verbose_name=_("created at")
    )
    expires_at = models.DateTimeField(verbose_name=_("expires at"))
    decided_at = models.DateTimeField(null=True, blank=True, verbose_name=_("decided at"))
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=_("decided by"),
    )
    # what the decided action came to ({"decision", "text", "data"}), for a caller that asks again
    result = models.JSONField(
        null=True, blank=True, encoder=DjangoJSONEncoder, verbose_name=_("result")
    )
    # an MCP client's call that opened it (a digest): its retry finds this action, never a second
    request_key = models.CharField(
        max_length=64, blank=True, db_index=True, verbose_name=_("request key")
    )
    delivered_at = models.DateTimeField(
        null=True, blank=True, verbose_name=_("delivered at")
    )  # when that retry got the result

    objects: ClassVar[PendingActionQuerySet] = PendingActionQuerySet.as_manager()  # type: ignore[assignment]

    class Meta:
        verbose_name = _("pending action")
        verbose_name_plural = _("pending actions")
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["user", "status"], name="assistant_pending_user_status")]

    def __str__(self) -> str:
        return f"{self.operation} ({self.status})"

    @classmethod
    def open(
        cls,
        *,
        user: Any,
        operation: str,
        entities: dict[str, Any],
        ttl_seconds: float,
        conversation: Conversation | None = None,
        summary: str = "",
        preview: dict[str, Any] | None = None,
        policy: str = Policy.CONFIRM,
        approver_permission: str = "",
        confirm_phrase: str = "",
        site: Any = None,
    ) -> PendingAction:
        """Ask: store the call, its sensitive entities sealed (``site`` knows which those are)."""
        now, pk = timezone.now(), uuid.uuid4()
        cls.objects.owned_by(user).expire_due()  # asking again: the expired ones forget (indexed)
        tool = (site if site is not None else registry).find(operation)
        entities = storable(entities)
        secrets = hidden_entities(tool, entities)
        if secrets:
            entities = redacted_entities(tool, entities)
        return cls.objects.create(
            id=pk,
            user=user,
            conversation=conversation,
            operation=operation,
            entities=entities,
            entities_digest=entities_digest(entities),
            sealed=seal(secrets, bound_to=str(pk)) if secrets else "",
            summary=storable_text(summary),
            preview=storable(preview) if preview is not None else None,
            policy=policy,
            approver_permission=approver_permission,
            confirm_phrase=storable_text(confirm_phrase),
            created_at=now,
            expires_at=now + timedelta(seconds=ttl_seconds),
        )

    @property
    def is_expired(self) -> bool:
        return self.expires_at <= timezone.now()

    def is_bound_to(self, entities: dict[str, Any]) -> bool:
        return entities_digest(entities) == self.entities_digest

    def arguments(self) -> dict[str, Any]:
        """The entities it was asked with, its sealed ones read back (``SecretUnreadable`` if
        no key reads them)."""
        if not self.sealed:
            return dict(self.entities)
        return {**self.entities, **unseal(self.sealed, bound_to=str(self.pk))}

    def shown_entities(self, site: Any = None) -> dict[str, Any]:
        """The entities as they may be shown (sensitive values redacted)."""
        return redacted(self.operation, self.entities, site if site is not None else registry)

    @property
    def risk(self) -> str:
        """The risk class of the tool asked for ("" once the tool is gone from the registry)."""
        try:
            return registry.get(self.operation).risk_level.value
        except UnknownOperation:
            return ""

    @property
    def confirm_mode(self) -> str:
        """How an approver says yes: "type" the phrase, "hold" the button (dangerous), or "click"."""
        if self.confirm_phrase:
            return "type"
        return "hold" if self.risk == RiskLevel.DANGEROUS else "click"

    @property
    def requested_by(self) -> str:
        return str(self.user.get_username())

    def shown(self) -> dict[str, Any]:
        """The action as every client is told of it while it waits: all an approval card needs."""
        return {
            "id": str(self.pk),
            "operation": self.operation,
            "summary": self.summary,
            "entities": self.shown_entities(),
            "preview": self.preview,
            "risk": self.risk,
            "policy": self.policy,
            "confirm": self.confirm_mode,
            # the object's name, not a secret: the card compares what is typed (empty unless "type")
            "confirm_phrase": self.confirm_phrase,
            "requested_by": self.requested_by,
            "conversation": str(self.conversation_id) if self.conversation_id else None,
            "created_at": self.created_at.isoformat(),
            "expires_at": self.expires_at.isoformat(),
        }

    def forgotten(self, site: Any = None) -> dict[str, Any]:
        """The fields a decided action keeps: redacted entities (and no digest, no sealed copy of
        the secrets)."""
        entities = self.shown_entities(site)
        return {"entities": entities, "entities_digest": entities_digest(entities), "sealed": ""}

    def may_be_decided_by(self, user: Any) -> bool:
        """Its requester, or for ``two_person`` someone else holding the approver permission."""
        if user is None or user.pk is None:
            return False
        if user.pk == self.user_id:
            return True
        return (
            self.policy == self.Policy.TWO_PERSON
            and bool(self.approver_permission)
            and user.has_perm(self.approver_permission)
        )

    @classmethod
    def for_decider(cls, action_id: Any, user: Any) -> PendingAction:
        """The action with this id that ``user`` may decide; anyone else's is ``ActionNotFound``."""
        try:
            pk = uuid.UUID(str(action_id))
        except ValueError:
            raise ActionNotFound() from None
        action = cls.objects.filter(pk=pk).select_related("conversation").first()
        if action is None or not action.may_be_decided_by(user):
            raise ActionNotFound()
        return action

    def check_answer(self, user: Any, *, confirm: bool, reason: str = "", phrase: str = "") -> None:
        """Refuse a confirmation its policy would not take (the requester's own two_person one,
        no reason where one is asked for, a wrong phrase), both read as ``typed_text``; refusing
        needs nothing."""
        if not confirm:
            return
        if self.policy == self.Policy.TWO_PERSON and user.pk == self.user_id:
            raise SecondPersonRequired()
        if self.policy == self.Policy.CONFIRM_WITH_REASON and not shows_something(
            typed_text(reason)
        ):
            raise ReasonRequired()
        if (
            self.confirm_phrase
            and typed_text(phrase).casefold() != typed_text(self.confirm_phrase).casefold()
        ):
            raise PhraseMismatch(
                gettext("Type %(phrase)s to confirm.") % {"phrase": repr(self.confirm_phrase)}
            )

    @classmethod
    def decide(
        cls,
        action_id: Any,
        user: Any,
        status: str,
        *,
        reason: str = "",
        phrase: str = "",
        site: Any = None,
    ) -> PendingAction:
        """Move a pending action to ``status`` exactly once, whoever races for it, if ``user``
        may decide it and the answer satisfies its policy (``check_answer``).

        The claimed values were read before; from here on the row keeps only redacted ones.
        """
        action = cls.for_decider(action_id, user)
        action.check_answer(
            user, confirm=status == cls.Status.CONFIRMED, reason=reason, phrase=phrase
        )
        return action._moved(user, status, reason, site)

    @classmethod
    def withdraw(
        cls, action_id: Any, user: Any, *, reason: str = "", site: Any = None
    ) -> PendingAction:
        """Cancel a waiting action on its requester's behalf, whoever ``user`` is: its
        conversation is being deleted (by its user, or by staff). As ``decide``, exactly once."""
        return cls.objects.get(pk=action_id)._moved(user, cls.Status.CANCELLED, reason, site)

    def expire(self) -> PendingAction:
        """Close it unanswered as ``expired`` (it can no longer run), forgetting its secrets."""
        closed = (
            type(self)
            .objects.filter(pk=self.pk, status=self.Status.PENDING)
            .update(status=self.Status.EXPIRED, decided_at=timezone.now(), **self.forgotten())
        )
        self.refresh_from_db()
        if closed:
            self._decided()
        return self

    def _decided(self) -> None:
        """Tell the host project's receivers that this action left ``pending`` (once)."""
        signals.send(
            signals.action_decided,
            PendingAction,
            action=self,
            status=self.status,
            user=self.decided_by,
        )

    def _moved(self, user: Any, status: str, reason: str, site: Any) -> PendingAction:
        cls, action, now = type(self), self, timezone.now()
        claimed = cls.objects.filter(
            pk=action.pk, status=cls.Status.PENDING, expires_at__gt=now
        ).update(
            status=status,
            decided_at=now,
            decided_by=user,
            reason=typed_text(reason),
            **action.forgotten(site),
        )
        if claimed:
            decided = cls.objects.get(pk=action.pk)
            decided._decided()
            return decided
        action.refresh_from_db()
        if action.status == cls.Status.PENDING:
            if cls.objects.filter(pk=action.pk, status=cls.Status.PENDING).update(
                status=cls.Status.EXPIRED, decided_at=now, **action.forgotten(site)
            ):
                action.refresh_from_db()
                action._decided()
            else:
                action.refresh_from_db()
        if action.status == cls.Status.EXPIRED:
            raise ActionExpired(
                gettext("This %(operation)s request expired at %(when)s; ask again.")
                % {
                    "operation": action.operation,
                    "when": f"{action.expires_at:%Y-%m-%d %H:%M:%S %Z}",
                }
            )
        already: dict[str, str] = {
            cls.Status.CONFIRMED: gettext("This action was already confirmed."),
            cls.Status.CANCELLED: gettext("This action was already cancelled."),
        }
        raise AlreadyDecided(already.get(action.status, ""))
