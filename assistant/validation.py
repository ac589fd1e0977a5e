"""Persistent validation policies and their tracked runs (ADR-0008 step 8, v2).

A ``ValidationTask`` names a target (one instance, or a model and a filter), the rules to run
and a schedule; ``ValidationTaskService.trigger_run`` runs it as a job, and every run stores its
findings with pass/fail/warn counts. Rules are declared once with ``@validation_rule``.
"""

from __future__ import annotations

import json
import logging
import math
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from string import Formatter
from typing import Any

from django.apps import apps
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import FieldError
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError, models, transaction
from django.utils import timezone

from .conf import assistant_settings
from .core.llm_client import llm_configured, make_client
from .core.registry import ToolResult, registry
from .dispatch.catalog import visible_tools
from .exceptions import AssistantError, InvalidEntities, InvalidTargetFilter, ToolDefinitionError
from .jobs import JobContext, JobManager
from .models import ValidationFinding, ValidationRun, ValidationTask

logger = logging.getLogger("assistant.validation")
Outcome = ValidationFinding.Outcome
TargetModel = type[models.Model]


@dataclass(frozen=True, kw_only=True, slots=True)
class Verdict:
    """What a rule says about one target."""

    outcome: str  # pass | fail | warn
    message: str = ""
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True, slots=True)
class ValidationRule:
    name: str
    description: str
    check: Callable[..., Verdict | Iterable[Verdict]]
    models: tuple[str, ...]  # model labels it applies to; empty: any
    needs_target: bool
    # (target model, options) -> what is wrong with the options, "" when nothing is
    check_options: Callable[[TargetModel, dict[str, Any]], str] | None = None


class RuleRegistry:
    """Validation rules by name, in the same style as the tool registry."""

    def __init__(self) -> None:
        self._rules: dict[str, ValidationRule] = {}

    def register(self, rule: ValidationRule) -> None:
        if rule.name in self._rules:
            raise ToolDefinitionError(f"validation rule {rule.name!r} is already registered")
        self._rules[rule.name] = rule

    def unregister(self, name: str) -> None:
        self._rules.pop(name, None)

    def get(self, name: str) -> ValidationRule:
        try:
            return self._rules[name]
        except KeyError:
            raise InvalidEntities({"rules": f"unknown rule {name!r}"}) from None

    def __contains__(self, name: object) -> bool:
        return name in self._rules

    def __iter__(self) -> Any:
        return iter(list(self._rules.values()))

    def for_model(self, label: str) -> list[ValidationRule]:
        return [
            rule
            for rule in self._rules.values()
            if rule.needs_target and (not rule.models or label.lower() in rule.models)
        ]


rules = RuleRegistry()


