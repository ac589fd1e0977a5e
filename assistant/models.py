"""Conversations, messages, pending actions, the append-only audit trail, and jobs."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, ClassVar

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models, transaction
from django.db.models import ExpressionWrapper, Value
from django.db.models.functions import Now
from django.utils import timezone

from . import signals
from .core.redaction import hidden_entities, redacted, redacted_entities
from .core.registry import RiskLevel, registry
from .core.sealing import seal, unseal
from .core.storable import shows_something, storable, storable_text, typed_text
from .exceptions import (
    ActionExpired,
    ActionNotFound,
    AlreadyDecided,
    PhraseMismatch,
    ReasonRequired,
    SecondPersonRequired,
    UnknownOperation,
)


class Tool(models.Model):
    """No table: the anchor for the permissions the app creates for ``(resource, ACTION)`` pairs."""

    class Meta:
        managed = False
        default_permissions = ()
        verbose_name = "assistant tool"

    def __str__(self) -> str:
        return "assistant tool"


class Conversation(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="assistant_conversations"
    )
    title = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    updated_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-updated_at"]
        indexes = [models.Index(fields=["user", "-updated_at"], name="assistant_conv_user_recent")]

    def __str__(self) -> str:
        return self.title or str(self.id)

    def save(self, *args: Any, **kwargs: Any) -> None:
        self.title = storable_text(self.title)
        super().save(*args, **kwargs)

    def touch(self) -> None:
        """Mark the conversation as just used (it moves to the top of its user's list)."""
        self.updated_at = timezone.now()
        Conversation.objects.filter(pk=self.pk).update(updated_at=self.updated_at)


class Message(models.Model):
    class Role(models.TextChoices):
        USER = "user"
        ASSISTANT = "assistant"

    class Status(models.TextChoices):
        IN_PROGRESS = "in_progress"
        COMPLETE = "complete"
        CANCELLED = "cancelled"
        FAILED = "failed"
        INTERRUPTED = "interrupted"  # its server process died mid-turn (``liveness``)

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="messages"
    )
    role = models.CharField(max_length=16, choices=Role.choices)
    text = models.TextField(blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.COMPLETE)
    # [{"operation", "entities" (redacted), "decision", "text", "task_id", "audit_id"}]
    tool_calls = models.JSONField(default=list, blank=True, encoder=DjangoJSONEncoder)
    actions = models.JSONField(default=list, blank=True, encoder=DjangoJSONEncoder)
    # "<user id>:<the client's Idempotency-Key>" on both messages of a REST turn sent with one;
    # NULL (not "") when there is none, so keyless messages never collide in the constraint
    idempotency_key = models.CharField(  # noqa: DJ001
        max_length=255, null=True, blank=True, editable=False
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    # What a language model spent on an assistant turn (empty for keyword turns).
    model = models.CharField(max_length=200, blank=True)
    prompt_tokens = models.PositiveIntegerField(null=True, blank=True)
    completion_tokens = models.PositiveIntegerField(null=True, blank=True)
    total_tokens = models.PositiveIntegerField(null=True, blank=True)
    # A user message's: the server process that runs its turn (a ``ServerProcess`` name), so a
    # turn whose process died is found; "" when none is tracked.
    process = models.CharField(max_length=64, blank=True, default="", editable=False)
    # A reply that called the client's own tools (AG-UI): when a run took the client's results
    # for those calls (``take_client_results``); no second run takes them.
    answered_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [
            models.Index(fields=["conversation", "created_at"], name="assistant_msg_conv_time"),
            models.Index(
                fields=["process", "created_at"],
                name="assistant_msg_process_time",
                condition=~models.Q(process=""),
            ),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["idempotency_key", "role"], name="assistant_msg_idempotency_key"
            )
        ]

    def __str__(self) -> str:
        return f"{self.role}: {self.text[:60]}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        # A reply may carry whatever a tool or a model produced: store it storable.
        self.text = storable_text(self.text)
        self.tool_calls = storable(self.tool_calls)
        self.actions = storable(self.actions)
        super().save(*args, **kwargs)

    def take_client_results(self) -> bool:
        """Claim this reply's client tool calls for the one run their results go on in (False:
        another run took them)."""
        now = timezone.now()
        taken = Message.objects.filter(pk=self.pk, answered_at__isnull=True).update(answered_at=now)
        if taken:
            self.answered_at = now
        return bool(taken)


