"""Validation test helpers: rules of the tests' own, a run that runs now, what it found."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth import get_user_model

from assistant.models import ValidationRun, ValidationTask
from assistant.validation import ValidationTaskService, Verdict, validation_rule
from tests.testapp.models import Order

# The rule registry is global: these rules only add to it, under names no one else uses.


@validation_rule(name="test_reference_has_prefix", models=["testapp.Order"])
def reference_has_prefix(order: Order, options: dict[str, Any], run: Any) -> Verdict:
    """An order's reference starts with the expected prefix."""
    prefix = options.get("prefix", "ORD-")
    if order.reference.startswith(prefix):
        return Verdict(outcome="pass", message=f"{order.reference} starts with {prefix}")
    return Verdict(
        outcome="fail", message=f"{order.reference} lacks {prefix}", details={"prefix": prefix}
    )


@validation_rule(name="test_order_has_amount", models=["testapp.Order"])
def order_has_amount(order: Order, options: dict[str, Any], run: Any) -> Verdict:
    """An order of zero is suspicious, not wrong."""
    if order.amount:
        return Verdict(outcome="pass")
    return Verdict(outcome="warn", message=f"{order.reference} has no amount")


@validation_rule(name="test_rule_that_raises", models=["testapp.Order"])
def rule_that_raises(order: Order, options: dict[str, Any], run: Any) -> Verdict:
    """A rule whose backing service is down."""
    raise RuntimeError("the ledger is offline")


@validation_rule(name="test_rule_with_unknown_outcome", models=["testapp.Order"])
def rule_with_unknown_outcome(order: Order, options: dict[str, Any], run: Any) -> Verdict:
    """A broken rule: its verdict is neither pass, fail nor warn."""
    return Verdict(outcome="maybe")


@pytest.fixture
def run_now(django_capture_on_commit_callbacks: Any) -> Callable[..., ValidationRun]:
    """Trigger a run and let its job run (immediate backend) once the transaction would commit."""

    def trigger(task: ValidationTask, *args: Any, **kwargs: Any) -> ValidationRun:
        with django_capture_on_commit_callbacks(execute=True):
            run = ValidationTaskService.trigger_run(task, *args, **kwargs)
        run.refresh_from_db()
        return run

    return trigger


@pytest.fixture
def orders() -> list[Order]:
    return [
        Order.objects.create(reference="ORD-1", amount=10, status="open"),
        Order.objects.create(reference="ORD-2", amount=0, status="shipped"),
        Order.objects.create(reference="bad-3", amount=5, status="open"),
    ]


def task_for(target: Any = "testapp.Order", **kwargs: Any) -> ValidationTask:
    kwargs.setdefault("name", "Orders")
    kwargs.setdefault("rules", ["test_reference_has_prefix"])
    return ValidationTaskService.create_task(target=target, **kwargs)


def findings(run: ValidationRun) -> list[tuple[str, str, str, str]]:
    """(rule, target, outcome, message) of each finding, in the order the run made them."""
    return [
        (finding.rule, finding.target_repr, finding.outcome, finding.message)
        for finding in run.findings.order_by("id")
    ]


def counted(run: ValidationRun) -> dict[str, int]:
    """What the run's findings add up to."""
    outcomes = list(run.findings.values_list("outcome", flat=True))
    return {
        "passed": outcomes.count("pass"),
        "failed": outcomes.count("fail"),
        "warned": outcomes.count("warn"),
    }


def counts(run: ValidationRun) -> dict[str, int]:
    """The counts stored on the run."""
    return {"passed": run.passed, "failed": run.failed, "warned": run.warned}


def refetch(user: Any) -> Any:
    return get_user_model().objects.get(pk=user.pk)
