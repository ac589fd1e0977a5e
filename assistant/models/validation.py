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

    name = models.CharField(max_length=200, verbose_name=_("name"))
    # A task sees what its owner may view; without one (made in code) it sees everything, so an
    # owner's tasks go with them rather than outlive them seeing more.
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="assistant_validation_tasks",
        verbose_name=_("owner"),
    )
    target_type = models.ForeignKey(
        "contenttypes.ContentType", on_delete=models.CASCADE, verbose_name=_("target type")
    )
    target_id = models.CharField(
        max_length=64, blank=True, verbose_name=_("target ID")
    )  # empty: every instance (filtered)
    target_filter = models.JSONField(default=dict, blank=True, verbose_name=_("target filter"))
    # [{"name": "<rule>", "options": {...}}]
    rules = models.JSONField(default=list, verbose_name=_("rules"))
    schedule = models.CharField(
        max_length=16, choices=Schedule.choices, default=Schedule.NONE, verbose_name=_("schedule")
    )
    interval_seconds = models.PositiveIntegerField(
        null=True, blank=True, verbose_name=_("interval seconds")
    )
    cron = models.CharField(max_length=100, blank=True, verbose_name=_("cron expression"))
    enabled = models.BooleanField(default=True, verbose_name=_("enabled"))
    next_run_at = models.DateTimeField(
        null=True, blank=True, db_index=True, verbose_name=_("next run at")
    )
    last_run_at = models.DateTimeField(null=True, blank=True, verbose_name=_("last run at"))
    created_at = models.DateTimeField(
        default=timezone.now, editable=False, verbose_name=_("created at")
    )

    class Meta:
        verbose_name = _("validation task")
        verbose_name_plural = _("validation tasks")
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

    task = models.ForeignKey(
        ValidationTask, on_delete=models.CASCADE, related_name="runs", verbose_name=_("task")
    )
    status = models.CharField(
        max_length=16, choices=Status.choices, default=Status.QUEUED, verbose_name=_("status")
    )
    passed = models.PositiveIntegerField(default=0, verbose_name=_("passed"))
    failed = models.PositiveIntegerField(default=0, verbose_name=_("failed"))
    warned = models.PositiveIntegerField(default=0, verbose_name=_("warned"))
    triggered_by = models.CharField(
        max_length=16, choices=Trigger.choices, default=Trigger.USER, verbose_name=_("triggered by")
    )
    triggered_by_user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=_("triggered by user"),
    )
    scheduled_for = models.DateTimeField(null=True, blank=True, verbose_name=_("scheduled for"))
    job = models.ForeignKey(
        Job,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=_("job"),
    )
    error = models.TextField(blank=True, verbose_name=_("error"))
    created_at = models.DateTimeField(
        default=timezone.now, editable=False, verbose_name=_("created at")
    )
    started_at = models.DateTimeField(null=True, blank=True, verbose_name=_("started at"))
    finished_at = models.DateTimeField(null=True, blank=True, verbose_name=_("finished at"))

    class Meta:
        verbose_name = _("validation run")
        verbose_name_plural = _("validation runs")
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

    run = models.ForeignKey(
        ValidationRun, on_delete=models.CASCADE, related_name="findings", verbose_name=_("run")
    )
    rule = models.CharField(max_length=100, verbose_name=_("rule"))
    target_type = models.ForeignKey(
        "contenttypes.ContentType",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        verbose_name=_("target type"),
    )
    target_id = models.CharField(max_length=64, blank=True, verbose_name=_("target ID"))
    target_repr = models.CharField(max_length=300, blank=True, verbose_name=_("target repr"))
    outcome = models.CharField(max_length=8, choices=Outcome.choices, verbose_name=_("outcome"))
    message = models.TextField(blank=True, verbose_name=_("message"))
    details = models.JSONField(
        default=dict, blank=True, encoder=DjangoJSONEncoder, verbose_name=_("details")
    )

    class Meta:
        verbose_name = _("validation finding")
        verbose_name_plural = _("validation findings")
        ordering = ["run", "id"]

    def __str__(self) -> str:
        return f"{self.rule}: {self.outcome}"