class ServerProcess(models.Model):
    """A server process that runs turns, by its heartbeat: one row per process, not per turn."""

    name = models.CharField(max_length=64, primary_key=True)
    host = models.CharField(max_length=255, blank=True)
    pid = models.PositiveIntegerField(default=0)
    started_at = models.DateTimeField(default=timezone.now)
    beat_at = models.DateTimeField(default=timezone.now, db_index=True)
    # the oldest turn running at the last beat (None: none was): where its turns begin
    oldest_turn_at = models.DateTimeField(null=True, blank=True)
    # the runs with no message of their own (answering an action, an AG-UI client's tool
    # results) going at the last beat: [{"conversation", "run", "reply", "started_at"}]
    runs = models.JSONField(default=list, blank=True, encoder=DjangoJSONEncoder)

    class Meta:
        ordering = ["-beat_at"]

    def __str__(self) -> str:
        return f"{self.host}:{self.pid}"

    @classmethod
    def beat(
        cls,
        name: str,
        *,
        host: str,
        pid: int,
        started_at: datetime,
        oldest_turn_at: Any = None,
        runs: list[dict[str, Any]] | None = None,
    ) -> None:
        """Say this process is alive (its row comes back if a reaper took it for dead)."""
        now = timezone.now()
        fields = {"beat_at": now, "oldest_turn_at": oldest_turn_at, "runs": runs or []}
        if not cls.objects.filter(name=name).update(**fields):
            cls.objects.update_or_create(
                name=name,
                defaults={"host": host[:255], "pid": pid, "started_at": started_at, **fields},
            )

    def turns_since(self, margin: timedelta) -> datetime:
        """Where the turns it may have left running begin (its clock, ``margin`` earlier)."""
        oldest = self.oldest_turn_at or self.beat_at
        return min(oldest, self.beat_at) - margin


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
        PENDING = "pending"
        CONFIRMED = "confirmed"
        CANCELLED = "cancelled"
        EXPIRED = "expired"

    class Policy(models.TextChoices):
        """Who may approve, and how: from the tool's risk class unless settings say otherwise."""

        AUTO = "auto"
        CONFIRM = "confirm"
        CONFIRM_WITH_REASON = "confirm_with_reason"
        TWO_PERSON = "two_person"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="assistant_pending_actions"
    )
    conversation = models.ForeignKey(
        Conversation,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="pending_actions",
    )
    operation = models.CharField(max_length=64)
    entities = models.JSONField(default=dict, encoder=DjangoJSONEncoder)  # sensitive ones redacted
    entities_digest = models.CharField(max_length=64)
    # the sensitive entities, encrypted (``sealing``) while it waits; emptied once it is decided
    sealed = models.TextField(blank=True, editable=False)
    summary = models.TextField(blank=True)
    # What will change, as the tool's prepare hook showed it: {"kind": "changes"|"rows"|"list"|"text", ...}
    preview = models.JSONField(null=True, blank=True, encoder=DjangoJSONEncoder)
    policy = models.CharField(max_length=24, choices=Policy.choices, default=Policy.CONFIRM)
    # two_person: the permission ("app_label.codename") the second user must hold
    approver_permission = models.CharField(max_length=150, blank=True)
    # what a dangerous action's approver types to approve (the object's name); empty: hold to confirm
    confirm_phrase = models.CharField(max_length=200, blank=True)
    reason = models.TextField(blank=True)  # confirm_with_reason: why the approver said yes
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    expires_at = models.DateTimeField()
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    # what the decided action came to ({"decision", "text", "data"}), for a caller that asks again
    result = models.JSONField(null=True, blank=True, encoder=DjangoJSONEncoder)
    # an MCP client's call that opened it (a digest): its retry finds this action, never a second
    request_key = models.CharField(max_length=64, blank=True, db_index=True)
    delivered_at = models.DateTimeField(null=True, blank=True)  # when that retry got the result

    objects: ClassVar[PendingActionQuerySet] = PendingActionQuerySet.as_manager()  # type: ignore[assignment]

    class Meta:
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
            raise PhraseMismatch(f"Type {self.confirm_phrase!r} to confirm.")

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
                f"This {action.operation} request expired at "
                f"{action.expires_at:%Y-%m-%d %H:%M:%S %Z}; ask again."
            )
        raise AlreadyDecided(f"This action was already {action.status}.")


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
        NATIVE = "native"  # the model server's tool_calls
        TEXT = "text"  # a reply that was only the call, written as JSON

    class Decision(models.TextChoices):
        EXECUTED = "executed"
        FAILED = "failed"
        DENIED = "denied"
        INVALID = "invalid"
        UNKNOWN = "unknown"
        CONFIRMATION_REQUESTED = "confirmation_requested"
        CLARIFY = "clarify"  # the tool's prepare hook asked which object was meant; nothing ran
        CONFIRMED = "confirmed"
        CANCELLED = "cancelled"
        EXPIRED = "expired"
        TIMEOUT = "timeout"
        UNAVAILABLE = "unavailable"
        NOT_READY = "not_ready"
        OVER_BUDGET = "over_budget"
        CLIENT_TOOL = "client_tool"  # the model proposed one of an AG-UI client's own tools
        OVER_LIMIT = "over_limit"  # a bound refused calls or ended a turn (count, size, time)

    id = models.BigAutoField(primary_key=True)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="assistant_audit_entries",
    )
    username = models.CharField(max_length=150, blank=True)
    operation = models.CharField(max_length=64)
    domain = models.CharField(max_length=64, blank=True)
    risk_level = models.CharField(
        max_length=16, choices=[(level.value, level.value) for level in RiskLevel], blank=True
    )
    decision = models.CharField(max_length=32, choices=Decision.choices)
    entities = models.JSONField(default=dict, blank=True, encoder=DjangoJSONEncoder)
    duration_ms = models.FloatField(default=0)
    error = models.TextField(blank=True)
    reason = models.TextField(blank=True)  # the approver's reason, where the policy asks for one
    source = models.CharField(max_length=16, blank=True)
    client = models.CharField(
        max_length=200, blank=True
    )  # an MCP client's name and version, a token's name
    # how a model proposed the call: its server's tool_calls, or JSON it wrote as its reply
    arrival = models.CharField(max_length=8, choices=Arrival.choices, blank=True)
    request_ip = models.GenericIPAddressField(null=True, blank=True)
    conversation = models.ForeignKey(
        Conversation, null=True, blank=True, on_delete=models.SET_NULL, related_name="audit_entries"
    )
    pending_action = models.ForeignKey(
        PendingAction,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="audit_entries",
    )

    objects: ClassVar[AuditQuerySet] = AuditQuerySet.as_manager()  # type: ignore[assignment]

    class Meta:
        ordering = ["-id"]
        verbose_name_plural = "audit entries"
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