def validation_rule(
    *,
    name: str,
    description: str = "",
    models: Iterable[str] = (),
    needs_target: bool = True,
    check_options: Callable[[TargetModel, dict[str, Any]], str] | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declare ``check(target, options, run) -> Verdict | [Verdict]`` as a validation rule."""

    def decorator(check: Callable[..., Any]) -> Callable[..., Any]:
        rules.register(
            ValidationRule(
                name=name,
                description=description or (check.__doc__ or "").strip().split("\n")[0],
                check=check,
                models=tuple(label.lower() for label in models),
                needs_target=needs_target,
                check_options=check_options,
            )
        )
        return check

    return decorator


# -- targets ------------------------------------------------------------------------------------


def parse_target(target: Any) -> tuple[type[models.Model], str]:
    """``"app_label.Model"``, ``"app_label.Model:<pk>"``, a model class or an instance."""
    if isinstance(target, models.Model):
        return type(target), str(target.pk)
    if isinstance(target, type) and issubclass(target, models.Model):
        return target, ""
    if isinstance(target, str):
        label, _, pk = target.partition(":")
        resources = assistant_settings.RESOURCES
        if isinstance(resources, dict) and isinstance(resources.get(label), str):
            label = resources[label]  # a resource name, as in permission_checks
        try:
            model = apps.get_model(label)
        except (LookupError, ValueError):
            raise InvalidEntities({"target": f"{label!r} is not an installed model"}) from None
        if pk:
            try:
                value = model._meta.pk.to_python(pk)
                if isinstance(value, int) and not (pk.isascii() and pk.isdigit()):
                    raise ValueError("an integer id is written in the digits 0-9")
            except (ValueError, TypeError, DjangoValidationError):
                raise InvalidEntities({"target": f"{pk!r} is not an id of {label}"}) from None
            pk = str(value)
        return model, pk
    raise InvalidEntities({"target": "expected 'app_label.Model' or 'app_label.Model:<pk>'"})


# -- what a target filter may name --------------------------------------------------------------

# Lookups a target filter may use; no transforms, no regex, nothing that walks a relation.
FILTER_LOOKUPS = frozenset(
    {
        "exact",
        "iexact",
        "in",
        "contains",
        "icontains",
        "startswith",
        "istartswith",
        "endswith",
        "iendswith",
        "gt",
        "gte",
        "lt",
        "lte",
        "range",
        "isnull",
    }
)
MAX_FILTER_KEYS = 20
MAX_FILTER_VALUES = 1000
MAX_FILTER_TEXT = 1000
_INT64 = 2**63


def filterable_fields(model: type[models.Model]) -> dict[str, models.Field[Any, Any]]:
    """The names a target filter on ``model`` may use: ``pk`` and the allowed own fields."""
    opts = model._meta
    configured = assistant_settings.VALIDATION_FILTER_FIELDS
    listed = {
        str(label).lower(): names
        for label, names in (configured if isinstance(configured, dict) else {}).items()
    }.get(opts.label_lower)
    if listed is None:
        fields = {f.name: f for f in opts.concrete_fields if not f.is_relation}
        if issubclass(model, AbstractBaseUser):
            fields.pop("password", None)  # a hash prefix is still a secret
    else:
        own = {f.name: f for f in opts.concrete_fields} | {
            f.attname: f for f in opts.concrete_fields
        }
        fields = {name: own[name] for name in listed if name in own}
    return {"pk": opts.pk, **fields}


def check_target_filter(model: type[models.Model], target_filter: Any) -> dict[str, Any]:
    """The filter if every key is ``field`` or ``field__lookup`` the policy allows, else refused."""
    if not isinstance(target_filter, dict):
        raise InvalidTargetFilter("", "expected an object of field lookups")
    if len(target_filter) > MAX_FILTER_KEYS:
        raise InvalidTargetFilter("", f"at most {MAX_FILTER_KEYS} lookups")
    allowed = filterable_fields(model)
    for key, value in target_filter.items():
        field_name, _, lookup = str(key).partition("__")
        if not isinstance(key, str) or _unstorable(key) or field_name not in allowed:
            raise InvalidTargetFilter(
                str(key),
                f"{model.__name__} may be filtered only by its own fields "
                f"{', '.join(sorted(allowed))}",
            )
        if (lookup or "exact") not in FILTER_LOOKUPS:
            raise InvalidTargetFilter(
                key, f"use one of the lookups {', '.join(sorted(FILTER_LOOKUPS))}"
            )
        _check_filter_value(key, lookup or "exact", value)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", RuntimeWarning)  # a naive date-time, say
                model._default_manager.filter(**{key: value})  # builds the lookup, runs no query
        except RuntimeWarning as exc:
            raise InvalidTargetFilter(key, str(exc)) from None
        except DjangoValidationError as exc:
            raise InvalidTargetFilter(key, "; ".join(exc.messages)) from None
        except (FieldError, ValueError, TypeError) as exc:
            raise InvalidTargetFilter(key, str(exc).splitlines()[0]) from None
    return target_filter


def _check_filter_value(key: str, lookup: str, value: Any) -> None:
    if lookup == "isnull":
        if not isinstance(value, bool):
            raise InvalidTargetFilter(key, "expected true or false")
        return
    items = [value]
    if lookup in ("in", "range"):
        if not isinstance(value, list) or len(value) > MAX_FILTER_VALUES:
            raise InvalidTargetFilter(key, f"expected a list of at most {MAX_FILTER_VALUES} values")
        if lookup == "range" and len(value) != 2:
            raise InvalidTargetFilter(key, "expected a list of two values, [low, high]")
        items = value
    for item in items:
        problem = _scalar_problem(item)
        if problem:
            raise InvalidTargetFilter(key, problem)


def _scalar_problem(value: Any) -> str:
    if value is None or isinstance(value, bool):
        return ""
    if isinstance(value, int):
        return "" if -_INT64 <= value < _INT64 else "the number is out of range"
    if isinstance(value, float):
        return "" if math.isfinite(value) else "the number is not finite"
    if isinstance(value, str):
        if len(value) > MAX_FILTER_TEXT:
            return f"at most {MAX_FILTER_TEXT} characters"
        return "the text holds a NUL or an unpaired surrogate" if _unstorable(value) else ""
    return "expected a string, a number, true, false or null"


def _unstorable(text: str) -> bool:
    """True for text a JSON column may refuse: a NUL or a lone UTF-16 surrogate."""
    return "\x00" in text or any("\ud800" <= char <= "\udfff" for char in text)


def _json_problem(value: Any, depth: int = 0) -> str:
    """Why ``value`` cannot be stored in a JSON column, or ``""``."""
    if depth > 20:
        return "nested too deeply"
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str) or _unstorable(key):
                return f"the key {key!r} is not storable text"
            problem = _json_problem(item, depth + 1)
            if problem:
                return problem
        return ""
    if isinstance(value, list):
        return next((p for p in (_json_problem(i, depth + 1) for i in value) if p), "")
    if isinstance(value, str) and _unstorable(value):
        return "a text holds a NUL or an unpaired surrogate"
    if isinstance(value, float) and not math.isfinite(value):
        return "a number is not finite"
    if isinstance(value, int) and not isinstance(value, bool) and not -_INT64 <= value < _INT64:
        return "a number is out of range"
    return "" if value is None or isinstance(value, (str, int, float, bool)) else "not JSON"


MAX_RULES = 50


def normalise_rules(names: Any, model: type[models.Model]) -> list[dict[str, Any]]:
    """``[{"name", "options"}]`` from rule names or objects; by default every rule for ``model``."""
    label = model._meta.label
    if names is None:
        chosen = [{"name": rule.name, "options": {}} for rule in rules.for_model(label)]
        if not chosen:
            raise InvalidEntities({"rules": f"no validation rule applies to {label}"})
        return chosen
    if not isinstance(names, (list, tuple)) or len(names) > MAX_RULES:
        raise InvalidEntities({"rules": f"expected a list of at most {MAX_RULES} rules"})
    normalised = []
    for index, item in enumerate(names):
        entry = {"name": item, "options": {}} if isinstance(item, str) else item
        if (
            not isinstance(entry, dict)
            or set(entry) - {"name", "options"}
            or not isinstance(entry.get("name"), str)
            or not isinstance(entry.get("options", {}), dict)
        ):
            raise InvalidEntities(
                {"rules": f'rule {index}: expected a name or {{"name": ..., "options": {{...}}}}'}
            )
        rule = rules.get(entry["name"])
        options = entry.get("options", {})
        problem = _json_problem(options)
        if not problem and rule.check_options is not None:
            problem = rule.check_options(model, options)
        if problem:
            raise InvalidEntities({"rules": f"rule {index}: options: {problem}"})
        normalised.append({"name": entry["name"], "options": options})
    if not normalised:
        raise InvalidEntities({"rules": "name at least one rule"})
    return normalised


MAX_INTERVAL = 366 * 86400  # seconds; longer intervals are a cron expression's job
MAX_CRON = 100  # ValidationTask.cron's max_length


def next_run(task: ValidationTask, after: datetime) -> datetime | None:
    """When the task runs next after ``after``; ``None`` for no schedule or one that never fires."""
    if task.schedule == ValidationTask.Schedule.INTERVAL and task.interval_seconds:
        return after + timedelta(seconds=min(task.interval_seconds, MAX_INTERVAL))
    if task.schedule == ValidationTask.Schedule.CRON and task.cron:
        try:
            return _next_cron(task.cron, after)
        except InvalidEntities:
            logger.warning("Validation task %s has a cron that never fires: %r", task.pk, task.cron)
    return None


def _next_cron(expression: str, after: datetime) -> datetime:
    from croniter import croniter

    try:
        if croniter.is_valid(expression):
            moment: datetime = croniter(expression, after).get_next(datetime)
            return moment
    except (ValueError, KeyError, TypeError, OverflowError):  # croniter's errors are ValueErrors
        pass
    raise InvalidEntities({"schedule": f"{expression!r} is not a cron expression that fires"})


def parse_schedule(schedule: Any) -> dict[str, Any]:
    """None, seconds / a timedelta (interval), or a cron expression."""
    if schedule in (None, "", "none"):
        return {"schedule": ValidationTask.Schedule.NONE}
    if isinstance(schedule, timedelta):
        schedule = int(schedule.total_seconds())
    if isinstance(schedule, int) and not isinstance(schedule, bool) and schedule > 0:
        if schedule > MAX_INTERVAL:
            raise InvalidEntities({"schedule": f"an interval is at most {MAX_INTERVAL} seconds"})
        return {"schedule": ValidationTask.Schedule.INTERVAL, "interval_seconds": schedule}
    if isinstance(schedule, str) and len(schedule) <= MAX_CRON and not _unstorable(schedule):
        _next_cron(schedule, timezone.now())
        return {"schedule": ValidationTask.Schedule.CRON, "cron": schedule}
    raise InvalidEntities(
        {"schedule": "expected seconds, a timedelta or a cron expression such as '0 3 * * *'"}
    )


# -- the service --------------------------------------------------------------------------------


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


def viewable(model: type[models.Model], user: Any) -> Any:
    """The records of ``model`` a task owned by ``user`` may look at (all, without an owner: a
    task made in code; none for a deactivated owner, as Django's ``has_perm`` answers)."""
    if user is None or not getattr(user, "is_authenticated", False):
        return model._default_manager.all()
    if not user.is_active:
        return model._default_manager.none()
    from guardian.shortcuts import get_objects_for_user

    opts = model._meta
    return get_objects_for_user(
        user, f"{opts.app_label}.view_{opts.model_name}", klass=model, accept_global_perms=True
    )


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
                    Verdict(outcome=Outcome.WARN, message="nothing to validate: no records match"),
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
        return [Verdict(outcome=Outcome.WARN, message=f"the rule could not run: {exc}")]
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


# -- built-in rules -----------------------------------------------------------------------------


DEFAULT_PROMPT = (
    "You review records of a Django application. Judge the record below against this "
    "requirement: {requirement}\n\nRecord:\n{text}\n\n"
    'Answer with JSON only: {{"verdict": "PASS" | "FAIL" | "WARN", "reason": "<one sentence>"}}'
)


def llm_review_options(model: type[models.Model], options: dict[str, Any]) -> str:
    """``fields`` names only what a target filter may name; the prompt fills in two plain names."""
    fields = options.get("fields")
    if fields is not None:
        allowed = filterable_fields(model)
        if not isinstance(fields, list) or not all(isinstance(name, str) for name in fields):
            return "fields: expected a list of field names"
        refused = [name for name in fields if name not in allowed]
        if refused:
            return (
                f"fields: {refused[0]!r}: {model.__name__} may be read only by its own fields "
                f"{', '.join(sorted(allowed))}"
            )
    for name in ("prompt", "requirement"):
        if options.get(name) is not None and not isinstance(options[name], str):
            return f"{name}: expected a text"
    try:
        parsed = list(Formatter().parse(options.get("prompt") or ""))
    except ValueError as exc:
        return f"prompt: {exc}"
    for _, field_name, spec, _ in parsed:
        if field_name not in (None, "requirement", "text") or "{" in (spec or ""):
            return "prompt: only the plain placeholders {requirement} and {text} are filled in"
    return ""


@validation_rule(
    name="llm_review",
    description="A language model judges each target's text against a requirement",
    check_options=llm_review_options,
)
def llm_review(target: Any, options: dict[str, Any], run: Any) -> Verdict:
    """PASS/FAIL/WARN with a reason from the configured LLM; never a pass without one."""
    problem = llm_review_options(type(target), options)  # a task stored before these rules
    if problem:
        return Verdict(outcome=Outcome.WARN, message=f"the rule's options are refused: {problem}")
    if not llm_configured():
        return Verdict(outcome=Outcome.WARN, message="no LLM configured")
    import openai

    config = assistant_settings.llm
    fields = options.get("fields")
    if fields:
        text = "\n".join(f"{name}: {getattr(target, name, '')}" for name in fields)
    else:
        text = str(target)
    prompt = (options.get("prompt") or DEFAULT_PROMPT).format(
        requirement=options.get("requirement", "it is complete, consistent and clearly written"),
        text=text,
    )
    client = make_client(config)
    try:
        answer = client.chat.completions.create(
            model=config["MODEL"],
            messages=[{"role": "user", "content": prompt}],
            temperature=0,
        )
        content = answer.choices[0].message.content or ""
        parsed = json.loads(content[content.find("{") : content.rfind("}") + 1])
        verdict = str(parsed.get("verdict", "")).upper()
        reason = str(parsed.get("reason", ""))
    except (openai.APIError, ValueError, AttributeError, IndexError) as exc:
        return Verdict(outcome=Outcome.WARN, message=f"the LLM gave no verdict: {exc}")
    finally:
        client.close()
    outcome = {"PASS": Outcome.PASS, "FAIL": Outcome.FAIL, "WARN": Outcome.WARN}.get(verdict)
    if outcome is None:
        return Verdict(outcome=Outcome.WARN, message=f"the LLM answered {verdict!r}: {reason}")
    return Verdict(outcome=outcome, message=reason, details={"model": config["MODEL"]})


@validation_rule(
    name="tool_access_matrix",
    description="Each role (group) sees exactly its expected tools; dangerous ones always ask first",
    needs_target=False,
)
def tool_access_matrix(target: Any, options: dict[str, Any], run: Any) -> list[Verdict]:
    """``options["roles"] = {"group name": ["operation", ...]}``: compare each role's catalog."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    verdicts = []
    for tool in registry:
        if tool.risk_level == "dangerous" and not tool.requires_confirmation:
            verdicts.append(
                Verdict(outcome=Outcome.FAIL, message=f"{tool.operation} runs without confirmation")
            )
    for role, expected in (options.get("roles") or {}).items():
        group = Group.objects.filter(name=role).first()
        if group is None:
            verdicts.append(Verdict(outcome=Outcome.FAIL, message=f"role {role!r} does not exist"))
            continue
        with transaction.atomic():
            # A throwaway member of the role, rolled back with everything it touched.
            user = get_user_model()._default_manager.create(
                **{get_user_model().USERNAME_FIELD: f"__validation_{role}"[:150]}
            )
            user.groups.add(group)
            user = get_user_model()._default_manager.get(pk=user.pk)
            visible = {tool.operation for tool in visible_tools(user, site=registry)}
            transaction.set_rollback(True)
        missing, extra = set(expected) - visible, visible - set(expected)
        if missing or extra:
            verdicts.append(
                Verdict(
                    outcome=Outcome.FAIL,
                    message=f"role {role!r}: catalog differs from what is expected",
                    details={"missing": sorted(missing), "unexpected": sorted(extra)},
                )
            )
        else:
            verdicts.append(
                Verdict(outcome=Outcome.PASS, message=f"role {role!r} sees {len(visible)} tools")
            )
    return verdicts
