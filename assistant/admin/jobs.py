"""Background jobs: progress, heartbeats and a Cancel action."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from ..dispatch.confirmation import record_action
from ..jobs import announce_completion
from ..models import Job
from .base import ReadOnlyAdmin, badge


@admin.register(Job)
class JobAdmin(ReadOnlyAdmin):
    list_display = [
        "created_at",
        "operation",
        "user",
        "coloured_status",
        "progress_bar",
        "duration",
        "short_error",
    ]
    list_filter = [("status", admin.ChoicesFieldListFilter), "operation"]
    search_fields = ["=id", "=operation", "=user__username"]
    list_select_related = ["user"]
    actions = ["cancel_jobs"]
    show_full_result_count = False
    fields = [
        "id",
        "operation",
        "function",
        "user",
        "conversation",
        "coloured_status",
        "progress_bar",
        "progress_message",
        "result",
        "error",
        "cancel_requested",
        "worker",
        "created_at",
        "started_at",
        "finished_at",
        "heartbeat_at",
    ]
    readonly_fields = list(fields)  # type: ignore[arg-type]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # The Cancel action needs it on the list; a job's own page is never editable (a worker
        # may be writing the row).
        return obj is None and bool(request.user.has_perm("assistant.change_job"))

    @admin.display(description=_("status"), ordering="status")
    def coloured_status(self, job: Job) -> str:
        return badge(job.status)

    @admin.display(description=_("progress"))
    def progress_bar(self, job: Job) -> str:
        return format_html(
            '<progress max="100" value="{}"></progress> {}%', job.progress, job.progress
        )

    @admin.display(description=_("duration"))
    def duration(self, job: Job) -> str:
        if job.started_at is None:
            return "-"

        seconds = ((job.finished_at or timezone.now()) - job.started_at).total_seconds()
        return f"{seconds:.1f} s"

    @admin.display(description=_("error"))
    def short_error(self, job: Job) -> str:
        return job.error.splitlines()[0][:80] if job.error else ""

    @admin.action(description=_("Cancel the selected jobs"), permissions=["change"])
    def cancel_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        asked = 0
        for job in queryset.filter(status__in=[Job.Status.QUEUED, Job.Status.RUNNING]):
            if job.request_cancel():
                asked += 1
                record_action(request, "cancel_job", {"job": str(job.pk)}, domain="jobs")
            if job.status == Job.Status.CANCELLED:
                announce_completion(job)  # it never started: no worker will say so
        self.message_user(
            request,
            ngettext("Asked %(count)s job to stop.", "Asked %(count)s jobs to stop.", asked)
            % {"count": asked},
            messages.SUCCESS,
        )