class JobQuerySet(models.QuerySet["Job"]):
    def owned_by(self, user: Any) -> JobQuerySet:
        return self.filter(user_id=user.pk)

    def visible_to(self, user: Any) -> JobQuerySet:
        """The user's own jobs; every job for staff holding ``assistant.view_job``."""
        if user.is_active and user.is_staff and user.has_perm("assistant.view_job"):
            return self
        return self.owned_by(user)

    def active(self) -> JobQuerySet:
        return self.filter(status__in=[Job.Status.QUEUED, Job.Status.RUNNING])

    def stale(self, before: datetime) -> JobQuerySet:
        """Running jobs whose worker has not been heard from since ``before``."""
        return self.filter(status=Job.Status.RUNNING, heartbeat_at__lt=before)


class Job(models.Model):
    """Long work a tool handed to a worker: its id is the tool's ``task_id``."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        CANCELLED = "cancelled"

    FINISHED = (Status.SUCCEEDED, Status.FAILED, Status.CANCELLED)

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    operation = models.CharField(max_length=64, blank=True)
    function = models.CharField(max_length=300)
    args = models.JSONField(default=list, blank=True, encoder=DjangoJSONEncoder)
    kwargs = models.JSONField(default=dict, blank=True, encoder=DjangoJSONEncoder)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="assistant_jobs",
    )
    conversation = models.ForeignKey(
        Conversation, null=True, blank=True, on_delete=models.SET_NULL, related_name="jobs"
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    progress = models.PositiveSmallIntegerField(default=0)
    progress_message = models.CharField(max_length=300, blank=True)
    result = models.TextField(blank=True)
    result_data = models.JSONField(null=True, blank=True, encoder=DjangoJSONEncoder)
    error = models.TextField(blank=True)
    cancel_requested = models.BooleanField(default=False)
    worker = models.CharField(max_length=200, blank=True)
    task_result_id = models.CharField(max_length=64, blank=True)
    completion_message = models.ForeignKey(
        Message, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(default=timezone.now, db_index=True)

    objects: ClassVar[JobQuerySet] = JobQuerySet.as_manager()  # type: ignore[assignment]

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["user", "-created_at"], name="assistant_job_user_recent"),
            models.Index(fields=["status", "heartbeat_at"], name="assistant_job_status_beat"),
        ]

    def __str__(self) -> str:
        return f"{self.operation or self.function} ({self.status})"

    @property
    def is_finished(self) -> bool:
        return self.status in self.FINISHED

    @property
    def failures(self) -> int:
        """How many failures a job that ran to its end found (its result data's ``failures``)."""
        data = self.result_data
        value = data.get("failures") if isinstance(data, dict) else None
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0

    def _set(self, **fields: Any) -> None:
        fields["updated_at"] = timezone.now()
        for name, value in fields.items():
            setattr(self, name, value)
        self.save(update_fields=list(fields))

    def claim(self, worker: str) -> bool:
        """Move queued → running for exactly one worker, whatever delivered the task twice."""
        now = timezone.now()
        claimed = Job.objects.filter(
            pk=self.pk, status=Job.Status.QUEUED, cancel_requested=False
        ).update(
            status=Job.Status.RUNNING,
            worker=worker[:200],
            started_at=now,
            heartbeat_at=now,
            updated_at=now,
        )
        if claimed:
            self.refresh_from_db()
        return bool(claimed)

    def report(self, percent: float, message: str = "") -> None:
        self._set(
            progress=max(0, min(100, int(percent))),
            progress_message=storable_text(str(message))[:300],
            heartbeat_at=timezone.now(),
        )

    def beat(self) -> bool:
        """Record that the worker is alive; returns whether the user asked to cancel."""
        Job.objects.filter(pk=self.pk).update(heartbeat_at=timezone.now())
        return bool(
            Job.objects.filter(pk=self.pk).values_list("cancel_requested", flat=True).first()
        )

    def finish(self, status: str, *, result: str = "", data: Any = None, error: str = "") -> bool:
        """Running → finished, once: a worker waking after the reaper failed its job loses."""
        fields: dict[str, Any] = {
            "status": status,
            "result": storable_text(result),
            "result_data": storable(data),
            "error": storable_text(error)[:5000],
            "finished_at": timezone.now(),
            "updated_at": timezone.now(),
        }
        if status == Job.Status.SUCCEEDED:
            fields["progress"] = 100
        won = Job.objects.filter(pk=self.pk, status=Job.Status.RUNNING).update(**fields)
        self.refresh_from_db()
        return bool(won)

    def request_cancel(self) -> bool:
        """Ask the job to stop: a queued one is cancelled at once, a running one told to stop."""
        now = timezone.now()
        if Job.objects.filter(pk=self.pk, status=Job.Status.QUEUED).update(
            status=Job.Status.CANCELLED, cancel_requested=True, finished_at=now, updated_at=now
        ):
            self.refresh_from_db()
            return True
        changed = Job.objects.filter(pk=self.pk, status=Job.Status.RUNNING).update(
            cancel_requested=True, updated_at=now
        )
        self.refresh_from_db()
        return bool(changed)


class ValidationTask(models.Model):
    """A persistent validation policy: what to check, with which rules, how often."""

    class Schedule(models.TextChoices):
        NONE = "none"
        INTERVAL = "interval"
        CRON = "cron"

    name = models.CharField(max_length=200)
    # A task sees what its owner may view; without one (made in code) it sees everything, so an
    # owner's tasks go with them rather than outlive them seeing more.
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="assistant_validation_tasks",
    )
    target_type = models.ForeignKey("contenttypes.ContentType", on_delete=models.CASCADE)
    target_id = models.CharField(max_length=64, blank=True)  # empty: every instance (filtered)
    target_filter = models.JSONField(default=dict, blank=True)
    # [{"name": "<rule>", "options": {...}}]
    rules = models.JSONField(default=list)
    schedule = models.CharField(max_length=16, choices=Schedule.choices, default=Schedule.NONE)
    interval_seconds = models.PositiveIntegerField(null=True, blank=True)
    cron = models.CharField(max_length=100, blank=True)
    enabled = models.BooleanField(default=True)
    next_run_at = models.DateTimeField(null=True, blank=True, db_index=True)
    last_run_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering = ["name"]
        permissions = [("run_validationtask", "Can run validation task")]

    def __str__(self) -> str:
        return self.name

    @property
    def target_label(self) -> str:
        label = f"{self.target_type.app_label}.{self.target_type.model_class().__name__}"  # type: ignore[union-attr]
        return f"{label}:{self.target_id}" if self.target_id else label


