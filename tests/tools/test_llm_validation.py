"""The run_llm_validation tool: a validation task over the orders a user may view, run at once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from guardian.shortcuts import assign_perm

from assistant.dispatch.door import dispatch
from assistant.models import Job, ValidationRun, ValidationTask
from tests.validations import findings, refetch
from tests.validations import orders as orders  # a fixture

pytestmark = pytest.mark.django_db


@pytest.fixture
def validator(make_user: Callable[..., Any]) -> Any:
    """May run validations; sees no order unless granted."""
    return make_user("validator", "assistant.validation_run")


def validate(user: Any, capture: Any, **entities: Any) -> Any:
    with capture(execute=True):
        return dispatch("run_llm_validation", entities, user=user)


def test_the_tool_is_denied_without_the_validation_permission(
    reader, orders, django_capture_on_commit_callbacks
):
    outcome = validate(reader, django_capture_on_commit_callbacks, target="testapp.Order")

    # (no part in validation: answered as a missing tool, audited denied)
    assert (outcome.decision, outcome.code) == ("unknown", "unknown_operation")
    assert not ValidationTask.objects.exists()
    assert not ValidationRun.objects.exists()


def test_the_tool_validates_every_order_for_a_user_who_may_view_all(
    make_user, orders, django_capture_on_commit_callbacks
):
    user = make_user("auditor", "assistant.validation_run", "testapp.view_order")

    outcome = validate(
        user,
        django_capture_on_commit_callbacks,
        target="testapp.Order",
        rules=["test_reference_has_prefix"],
    )

    assert outcome.decision == "executed", outcome.text
    task = ValidationTask.objects.get()
    run = ValidationRun.objects.get()
    assert (task.owner, task.name, task.target_label) == (
        user,
        "Validation of testapp.Order",
        "testapp.Order",
    )
    assert (run.task, run.triggered_by, run.triggered_by_user) == (task, "assistant", user)
    assert [target for _, target, _, _ in findings(run)] == ["ORD-1", "ORD-2", "bad-3"]
    assert run.status == ValidationRun.Status.FAILED


def test_the_tool_validates_only_the_orders_a_user_was_granted(
    validator, orders, django_capture_on_commit_callbacks
):
    assign_perm("testapp.view_order", validator, orders[1])

    outcome = validate(
        refetch(validator),
        django_capture_on_commit_callbacks,
        target="testapp.Order",
        rules=["test_reference_has_prefix"],
    )

    assert outcome.decision == "executed", outcome.text
    run = ValidationRun.objects.get()
    assert findings(run) == [
        ("test_reference_has_prefix", "ORD-2", "pass", "ORD-2 starts with ORD-")
    ]
    assert run.status == ValidationRun.Status.PASSED


def test_the_tool_refuses_one_order_the_user_may_not_view(
    validator, orders, django_capture_on_commit_callbacks
):
    assign_perm("testapp.view_order", validator, orders[1])

    outcome = validate(
        refetch(validator),
        django_capture_on_commit_callbacks,
        target=f"testapp.Order:{orders[2].pk}",
    )

    assert (outcome.decision, outcome.code) == ("invalid", "invalid_entities")
    assert list(outcome.error.errors) == ["target"]
    assert not ValidationTask.objects.exists()


def test_the_tool_validates_one_order_the_user_may_view(
    validator, orders, django_capture_on_commit_callbacks
):
    assign_perm("testapp.view_order", validator, orders[2])

    outcome = validate(
        refetch(validator),
        django_capture_on_commit_callbacks,
        target=f"testapp.Order:{orders[2].pk}",
        rules=["test_reference_has_prefix"],
    )

    assert outcome.decision == "executed", outcome.text
    task = ValidationTask.objects.get()
    assert task.target_id == str(orders[2].pk)
    assert findings(ValidationRun.objects.get()) == [
        ("test_reference_has_prefix", "bad-3", "fail", "bad-3 lacks ORD-")
    ]


def test_the_tool_replies_with_the_validation_task_id_and_the_job_id(
    make_user, orders, django_capture_on_commit_callbacks
):
    user = make_user("auditor", "assistant.validation_run", "testapp.view_order")

    outcome = validate(
        user,
        django_capture_on_commit_callbacks,
        target="testapp.Order",
        rules=["test_order_has_amount"],
        name="Amounts",
    )

    task = ValidationTask.objects.get()
    run = ValidationRun.objects.get()
    assert task.name == "Amounts"
    assert outcome.text == f"Validation task {task.pk} started (run {run.pk})."  # (no job id)
    assert outcome.result.task_id == str(run.job_id)
    assert outcome.result.data == {
        "validation_task": task.pk,
        "run": run.pk,
        "job": str(run.job_id),
    }
    job = Job.objects.get(pk=run.job_id)
    assert (job.user, job.status) == (user, Job.Status.SUCCEEDED)


@pytest.mark.parametrize(
    ("entities", "field"),
    [
        ({"target": "testapp.Nothing"}, "target"),
        ({"target": "testapp.Order:not-a-number"}, "target"),
        ({"target": "testapp.Order", "rules": ["no_such_rule"]}, "rules"),
    ],
)
def test_the_tool_refuses_an_unknown_model_pk_or_rule(
    make_user, orders, django_capture_on_commit_callbacks, entities, field
):
    user = make_user("auditor", "assistant.validation_run", "testapp.view_order")

    outcome = validate(user, django_capture_on_commit_callbacks, **entities)

    assert (outcome.decision, outcome.code) == ("invalid", "invalid_entities")
    assert list(outcome.error.errors) == [field]
    assert not ValidationTask.objects.exists()
