"""Validation tasks (guarded per object) and their runs with findings."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join
from guardian.admin import GuardedModelAdmin

from ..confirmation import record_action
from ..exceptions import InvalidEntities
from ..models import ValidationFinding, ValidationRun, ValidationTask
from ..validation import ValidationTaskService, check_target_filter, normalise_rules, parse_schedule
from .base import ReadOnlyAdmin, badge

Outcome, Status = ValidationFinding.Outcome, ValidationRun.Status
RUN_STATUS_OF: dict[str, str] = {
    Outcome.PASS: Status.PASSED,
    Outcome.FAIL: Status.FAILED,
    Outcome.WARN: Status.WARNED,
}


class FindingInline(admin.TabularInline):  # type: ignore[type-arg]
    model = ValidationFinding
    fields = ["rule", "target_repr", "coloured_outcome", "message"]
    readonly_fields = list(fields)  # type: ignore[arg-type]
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="outcome")
    def coloured_outcome(self, finding: ValidationFinding) -> str:
        return badge(RUN_STATUS_OF[finding.outcome])


@admin.register(ValidationRun)
class ValidationRunAdmin(ReadOnlyAdmin):
    list_display = [
        "created_at",
        "task",
        "coloured_status",
        "passed",
        "failed",
        "warned",
        "triggered_by",
    ]
    list_filter = [("status", admin.ChoicesFieldListFilter), "triggered_by"]
    list_select_related = ["task"]
    inlines = [FindingInline]
    fields = [
        "task",
        "coloured_status",
        "passed",
        "failed",
        "warned",
        "triggered_by",
        "triggered_by_user",
        "job",
        "error",
        "created_at",
        "started_at",
        "finished_at",
    ]
    readonly_fields = list(fields)  # type: ignore[arg-type]

    @admin.display(description="status", ordering="status")
    def coloured_status(self, run: ValidationRun) -> str:
        return badge(run.status)


class ValidationTaskForm(forms.ModelForm):  # type: ignore[type-arg]
    """The same rules for target_filter, rules and schedule as the service and the API."""

    class Meta:
        model = ValidationTask
        fields = [
            "name",
            "owner",
            "target_type",
            "target_id",
            "target_filter",
            "rules",
            "schedule",
            "interval_seconds",
            "cron",
            "enabled",
        ]

    def clean(self) -> dict[str, Any]:
        data: dict[str, Any] = super().clean() or {}
        target_type = data.get("target_type")
        model = target_type.model_class() if target_type is not None else None
        checks: list[tuple[str, Any]] = [("schedule", lambda: self._schedule(parse_schedule))]
        if model is not None:
            checks += [
                ("target_filter", lambda: check_target_filter(model, data["target_filter"])),
                ("rules", lambda: normalise_rules(data["rules"], model)),
            ]
        for name, check in checks:
            if name not in data:
                continue  # the field itself was already refused
            try:
                checked = check()
            except InvalidEntities as exc:
                self.add_error(name, "; ".join(exc.errors.values()))
            else:
                if name == "rules":
                    data["rules"] = checked  # stored as the service stores them
        return data

    def _schedule(self, parse: Any) -> None:
        kind = self.cleaned_data.get("schedule")
        if kind == ValidationTask.Schedule.INTERVAL:
            parse(self.cleaned_data.get("interval_seconds") or 0)
        elif kind == ValidationTask.Schedule.CRON:
            parse(self.cleaned_data.get("cron") or "-")


@admin.register(ValidationTask)
class ValidationTaskAdmin(GuardedModelAdmin):
    form = ValidationTaskForm
    list_display = ["name", "target", "schedule", "enabled", "last_run_at", "latest_status"]
    list_filter = ["enabled", "schedule"]
    search_fields = ["name"]
    actions = ["run_now"]
    readonly_fields = ["pass_rate_chart", "last_run_at", "next_run_at", "created_at"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[ValidationTask]:
        queryset: QuerySet[ValidationTask] = super().get_queryset(request)  # type: ignore[no-untyped-call]
        return queryset.select_related("target_type")

    @admin.display(description="target")
    def target(self, task: ValidationTask) -> str:
        return task.target_label

    @admin.display(description="latest run")
    def latest_status(self, task: ValidationTask) -> str:
        run = task.runs.order_by("-created_at").first()
        return badge(run.status) if run is not None else "-"

    @admin.display(description="pass rate of the recent runs")
    def pass_rate_chart(self, task: ValidationTask) -> str:
        finished = task.runs.exclude(status__in=[Status.QUEUED, Status.RUNNING])
        runs = list(finished.order_by("-created_at")[:20])
        if not runs:
            return "No finished runs yet."
        bars = []
        for index, run in enumerate(reversed(runs)):
            total = run.passed + run.failed + run.warned
            rate = run.passed / total if total else 0.0
            height = max(2, int(60 * rate))
            colour = "#127a3c" if rate == 1 else "#9a6700" if rate >= 0.5 else "#b42318"
            bars.append((index * 14, 62 - height, height, colour, f"run {run.pk}: {rate:.0%}"))
        rects = format_html_join(
            "",
            '<rect x="{}" y="{}" width="10" height="{}" fill="{}"><title>{}</title></rect>',
            bars,
        )
        return format_html(
            '<svg width="{}" height="64" role="img" aria-label="pass rate per run">{}</svg>',
            len(bars) * 14,
            rects,
        )

    @admin.action(description="Run now", permissions=["run"])
    def run_now(self, request: HttpRequest, queryset: QuerySet[ValidationTask]) -> None:
        for task in queryset:
            run = ValidationTaskService.trigger_run(
                task, ValidationRun.Trigger.USER, user=request.user
            )
            record_action(
                request, "validation_run", {"task": task.pk, "run": run.pk}, domain="validation"
            )
        self.message_user(request, f"Started {queryset.count()} run(s).", messages.SUCCESS)

    def has_run_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm("assistant.run_validationtask"))