class ValidationRun(models.Model):
    """One run of a validation task, with counts computed from its findings."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        PASSED = "passed"
        FAILED = "failed"
        WARNED = "warned"
        ERRORED = "errored"

    class Trigger(models.TextChoices):
        USER = "user"
        SCHEDULE = "schedule"
        ASSISTANT = "assistant"

    task = models.ForeignKey(ValidationTask, on_delete=models.CASCADE, related_name="runs")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    passed = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    warned = models.PositiveIntegerField(default=0)
    triggered_by = models.CharField(max_length=16, choices=Trigger.choices, default=Trigger.USER)
    triggered_by_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    scheduled_for = models.DateTimeField(null=True, blank=True)
    job = models.ForeignKey(Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            # two schedulers that overlap create a due run once
            models.UniqueConstraint(
                fields=["task", "scheduled_for"], name="assistant_run_once_per_slot"
            )
        ]

    def __str__(self) -> str:
        return f"{self.task} #{self.pk} ({self.status})"


class ValidationFinding(models.Model):
    class Outcome(models.TextChoices):
        PASS = "pass"
        FAIL = "fail"
        WARN = "warn"

    run = models.ForeignKey(ValidationRun, on_delete=models.CASCADE, related_name="findings")
    rule = models.CharField(max_length=100)
    target_type = models.ForeignKey(
        "contenttypes.ContentType", null=True, blank=True, on_delete=models.SET_NULL
    )
    target_id = models.CharField(max_length=64, blank=True)
    target_repr = models.CharField(max_length=300, blank=True)
    outcome = models.CharField(max_length=8, choices=Outcome.choices)
    message = models.TextField(blank=True)
    details = models.JSONField(default=dict, blank=True, encoder=DjangoJSONEncoder)

    class Meta:
        ordering = ["run", "id"]

    def __str__(self) -> str:
        return f"{self.rule}: {self.outcome}"


class AccessTokenQuerySet(models.QuerySet["AccessToken"]):
    def owned_by(self, user: Any) -> AccessTokenQuerySet:
        return self.filter(user=user)

    def usable(self) -> AccessTokenQuerySet:
        """Neither revoked nor expired."""
        now = timezone.now()
        return self.filter(revoked_at__isnull=True).exclude(expires_at__lte=now)


class AccessToken(models.Model):
    """A personal access token: a user's bearer credential for machine clients, stored hashed.

    The secret is shown once, at creation; the row keeps its SHA-256 digest (the secret is 32
    random bytes, so a fast digest is as safe as a slow one) and a prefix to tell tokens apart.
    A ceiling narrows what the token may do below its user's permissions: a highest risk level
    and/or a set of operations.
    """

    PREFIX = "dop_"

    id = models.BigAutoField(primary_key=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="assistant_access_tokens"
    )
    name = models.CharField(max_length=100)
    key_prefix = models.CharField(max_length=16, editable=False)
    digest = models.CharField(max_length=64, unique=True, editable=False)
    max_risk = models.CharField(
        max_length=16, choices=[(level.value, level.value) for level in RiskLevel], blank=True
    )
    operations = models.JSONField(default=list, blank=True)  # empty: every operation
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects: ClassVar[AccessTokenQuerySet] = AccessTokenQuerySet.as_manager()  # type: ignore[assignment]

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "personal access token"

    def __str__(self) -> str:
        return f"{self.name} ({self.key_prefix}…)"

    @staticmethod
    def digest_of(secret: str) -> str:
        return hashlib.sha256(secret.encode()).hexdigest()

    @property
    def is_expired(self) -> bool:
        return self.expires_at is not None and self.expires_at <= timezone.now()

    @property
    def is_usable(self) -> bool:
        return self.revoked_at is None and not self.is_expired

    def revoke(self) -> bool:
        """Revoke it now (once: a second revoke changes nothing and answers False)."""
        now = timezone.now()
        changed = AccessToken.objects.filter(pk=self.pk, revoked_at__isnull=True).update(
            revoked_at=now
        )
        if changed:
            self.revoked_at = now
            # as a save of that field would: runs holding this token learn it (``turns.lanes``)
            models.signals.post_save.send(
                sender=AccessToken,
                instance=self,
                created=False,
                update_fields=frozenset({"revoked_at"}),
                raw=False,
                using=self._state.db or "default",
            )
        return bool(changed)


class BudgetUsage(models.Model):
    """A user's language-model tokens on one day: what was spent, and what calls reserved."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="assistant_budget_usage"
    )
    day = models.DateField()
    spent_tokens = models.PositiveBigIntegerField(default=0)  # settled: what the calls spent
    reserved_tokens = models.PositiveBigIntegerField(default=0)  # all the day's reservations
    calls = models.PositiveIntegerField(default=0)
    refusals = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-day", "user_id"]
        verbose_name = "budget usage"
        verbose_name_plural = "budget usage"
        constraints = [
            models.UniqueConstraint(fields=["user", "day"], name="assistant_budget_user_day")
        ]

    def __str__(self) -> str:
        return f"{self.user_id} on {self.day}"

    @classmethod
    def of(cls, user: Any, day: Any, spent_before: Callable[[], int]) -> BudgetUsage:
        """The user's row for ``day``, made when first needed (``spent_before`` seeds it)."""
        found = cls.objects.filter(user_id=user.pk, day=day).first()
        if found is not None:
            return found
        usage, _ = cls.objects.get_or_create(
            user_id=user.pk, day=day, defaults={"spent_tokens": spent_before()}
        )
        return usage

    def reserve(self, tokens: int, *, limit: int, ttl_seconds: float) -> BudgetReservation | None:
        """Hold ``tokens`` for one call while anything of the day's limit is left, else None."""
        now = timezone.now()
        with transaction.atomic():
            rows = BudgetUsage.objects.filter(pk=self.pk)
            # An UPDATE first: PostgreSQL locks the row, SQLite takes its write lock (in any
            # transaction mode), so one user's reservations are decided one after the other.
            rows.update(updated_at=now)
            spent = rows.values_list("spent_tokens", flat=True).get()
            if spent + self.held(now) >= limit:
                rows.update(refusals=models.F("refusals") + 1)
                return None
            rows.update(
                reserved_tokens=models.F("reserved_tokens") + tokens, calls=models.F("calls") + 1
            )
            # what crashed calls left (this day's or earlier): let go
            BudgetReservation.objects.filter(
                usage__user_id=self.user_id, expires_at__lte=now
            ).delete()
            return BudgetReservation.objects.create(
                usage=self,
                tokens=tokens,
                created_at=now,
                expires_at=now + timedelta(seconds=ttl_seconds),
            )

    def held(self, now: datetime | None = None) -> int:
        """Tokens the calls running now hold (a reservation past its expiry holds nothing)."""
        live = self.reservations.filter(expires_at__gt=now or timezone.now())
        return int(live.aggregate(held=models.Sum("tokens"))["held"] or 0)


class BudgetReservation(models.Model):
    """Tokens held from a day's budget for one model call while it runs; gone once settled."""

    usage = models.ForeignKey(BudgetUsage, on_delete=models.CASCADE, related_name="reservations")
    tokens = models.PositiveIntegerField()
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()

    class Meta:
        ordering = ["created_at"]

    def __str__(self) -> str:
        return f"{self.tokens} tokens until {self.expires_at:%H:%M:%S}"

    def settle(self, spent: int) -> None:
        """Count what the call spent and let the reservation go, in one transaction."""
        with transaction.atomic():
            BudgetUsage.objects.filter(pk=self.usage_id).update(
                spent_tokens=models.F("spent_tokens") + spent, updated_at=timezone.now()
            )
            BudgetReservation.objects.filter(pk=self.pk).delete()
