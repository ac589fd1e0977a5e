"""Validation tasks, their runs and the findings each run records."""

from __future__ import annotations

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from .jobs import Job


class ValidationTask(models.Model):
    """A persistent validation policy: what to check, with which rules, how often."""

    class Schedule(models.TextChoices):
        NONE = "none", _("None")
        INTERVAL = "interval", _("Interval")
        CRON = "cron", _("Cron")

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
        QUEUED = "queued", _("Queued")
        RUNNING = "running", _("Running")
        PASSED = "passed", _("Passed")
        FAILED = "failed", _("Failed")
        WARNED = "warned", _("Warned")
        ERRORED = "errored", _("Errored")

    class Trigger(models.TextChoices):
        USER = "user", _("User")
        SCHEDULE = "schedule", _("Schedule")
        ASSISTANT = "assistant", _("Assistant")

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
        PASS = "pass", _("Pass")
        FAIL = "fail", _("Fail")
        WARN = "warn", _("Warn")

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
