"""Conversations and their messages: what a user said and what the assistant replied."""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from ..core.storable import storable, storable_text


class Conversation(models.Model):
    id = models.UUIDField(
        primary_key=True, default=uuid.uuid4, editable=False, verbose_name=_("ID")
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="assistant_conversations",
        verbose_name=_("user"),
    )
    title = models.CharField(max_length=200, blank=True, verbose_name=_("title"))
    created_at = models.DateTimeField(
        default=timezone.now, editable=False, verbose_name=_("created at")
    )
    updated_at = models.DateTimeField(
        default=timezone.now, db_index=True, verbose_name=_("updated at")
    )

    class Meta:
        verbose_name = _("conversation")
        verbose_name_plural = _("conversations")
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
        USER = "user", _("User")
        ASSISTANT = "assistant", _("Assistant")

    class Status(models.TextChoices):
        IN_PROGRESS = "in_progress", _("In Progress")
        COMPLETE = "complete", _("Complete")
        CANCELLED = "cancelled", _("Cancelled")
        FAILED = "failed", _("Failed")
        # its server process died mid-turn (``liveness``)
        INTERRUPTED = "interrupted", _("Interrupted")

    id = models.UUIDField(
        primary_key=True, default=uuid.uuid4, editable=False, verbose_name=_("ID")
    )
    conversation = models.ForeignKey(
        Conversation,
        on_delete=models.CASCADE,
        related_name="messages",
        verbose_name=_("conversation"),
    )
    role = models.CharField(max_length=16, choices=Role.choices, verbose_name=_("role"))
    text = models.TextField(blank=True, verbose_name=_("text"))
    status = models.CharField(
        max_length=16, choices=Status.choices, default=Status.COMPLETE, verbose_name=_("status")
    )
    # [{"operation", "entities" (redacted), "decision", "text", "task_id", "audit_id"}]
    tool_calls = models.JSONField(
        default=list, blank=True, encoder=DjangoJSONEncoder, verbose_name=_("tool calls")
    )
    actions = models.JSONField(
        default=list, blank=True, encoder=DjangoJSONEncoder, verbose_name=_("actions")
    )
    # "<user id>:<the client's Idempotency-Key>" on both messages of a REST turn sent with one;
    # NULL (not "") when there is none, so keyless messages never collide in the constraint
    idempotency_key = models.CharField(  # noqa: DJ001
        max_length=255, null=True, blank=True, editable=False, verbose_name=_("idempotency key")
    )
    created_at = models.DateTimeField(
        default=timezone.now, editable=False, verbose_name=_("created at")
    )
    # What a language model spent on an assistant turn (empty for keyword turns).
    model = models.CharField(max_length=200, blank=True, verbose_name=_("LLM model"))
    prompt_tokens = models.PositiveIntegerField(
        null=True, blank=True, verbose_name=_("prompt tokens")
    )
    completion_tokens = models.PositiveIntegerField(
        null=True, blank=True, verbose_name=_("completion tokens")
    )
    total_tokens = models.PositiveIntegerField(
        null=True, blank=True, verbose_name=_("total tokens")
    )
    # A user message's: the server process that runs its turn (a ``ServerProcess`` name), so a
    # turn whose process died is found; "" when none is tracked.
    process = models.CharField(
        max_length=64, blank=True, default="", editable=False, verbose_name=_("process")
    )
    # A reply that called the client's own tools (AG-UI): when a run took the client's results
    # for those calls (``take_client_results``); no second run takes them.
    answered_at = models.DateTimeField(
        null=True, blank=True, editable=False, verbose_name=_("answered at")
    )

    class Meta:
        verbose_name = _("message")
        verbose_name_plural = _("messages")
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
