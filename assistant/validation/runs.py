"""Validation runs: a task created and run as a job, findings counted, due ones started once."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.contrib.contenttypes.models import ContentType
from django.db import IntegrityError, models, transaction
from django.utils import timezone
from django.utils.translation import gettext

from ..core.registry import ToolResult
from ..exceptions import AssistantError, InvalidEntities
from ..jobs import JobContext, JobManager
from ..models import ValidationFinding, ValidationRun, ValidationTask
from .registry import Outcome, ValidationRule, Verdict, normalise_rules, rules
from .schedules import next_run, parse_schedule
from .targets import _unstorable, check_target_filter, parse_target, viewable

logger = logging.getLogger("assistant.validation")


class ValidationTaskService:
    """Create validation policies and trigger their runs (each run is a job)."""

    @staticmethod
    def create_task(
        *,
        name: str,
        target: Any,
        owner: Any = None,
        rules: Iterable[Any] | None = None,
        target_filter: dict[str, Any] | None = None,
        schedule: Any = None,
        enabled: bool = True,
    ) -> ValidationTask:
        model, pk = parse_target(target)
        label = model._meta.label
        chosen = normalise_rules(rules, model)
        if pk and not viewable(model, owner).filter(pk=pk).exists():
            raise InvalidEntities({"target": f"no {label} with id {pk} that you may view"})
        if target_filter is not None:
            check_target_filter(model, target_filter)
        fields = parse_schedule(schedule)
        if not isinstance(name, str) or len(name) > 200 or _unstorable(name):
            raise InvalidEntities({"name": "expected a text of at most 200 characters"})
        with transaction.atomic():
            task = ValidationTask.objects.create(
                name=name or f"Validate {label}{':' + pk if pk else ''}",
                owner=owner if getattr(owner, "is_authenticated", False) else None,
                target_type=ContentType.objects.get_for_model(model),
                target_id=pk,
                target_filter=target_filter or {},
                rules=chosen,
                enabled=enabled,
                **fields,
            )
            if task.schedule != ValidationTask.Schedule.NONE:
                task.next_run_at = next_run(task, timezone.now())
                task.save(update_fields=["next_run_at"])
            if task.owner is not None:
                from guardian.shortcuts import assign_perm

                for perm in ("view", "change", "delete", "run"):
                    assign_perm(f"assistant.{perm}_validationtask", task.owner, task)
        return task

    @staticmethod
    def trigger_run(
        task: ValidationTask,
        triggered_by: str = ValidationRun.Trigger.USER,
        *,
        user: Any = None,
        conversation: Any = None,
        scheduled_for: datetime | None = None,
    ) -> ValidationRun:
        """Create the run and enqueue it; raises ``IntegrityError`` for a slot already run."""
        with transaction.atomic():
            run = ValidationRun.objects.create(
                task=task,
                triggered_by=triggered_by,
                triggered_by_user=user if getattr(user, "is_authenticated", False) else None,
                scheduled_for=scheduled_for,
            )
            job = JobManager(user=user, conversation=conversation).enqueue(execute_run, run.pk)
            job.operation = "validation_run"
            job.save(update_fields=["operation"])
            ValidationRun.objects.filter(pk=run.pk).update(job=job)
            ValidationTask.objects.filter(pk=task.pk).update(last_run_at=timezone.now())
        run.job = job
        return run


def _targets(task: ValidationTask) -> list[models.Model]:
    model = task.target_type.model_class()
    assert model is not None
    # A task stored before the filter policy existed is held to it too, before any query.
    target_filter = check_target_filter(model, task.target_filter or {})
    # A task sees what its owner may view now, not what they could when it was made.
    objects = viewable(model, task.owner)
    if task.target_id:
        objects = objects.filter(pk=task.target_id)
    elif target_filter:
        objects = objects.filter(**target_filter)
    return list(objects.order_by("pk")[:10_000])


def execute_run(job: JobContext, run_id: int) -> ToolResult:
    """The job behind a run: every rule over every target, findings stored, counts computed.

    Its result data counts the failed findings as the job's ``failures``: a run that found some
    ran to its end, but the chat does not show it as a plain success.
    """
    run = ValidationRun.objects.select_related("task", "task__target_type").get(pk=run_id)
    ValidationRun.objects.filter(pk=run.pk).update(
        status=ValidationRun.Status.RUNNING, started_at=timezone.now()
    )
    task = run.task
    try:
        targets = _targets(task)
        steps = max(1, len(task.rules) * max(1, len(targets)))
        done = 0
        findings: list[ValidationFinding] = []
        if not targets and any(rules.get(entry["name"]).needs_target for entry in task.rules):
            findings.append(
                _finding(
                    run,
                    "targets",
                    None,
                    Verdict(
                        outcome=Outcome.WARN,
                        message=gettext("nothing to validate: no records match"),
                    ),
                )
            )
        for entry in task.rules:
            rule = rules.get(entry["name"])
            subjects: list[Any] = targets if rule.needs_target else [None]
            for target in subjects:
                for verdict in _verdicts(rule, target, entry.get("options") or {}, run):
                    findings.append(_finding(run, rule.name, target, verdict))
                done += 1
                job.report(100 * done / steps, f"{rule.name}: {done} of {steps}")
        status, counts = settle_run(run, findings)
        return ToolResult(
            text=(
                f"{task.name}: {status} — {counts[Outcome.PASS]} passed, "
                f"{counts[Outcome.FAIL]} failed, {counts[Outcome.WARN]} warned."
            ),
            data={
                "run": run.pk,
                "status": status,
                "passed": counts[Outcome.PASS],
                "failures": counts[Outcome.FAIL],
                "warnings": counts[Outcome.WARN],
            },
        )
    except Exception as exc:
        ValidationRun.objects.filter(pk=run.pk).update(
            status=ValidationRun.Status.ERRORED,
            error=f"{type(exc).__name__}: {exc}",
            finished_at=timezone.now(),
        )
        raise


def settle_run(run: ValidationRun, findings: list[ValidationFinding]) -> tuple[str, dict[str, int]]:
    """Store a run's findings and close it with their counts: its status and the counts."""
    ValidationFinding.objects.bulk_create(findings)
    counts: dict[str, int] = {
        outcome: sum(f.outcome == outcome for f in findings) for outcome in Outcome
    }
    status: str = (
        ValidationRun.Status.FAILED
        if counts[Outcome.FAIL]
        else ValidationRun.Status.WARNED
        if counts[Outcome.WARN]
        else ValidationRun.Status.PASSED
    )
    ValidationRun.objects.filter(pk=run.pk).update(
        status=status,
        passed=counts[Outcome.PASS],
        failed=counts[Outcome.FAIL],
        warned=counts[Outcome.WARN],
        finished_at=timezone.now(),
    )
    return status, counts


