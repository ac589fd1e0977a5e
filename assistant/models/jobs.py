"""Jobs: long work a tool handed to a worker, with progress, heartbeat and cancellation."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, ClassVar

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from ..core.storable import storable, storable_text
from .conversations import Conversation, Message


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
        QUEUED = "queued", _("Queued")
        RUNNING = "running", _("Running")
        SUCCEEDED = "succeeded", _("Succeeded")
        FAILED = "failed", _("Failed")
        CANCELLED = "cancelled", _("Cancelled")

    FINISHED = (Status.SUCCEEDED, Status.FAILED, Status.CANCELLED)

    id = models.UUIDField(
        primary_key=True, default=uuid.uuid4, editable=False, verbose_name=_("ID")
    )
    operation = models.CharField(max_length=64, blank=True, verbose_name=_("operation"))
    function = models.CharField(max_length=300, verbose_name=_("function"))
    args = models.JSONField(
        default=list, blank=True, encoder=DjangoJSONEncoder, verbose_name=_("arguments")
    )
    kwargs = models.JSONField(
        default=dict, blank=True, encoder=DjangoJSONEncoder, verbose_name=_("keyword arguments")
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="assistant_jobs",
        verbose_name=_("user"),
    )
    conversation = models.ForeignKey(
        Conversation,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="jobs",
        verbose_name=_("conversation"),
    )
    status = models.CharField(
        max_length=16, choices=Status.choices, default=Status.QUEUED, verbose_name=_("status")
    )
    progress = models.PositiveSmallIntegerField(default=0, verbose_name=_("progress"))
    progress_message = models.CharField(
        max_length=300, blank=True, verbose_name=_("progress message")
    )
    result = models.TextField(blank=True, verbose_name=_("result"))
    result_data = models.JSONField(
        null=True, blank=True, encoder=DjangoJSONEncoder, verbose_name=_("result data")
    )
    error = models.TextField(blank=True, verbose_name=_("error"))
    cancel_requested = models.BooleanField(default=False, verbose_name=_("cancel requested"))
    worker = models.CharField(max_length=200, blank=True, verbose_name=_("worker"))
    task_result_id = models.CharField(max_length=64, blank=True, verbose_name=_("task result ID"))
    completion_message = models.ForeignKey(
        Message,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=_("completion message"),
    )
    created_at = models.DateTimeField(
        default=timezone.now, editable=False, verbose_name=_("created at")
    )
    started_at = models.DateTimeField(null=True, blank=True, verbose_name=_("started at"))
    finished_at = models.DateTimeField(null=True, blank=True, verbose_name=_("finished at"))
    heartbeat_at = models.DateTimeField(null=True, blank=True, verbose_name=_("heartbeat at"))
    updated_at = models.DateTimeField(
        default=timezone.now, db_index=True, verbose_name=_("updated at")
    )

    objects: ClassVar[JobQuerySet] = JobQuerySet.as_manager()  # type: ignore[assignment]

    class Meta:
        verbose_name = _("job")
        verbose_name_plural = _("jobs")
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
