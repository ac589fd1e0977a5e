"""Validation tasks (guarded per object) and their runs with findings."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Case, QuerySet, When
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_POST
from guardian.admin import GuardedModelAdmin

from ..dispatch.confirmation import record_action
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


# What needs a look comes first: failures, then warnings, then passes.
FAILURES_FIRST = Case(
    When(outcome=Outcome.FAIL, then=0), When(outcome=Outcome.WARN, then=1), default=2
)


def chosen_outcome(request: HttpRequest) -> str:
    """The outcome the run page's findings are filtered to (``?outcome=fail``), or "" for all."""
    outcome = request.GET.get("outcome", "")
    return outcome if outcome in Outcome.values else ""


class FindingInline(admin.TabularInline):  # type: ignore[type-arg]
    model = ValidationFinding
    fields = ["rule", "target_repr", "coloured_outcome", "message"]
    readonly_fields = list(fields)  # type: ignore[arg-type]
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_queryset(self, request: HttpRequest) -> QuerySet[ValidationFinding]:
        findings = super().get_queryset(request).order_by(FAILURES_FIRST, "id")
        outcome = chosen_outcome(request)
        return findings.filter(outcome=outcome) if outcome else findings

    @admin.display(description=_("outcome"))
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
    change_form_template = "admin/assistant/validationrun/change_form.html"

    class Media:
        css = {"all": ["assistant/admin.css"]}

    @admin.display(description=_("status"), ordering="status")
    def coloured_status(self, run: ValidationRun) -> str:
        return badge(run.status)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        context = {**(extra_context or {}), "outcome": chosen_outcome(request)}
        return super().change_view(request, object_id, form_url, context)


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
    change_form_template = "admin/assistant/validationtask/change_form.html"  # type: ignore[misc]

    class Media:
        css = {"all": ["assistant/admin.css"]}

    list_display = ["name", "target", "schedule", "enabled", "last_run_at", "latest_status"]
    list_filter = ["enabled", "schedule"]
    search_fields = ["name"]
    actions = ["run_now"]
    readonly_fields = ["pass_rate_chart", "last_run_at", "next_run_at", "created_at"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[ValidationTask]:
        queryset: QuerySet[ValidationTask] = super().get_queryset(request)  # type: ignore[no-untyped-call]
        return queryset.select_related("target_type")

    # A task sees what its owner may view (everything without one): staff other than
    # superusers make tasks of their own, and leave those made in code as they are.
    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = list(super().get_readonly_fields(request, obj))
        return fields if request.user.is_superuser else [*fields, "owner"]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is not None and obj.owner_id is None and not request.user.is_superuser:
            return False
        return bool(super().has_change_permission(request, obj))

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        if not change and not request.user.is_superuser:
            obj.owner = request.user
        super().save_model(request, obj, form, change)

    @admin.display(description=_("target"))
    def target(self, task: ValidationTask) -> str:
        return task.target_label

    @admin.display(description=_("latest run"))
    def latest_status(self, task: ValidationTask) -> str:
        run = task.runs.order_by("-created_at").first()
        return badge(run.status) if run is not None else "-"

    @admin.display(description=_("pass rate of the recent runs"))
    def pass_rate_chart(self, task: ValidationTask) -> str:
        finished = task.runs.exclude(status__in=[Status.QUEUED, Status.RUNNING])
        runs = list(finished.order_by("-created_at")[:20])
        if not runs:
            return gettext("No finished runs yet.")
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
            '<svg width="{}" height="64" role="img" aria-label="{}">{}</svg>',
            len(bars) * 14,
            _("pass rate per run"),
            rects,
        )

    @admin.action(description=_("Run now"), permissions=["run"])
    def run_now(self, request: HttpRequest, queryset: QuerySet[ValidationTask]) -> None:
        for task in queryset:
            self._run(request, task)
        count = queryset.count()
        self.message_user(
            request,
            ngettext("Started %(count)s run.", "Started %(count)s runs.", count) % {"count": count},
            messages.SUCCESS,
        )

    def has_run_permission(self, request: HttpRequest, obj: ValidationTask | None = None) -> bool:
        """Global, or (guardian) for this one task: its owner may run it."""
        perm = "assistant.run_validationtask"
        return bool(request.user.has_perm(perm) or (obj and request.user.has_perm(perm, obj)))

    def _run(self, request: HttpRequest, task: ValidationTask) -> ValidationRun:
        """Enqueue a run as the API and the scheduler do, audited as the admin's action."""
        run = ValidationTaskService.trigger_run(task, ValidationRun.Trigger.USER, user=request.user)
        record_action(
            request, "validation_run", {"task": task.pk, "run": run.pk}, domain="validation"
        )
        return run

    def get_urls(self) -> list[Any]:
        run = self.admin_site.admin_view(require_POST(self.run_view))  # CSRF-checked
        return [
            path("<path:object_id>/run/", run, name="assistant_validationtask_run"),
            *super().get_urls(),  # type: ignore[no-untyped-call]
        ]

    def run_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The task page's Run now button: one run of this task, then back to its page."""
        task = self.get_object(request, object_id)
        if task is None:
            raise Http404(gettext("No such validation task."))
        if not (self.has_view_permission(request, task) and self.has_run_permission(request, task)):
            raise PermissionDenied
        run = self._run(request, task)
        url = reverse("admin:assistant_validationrun_change", args=[run.pk])
        started = format_html(
            gettext('Started <a href="{}">run {}</a> of “{}”.'), url, run.pk, task.name
        )
        self.message_user(request, started, messages.SUCCESS)
        return HttpResponseRedirect(
            reverse("admin:assistant_validationtask_change", args=[task.pk])
        )

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        task = self.get_object(request, object_id)
        context = {
            **(extra_context or {}),
            "can_run": bool(task and self.has_run_permission(request, task)),
        }
        return super().change_view(request, object_id, form_url, context)