def record_run(task: ValidationTask, rule: str, verdicts: list[Verdict]) -> ValidationRun:
    """A run of ``task`` whose verdicts were found outside a job (a command's), stored closed."""
    run = ValidationRun.objects.create(
        task=task, status=ValidationRun.Status.RUNNING, started_at=timezone.now()
    )
    settle_run(run, [_finding(run, rule, None, verdict) for verdict in verdicts])
    ValidationTask.objects.filter(pk=task.pk).update(last_run_at=timezone.now())
    run.refresh_from_db()
    return run


def _verdicts(
    rule: ValidationRule, target: Any, options: dict[str, Any], run: Any
) -> list[Verdict]:
    try:
        result = rule.check(target, options, run)
    except Exception as exc:
        logger.exception("Validation rule %s failed on %r", rule.name, target)
        could_not_run = gettext("the rule could not run: %(error)s") % {"error": exc}
        return [Verdict(outcome=Outcome.WARN, message=could_not_run)]
    return [result] if isinstance(result, Verdict) else list(result)


def _finding(run: ValidationRun, rule: str, target: Any, verdict: Verdict) -> ValidationFinding:
    if verdict.outcome not in Outcome.values:
        raise AssistantError(f"rule {rule} returned outcome {verdict.outcome!r}")
    return ValidationFinding(
        run=run,
        rule=rule,
        target_type=ContentType.objects.get_for_model(target) if target is not None else None,
        target_id=str(target.pk) if target is not None else "",
        target_repr=str(target)[:300] if target is not None else "",
        outcome=verdict.outcome,
        message=verdict.message,
        details=verdict.details,
    )


def run_due_validations(now: datetime | None = None) -> list[ValidationRun]:
    """Trigger every enabled scheduled task that is due, once per slot however many call this."""
    now = now or timezone.now()
    started = []
    for task in ValidationTask.objects.filter(enabled=True, next_run_at__lte=now).exclude(
        schedule=ValidationTask.Schedule.NONE
    ):
        slot = task.next_run_at
        assert slot is not None
        following = next_run(task, max(slot, now))
        # Whoever moves next_run_at on from this slot owns the slot.
        if not ValidationTask.objects.filter(pk=task.pk, next_run_at=slot).update(
            next_run_at=following
        ):
            continue
        try:
            started.append(
                ValidationTaskService.trigger_run(
                    task, ValidationRun.Trigger.SCHEDULE, scheduled_for=slot
                )
            )
        except IntegrityError:
            continue
    return started
