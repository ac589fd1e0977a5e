"""Validation policies and their tracked runs: the service, the rules, schedules, REST and the tool."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from io import StringIO
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.db import IntegrityError, connection, transaction
from django.utils import timezone
from guardian.shortcuts import assign_perm
from rest_framework.test import APIClient

from assistant.dispatch import dispatch
from assistant.exceptions import InvalidEntities
from assistant.models import Job, ValidationRun, ValidationTask
from assistant.registry import registry
from assistant.validation import (
    ValidationTaskService,
    Verdict,
    rules,
    run_due_validations,
    validation_rule,
)
from tests.clients import client_for
from tests.conftest import perm
from tests.openai_peer import closed_port_url, error, text
from tests.openai_peer import openai_peer as openai_peer  # the fixture
from tests.testapp.models import Order

pytestmark = pytest.mark.django_db

API = "/assistant/api"
Schedule = ValidationTask.Schedule

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


# Helpers


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


# create_task: targets


@pytest.mark.parametrize(
    ("target", "one_order"),
    [
        pytest.param(lambda order: "testapp.Order", False, id="label"),
        pytest.param(lambda order: f"testapp.Order:{order.pk}", True, id="label-and-pk"),
        pytest.param(lambda order: Order, False, id="model-class"),
        pytest.param(lambda order: order, True, id="instance"),
    ],
)
def test_a_target_may_be_a_label_a_label_with_pk_a_model_class_or_an_instance(target, one_order):
    order = Order.objects.create(reference="ORD-1")

    task = task_for(target(order))

    assert task.target_type.model_class() is Order
    if one_order:
        assert (task.target_id, task.target_label) == (str(order.pk), f"testapp.Order:{order.pk}")
    else:
        assert (task.target_id, task.target_label) == ("", "testapp.Order")


@pytest.mark.parametrize(
    ("target", "rule_names", "field"),
    [
        ("testapp.Nothing", None, "target"),
        ("nowhere.Order", None, "target"),
        ("testapp", None, "target"),
        ("", None, "target"),
        (42, None, "target"),
        ("testapp.Order:999999", None, "target"),
        ("testapp.Order:not-a-number", None, "target"),
        ("testapp.Order", ["no_such_rule"], "rules"),
        ("testapp.Order", [{"name": "no_such_rule", "options": {}}], "rules"),
        ("testapp.Order", [], "rules"),
    ],
)
def test_an_unknown_model_pk_or_rule_is_refused_naming_the_field(target, rule_names, field):
    with pytest.raises(InvalidEntities) as refused:
        ValidationTaskService.create_task(name="x", target=target, rules=rule_names)

    assert list(refused.value.errors) == [field]
    assert not ValidationTask.objects.exists()


def test_a_target_filter_on_a_field_the_model_lacks_is_refused():
    with pytest.raises(InvalidEntities) as refused:
        task_for(target_filter={"colour": "red"})

    assert list(refused.value.errors) == ["target_filter"]
    assert not ValidationTask.objects.exists()


# create_task: rules


def test_without_rules_a_task_runs_every_rule_registered_for_its_model():
    task = ValidationTaskService.create_task(name="All", target="testapp.Order")

    expected = [rule.name for rule in rules.for_model("testapp.Order")]
    assert [entry["name"] for entry in task.rules] == expected
    assert {"llm_review", "test_reference_has_prefix", "test_order_has_amount"} <= set(expected)
    assert "tool_access_matrix" not in expected  # it has no target
    assert all(entry["options"] == {} for entry in task.rules)


def test_rules_named_with_options_are_stored_with_them():
    task = task_for(
        rules=["test_order_has_amount", {"name": "test_reference_has_prefix", "options": {"a": 1}}]
    )

    assert task.rules == [
        {"name": "test_order_has_amount", "options": {}},
        {"name": "test_reference_has_prefix", "options": {"a": 1}},
    ]


def test_a_task_without_a_name_is_named_after_its_target():
    order = Order.objects.create(reference="ORD-1")

    assert task_for(name="").name == "Validate testapp.Order"
    assert task_for(order, name="").name == f"Validate testapp.Order:{order.pk}"


# create_task: schedules


@pytest.mark.parametrize("schedule", [None, "", "none"])
def test_without_a_schedule_a_task_has_no_next_run(schedule):
    task = task_for(schedule=schedule)

    assert (task.schedule, task.interval_seconds, task.cron, task.next_run_at) == (
        Schedule.NONE,
        None,
        "",
        None,
    )


@pytest.mark.parametrize("schedule", [3600, dt.timedelta(hours=1)], ids=["seconds", "timedelta"])
def test_seconds_make_an_interval_schedule_first_due_one_interval_from_now(schedule):
    before = timezone.now()
    task = task_for(schedule=schedule)
    after = timezone.now()

    task.refresh_from_db()
    assert (task.schedule, task.interval_seconds, task.cron) == (Schedule.INTERVAL, 3600, "")
    hour = dt.timedelta(hours=1)
    assert before + hour <= task.next_run_at <= after + hour


def test_a_cron_expression_makes_a_cron_schedule_due_at_its_next_slot():
    task = task_for(schedule="0 3 * * *")

    task.refresh_from_db()
    assert (task.schedule, task.interval_seconds, task.cron) == (Schedule.CRON, None, "0 3 * * *")
    assert (task.next_run_at.hour, task.next_run_at.minute, task.next_run_at.second) == (3, 0, 0)
    assert timezone.now() < task.next_run_at <= timezone.now() + dt.timedelta(days=1)


@pytest.mark.parametrize(
    "schedule",
    [0, -60, True, 1.5, "every day", "61 * * * *", "* * *", ["0 3 * * *"], {"every": 60}],
)
def test_a_schedule_that_is_neither_seconds_nor_cron_is_refused(schedule):
    with pytest.raises(InvalidEntities) as refused:
        task_for(schedule=schedule)

    assert list(refused.value.errors) == ["schedule"]
    assert not ValidationTask.objects.exists()


# create_task: ownership


def test_the_owner_may_view_change_delete_and_run_that_task_only(make_user):
    owner = make_user("owner")
    task = task_for(owner=owner)
    other = task_for(owner=make_user("someone-else"))

    owner = refetch(owner)
    for action in ("view", "change", "delete", "run"):
        assert owner.has_perm(f"assistant.{action}_validationtask", task), action
        assert not owner.has_perm(f"assistant.{action}_validationtask", other), action
        assert not owner.has_perm(f"assistant.{action}_validationtask"), action
    assert task.owner == owner


# trigger_run: statuses and counts


def test_a_run_where_every_rule_passes_is_passed(run_now):
    Order.objects.create(reference="ORD-1", amount=10)
    Order.objects.create(reference="ORD-2", amount=20)
    task = task_for(rules=["test_reference_has_prefix", "test_order_has_amount"])

    run = run_now(task)

    assert run.status == ValidationRun.Status.PASSED
    assert counts(run) == counted(run) == {"passed": 4, "failed": 0, "warned": 0}
    assert run.started_at <= run.finished_at
    assert run.error == ""


def test_one_failing_finding_fails_the_run_and_counts_equal_the_findings(run_now, orders):
    task = task_for(rules=["test_reference_has_prefix", "test_order_has_amount"])

    run = run_now(task)

    assert run.status == ValidationRun.Status.FAILED
    assert counts(run) == counted(run) == {"passed": 4, "failed": 1, "warned": 1}
    assert findings(run) == [
        ("test_reference_has_prefix", "ORD-1", "pass", "ORD-1 starts with ORD-"),
        ("test_reference_has_prefix", "ORD-2", "pass", "ORD-2 starts with ORD-"),
        ("test_reference_has_prefix", "bad-3", "fail", "bad-3 lacks ORD-"),
        ("test_order_has_amount", "ORD-1", "pass", ""),
        ("test_order_has_amount", "ORD-2", "warn", "ORD-2 has no amount"),
        ("test_order_has_amount", "bad-3", "pass", ""),
    ]
    failing = run.findings.get(outcome="fail")
    assert (failing.target_type.model_class(), failing.target_id) == (Order, str(orders[2].pk))
    assert failing.details == {"prefix": "ORD-"}


def test_warnings_without_failures_make_a_warned_run(run_now, orders):
    task = task_for(rules=["test_order_has_amount"])

    run = run_now(task)

    assert run.status == ValidationRun.Status.WARNED
    assert counts(run) == counted(run) == {"passed": 2, "failed": 0, "warned": 1}


def test_a_rule_gets_its_options(run_now, orders):
    task = task_for(rules=[{"name": "test_reference_has_prefix", "options": {"prefix": "bad-"}}])

    run = run_now(task)

    assert counts(run) == {"passed": 1, "failed": 2, "warned": 0}
    assert run.findings.get(outcome="pass").target_repr == "bad-3"


def test_a_rule_that_raises_gives_a_warning_and_the_run_still_completes(run_now, orders):
    task = task_for(rules=["test_rule_that_raises", "test_reference_has_prefix"])

    run = run_now(task)

    assert run.status == ValidationRun.Status.FAILED  # the other rule still ran
    assert counts(run) == counted(run) == {"passed": 2, "failed": 1, "warned": 3}
    assert [message for _, _, outcome, message in findings(run) if outcome == "warn"] == [
        "the rule could not run: the ledger is offline"
    ] * 3
    assert run.finished_at is not None
    assert Job.objects.get(pk=run.job_id).status == Job.Status.SUCCEEDED


def test_a_rule_with_an_unknown_outcome_errors_the_run_and_fails_its_job(run_now, orders):
    task = task_for(rules=["test_reference_has_prefix", "test_rule_with_unknown_outcome"])

    run = run_now(task)

    assert run.status == ValidationRun.Status.ERRORED
    assert "test_rule_with_unknown_outcome" in run.error
    assert "'maybe'" in run.error
    assert counts(run) == counted(run) == {"passed": 0, "failed": 0, "warned": 0}
    assert run.finished_at is not None
    assert Job.objects.get(pk=run.job_id).status == Job.Status.FAILED


def test_a_rule_unregistered_since_the_task_was_made_errors_the_run(run_now, orders):
    task = task_for()
    ValidationTask.objects.filter(pk=task.pk).update(rules=[{"name": "gone", "options": {}}])
    task.refresh_from_db()

    run = run_now(task)

    assert run.status == ValidationRun.Status.ERRORED
    assert "gone" in run.error


def test_a_target_filter_narrows_the_targets(run_now, orders):
    task = task_for(target_filter={"status": "open"})

    run = run_now(task)

    assert [target for _, target, _, _ in findings(run)] == ["ORD-1", "bad-3"]
    assert counts(run) == {"passed": 1, "failed": 1, "warned": 0}


def test_a_task_on_one_instance_checks_that_instance_only(run_now, orders):
    task = task_for(orders[2])

    run = run_now(task)

    assert findings(run) == [("test_reference_has_prefix", "bad-3", "fail", "bad-3 lacks ORD-")]


def test_a_run_is_a_job_that_records_who_triggered_it(run_now, make_user, orders):
    alice = make_user("alice", "testapp.view_order")  # runs see what the owner may view
    task = task_for(owner=alice)

    run = run_now(task, ValidationRun.Trigger.USER, user=alice)

    job = Job.objects.get(pk=run.job_id)
    assert (job.operation, job.user, job.status) == ("validation_run", alice, Job.Status.SUCCEEDED)
    assert "Orders: failed — 2 passed, 1 failed, 0 warned." in job.result
    assert (run.triggered_by, run.triggered_by_user) == ("user", alice)
    task.refresh_from_db()
    assert task.last_run_at is not None


def test_a_triggered_run_is_queued_until_its_job_runs(django_capture_on_commit_callbacks, orders):
    task = task_for()

    with django_capture_on_commit_callbacks() as handed_over:
        run = ValidationTaskService.trigger_run(task)

    run.refresh_from_db()
    assert (run.status, run.started_at, len(handed_over)) == ("queued", None, 1)
    assert not run.findings.exists()


# llm_review


@pytest.fixture
def llm(settings: Any, openai_peer: Any) -> Any:
    """The configured LLM is the local OpenAI peer."""
    settings.ASSISTANT = {
        **django_settings.ASSISTANT,
        "LLM": {"BASE_URL": openai_peer.url, "MODEL": "test-model", "TIMEOUT": 5},
    }
    return openai_peer


def test_without_an_llm_configured_llm_review_warns_and_never_passes(run_now, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    Order.objects.create(reference="ORD-1")
    task = task_for(rules=["llm_review"])

    run = run_now(task)

    assert run.status == ValidationRun.Status.WARNED
    assert findings(run) == [("llm_review", "ORD-1", "warn", "no LLM configured")]


def test_the_llm_passes_a_record_with_its_reason(run_now, llm):
    llm.script(text('{"verdict": "PASS", "reason": "The reference is well formed."}'))
    Order.objects.create(reference="ORD-1", status="open")
    task = task_for(
        rules=[
            {
                "name": "llm_review",
                "options": {"fields": ["reference", "status"], "requirement": "it is open"},
            }
        ]
    )

    run = run_now(task)

    assert run.status == ValidationRun.Status.PASSED
    assert findings(run) == [("llm_review", "ORD-1", "pass", "The reference is well formed.")]
    assert run.findings.get().details == {"model": "test-model"}
    (request,) = llm.requests
    assert request["model"] == "test-model"
    assert not request.get("stream")
    (message,) = request["messages"]
    assert message["role"] == "user"
    assert "it is open" in message["content"]
    assert "reference: ORD-1\nstatus: open" in message["content"]


def test_the_llm_fails_a_record_with_its_reason(run_now, llm):
    llm.script(text('Here you go: {"verdict": "fail", "reason": "No customer is named."}'))
    Order.objects.create(reference="ORD-1")

    run = run_now(task_for(rules=["llm_review"]))

    assert run.status == ValidationRun.Status.FAILED
    assert findings(run) == [("llm_review", "ORD-1", "fail", "No customer is named.")]
    assert "ORD-1" in llm.requests[0]["messages"][0]["content"]


def test_the_llm_may_warn_with_its_reason(run_now, llm):
    llm.script(text('{"verdict": "WARN", "reason": "The amount looks low."}'))
    Order.objects.create(reference="ORD-1")

    run = run_now(task_for(rules=["llm_review"]))

    assert findings(run) == [("llm_review", "ORD-1", "warn", "The amount looks low.")]


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (text("Looks fine to me!"), "the LLM gave no verdict"),
        (text('{"verdict": "MAYBE", "reason": "Hard to say."}'), "the LLM answered 'MAYBE'"),
        (error(500, "The model is overloaded."), "the LLM gave no verdict"),
    ],
    ids=["garbage", "unknown-verdict", "http-error"],
)
def test_an_llm_answer_that_is_no_verdict_is_a_warning_never_a_pass(run_now, llm, reply, message):
    llm.script(reply)
    Order.objects.create(reference="ORD-1")

    run = run_now(task_for(rules=["llm_review"]))

    assert run.status == ValidationRun.Status.WARNED
    ((rule, target, outcome, said),) = findings(run)
    assert (rule, target, outcome) == ("llm_review", "ORD-1", "warn")
    assert said.startswith(message)


def test_an_unreachable_llm_is_a_warning(run_now, settings):
    settings.ASSISTANT = {
        **django_settings.ASSISTANT,
        "LLM": {"BASE_URL": closed_port_url(), "MODEL": "test-model", "TIMEOUT": 2},
    }
    Order.objects.create(reference="ORD-1")

    run = run_now(task_for(rules=["llm_review"]))

    assert [outcome for _, _, outcome, _ in findings(run)] == ["warn"]
    assert findings(run)[0][3].startswith("the LLM gave no verdict")


def test_each_target_gets_its_own_llm_verdict(run_now, llm, orders):
    llm.script(
        text('{"verdict": "PASS", "reason": "ok"}'),
        text('{"verdict": "PASS", "reason": "ok"}'),
        text('{"verdict": "FAIL", "reason": "bad prefix"}'),
    )

    run = run_now(task_for(rules=["llm_review"]))

    assert [(target, outcome) for _, target, outcome, _ in findings(run)] == [
        ("ORD-1", "pass"),
        ("ORD-2", "pass"),
        ("bad-3", "fail"),
    ]
    assert counts(run) == {"passed": 2, "failed": 1, "warned": 0}
    assert llm.unplayed == 0


# tool_access_matrix


PUBLIC = sorted(tool.operation for tool in registry if tool.public)


@pytest.fixture
def roles() -> dict[str, Group]:
    readers = Group.objects.create(name="order readers")
    readers.permissions.set([perm("testapp.view_order")])
    approvers = Group.objects.create(name="approvers")
    approvers.permissions.set([perm("testapp.view_order"), perm("testapp.approve_order")])
    return {
        "readers": readers,
        "approvers": approvers,
        "nobody": Group.objects.create(name="nobody"),
    }


def matrix_task(roles_expected: dict[str, list[str]]) -> ValidationTask:
    return ValidationTaskService.create_task(
        name="Tool access",
        target="auth.Group",
        rules=[{"name": "tool_access_matrix", "options": {"roles": roles_expected}}],
    )


def validation_users() -> list[str]:
    return list(
        get_user_model()
        .objects.filter(username__startswith="__validation_")
        .values_list("username", flat=True)
    )


def test_every_role_seeing_exactly_its_expected_tools_passes(run_now, roles):
    task = matrix_task(
        {
            "order readers": [*PUBLIC, "list_orders", "export_orders"],
            "approvers": [*PUBLIC, "list_orders", "export_orders", "approve_order"],
            "nobody": PUBLIC,
        }
    )

    run = run_now(task)

    assert run.status == ValidationRun.Status.PASSED, findings(run)
    # options are JSON: PostgreSQL's jsonb does not keep the roles in the order given
    assert sorted(findings(run)) == [
        ("tool_access_matrix", "", "pass", f"role 'approvers' sees {len(PUBLIC) + 3} tools"),
        ("tool_access_matrix", "", "pass", f"role 'nobody' sees {len(PUBLIC)} tools"),
        ("tool_access_matrix", "", "pass", f"role 'order readers' sees {len(PUBLIC) + 2} tools"),
    ]
    assert run.findings.filter(target_type__isnull=False).count() == 0
    assert validation_users() == []


def test_a_role_whose_catalog_differs_fails_naming_the_missing_and_unexpected_tools(run_now, roles):
    task = matrix_task(
        {
            "order readers": [*PUBLIC, "list_orders", "show_report"],
            "nobody": PUBLIC,
        }
    )

    run = run_now(task)

    assert run.status == ValidationRun.Status.FAILED
    assert counts(run) == counted(run) == {"passed": 1, "failed": 1, "warned": 0}
    failing = run.findings.get(outcome="fail")
    assert failing.message == "role 'order readers': catalog differs from what is expected"
    assert failing.details == {"missing": ["show_report"], "unexpected": ["export_orders"]}


def test_forgetting_the_public_tools_shows_them_as_unexpected(run_now, roles):
    run = run_now(matrix_task({"nobody": []}))

    assert run.findings.get().details == {"missing": [], "unexpected": PUBLIC}


def test_a_role_that_does_not_exist_fails(run_now, roles):
    run = run_now(matrix_task({"ghosts": PUBLIC}))

    assert run.status == ValidationRun.Status.FAILED
    assert findings(run) == [("tool_access_matrix", "", "fail", "role 'ghosts' does not exist")]


def test_the_throwaway_role_members_are_rolled_back(run_now, roles):
    users_before = get_user_model().objects.count()

    run_now(matrix_task({"order readers": PUBLIC, "approvers": PUBLIC, "nobody": PUBLIC}))

    assert validation_users() == []
    assert get_user_model().objects.count() == users_before
    assert list(roles["readers"].user_set.all()) == []


# run_due_validations


def test_a_due_interval_task_runs_once_and_its_next_run_moves_one_interval_on(
    django_capture_on_commit_callbacks, orders
):
    task = task_for(schedule=3600)
    slot = task.next_run_at

    assert run_due_validations(now=slot - dt.timedelta(seconds=1)) == []
    with django_capture_on_commit_callbacks(execute=True):
        (started,) = run_due_validations(now=slot)

    run = ValidationRun.objects.get()
    assert run.pk == started.pk
    assert (run.task, run.triggered_by, run.scheduled_for) == (task, "schedule", slot)
    assert run.status == ValidationRun.Status.FAILED  # the run did run: bad-3 fails
    task.refresh_from_db()
    assert task.next_run_at == slot + dt.timedelta(hours=1)
    assert task.last_run_at is not None


def test_calling_the_scheduler_twice_for_one_slot_starts_one_run(
    django_capture_on_commit_callbacks, orders
):
    task = task_for(schedule=3600)
    slot = task.next_run_at

    with django_capture_on_commit_callbacks(execute=True):
        first = run_due_validations(now=slot)
        second = run_due_validations(now=slot)

    assert (len(first), second) == (1, [])
    assert ValidationRun.objects.filter(task=task).count() == 1


def test_a_late_scheduler_starts_one_run_not_one_per_missed_slot(
    django_capture_on_commit_callbacks, orders
):
    task = task_for(schedule=60)
    slot = task.next_run_at
    late = slot + dt.timedelta(minutes=30)

    with django_capture_on_commit_callbacks(execute=True):
        assert len(run_due_validations(now=late)) == 1
        assert run_due_validations(now=late) == []

    task.refresh_from_db()
    assert task.next_run_at == late + dt.timedelta(seconds=60)
    assert ValidationRun.objects.get().scheduled_for == slot


def test_a_due_cron_task_moves_to_its_next_cron_slot(django_capture_on_commit_callbacks, orders):
    task = task_for(schedule="*/5 * * * *")
    slot = task.next_run_at

    with django_capture_on_commit_callbacks(execute=True):
        assert len(run_due_validations(now=slot)) == 1

    task.refresh_from_db()
    assert task.next_run_at == slot + dt.timedelta(minutes=5)


def test_disabled_and_unscheduled_tasks_never_run(django_capture_on_commit_callbacks, orders):
    disabled = task_for(name="Disabled", schedule=60, enabled=False)
    unscheduled = task_for(name="Unscheduled")
    far_future = timezone.now() + dt.timedelta(days=365)

    with django_capture_on_commit_callbacks(execute=True):
        assert run_due_validations(now=far_future) == []

    assert not ValidationRun.objects.exists()
    assert disabled.next_run_at is not None
    assert unscheduled.next_run_at is None


def test_a_slot_has_at_most_one_run_even_when_triggered_directly(orders):
    task = task_for(schedule=60)
    slot = task.next_run_at
    ValidationTaskService.trigger_run(task, ValidationRun.Trigger.SCHEDULE, scheduled_for=slot)

    with pytest.raises(IntegrityError), transaction.atomic():
        ValidationTaskService.trigger_run(task, ValidationRun.Trigger.SCHEDULE, scheduled_for=slot)

    assert ValidationRun.objects.filter(task=task).count() == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_overlapping_schedulers_create_one_run_for_a_slot():
    Order.objects.create(reference="ORD-1")
    task = task_for(schedule=3600)
    slot = task.next_run_at
    schedulers = 4
    gate = threading.Barrier(schedulers)
    started: list[ValidationRun] = []
    errors: list[BaseException] = []

    def scheduler() -> None:
        try:
            gate.wait()
            started.extend(run_due_validations(now=slot))
        except BaseException as exc:  # reported below, not lost in the thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=scheduler) for _ in range(schedulers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert errors == []
    assert len(started) == 1
    run = ValidationRun.objects.get(task=task)
    assert (run.scheduled_for, run.status) == (slot, ValidationRun.Status.PASSED)
    task.refresh_from_db()
    assert task.next_run_at == slot + dt.timedelta(hours=1)


def test_the_command_starts_what_is_due_and_says_so(django_capture_on_commit_callbacks, orders):
    task = task_for(name="Nightly orders", schedule=3600)
    task_for(name="Not yet", schedule=3600)
    ValidationTask.objects.filter(pk=task.pk).update(
        next_run_at=timezone.now() - dt.timedelta(minutes=1)
    )
    out = StringIO()

    with django_capture_on_commit_callbacks(execute=True):
        call_command("assistant_run_due_validations", stdout=out)

    run = ValidationRun.objects.get()
    assert out.getvalue() == f"Started run {run.pk} of Nightly orders\n1 due validation started\n"
    assert run.task == task


def test_the_command_says_when_nothing_is_due():
    task_for(schedule=3600)
    out = StringIO()

    call_command("assistant_run_due_validations", stdout=out)

    assert out.getvalue() == "0 due validations started\n"
    assert not ValidationRun.objects.exists()


# REST


@pytest.fixture
def author(make_user: Callable[..., Any]) -> Any:
    """May create validation tasks."""
    return make_user("author", "assistant.add_validationtask")


def test_creating_a_task_needs_the_add_permission(plain_user):
    response = client_for(plain_user).post(
        f"{API}/validation-tasks/", {"target": "testapp.Order"}, format="json"
    )

    assert response.status_code == 403
    assert response.json()["code"] == "permission_denied"
    assert not ValidationTask.objects.exists()


def test_a_created_task_is_owned_by_its_author(author):
    response = client_for(author).post(
        f"{API}/validation-tasks/",
        {
            "name": "Orders hourly",
            "target": "testapp.Order",
            "rules": ["test_reference_has_prefix"],
            "target_filter": {"status": "open"},
            "schedule": 3600,
        },
        format="json",
    )

    assert response.status_code == 201, response.json()
    body = response.json()
    task = ValidationTask.objects.get()
    assert body["id"] == task.pk
    assert {key: body[key] for key in ("name", "target", "owner", "schedule")} == {
        "name": "Orders hourly",
        "target": "testapp.Order",
        "owner": "author",
        "schedule": "interval",
    }
    assert (body["interval_seconds"], body["target_filter"]) == (3600, {"status": "open"})
    assert body["rules"] == [{"name": "test_reference_has_prefix", "options": {}}]
    assert body["next_run_at"] is not None
    assert refetch(author).has_perm("assistant.run_validationtask", task)


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"target": "testapp.Nothing"}, "target"),
        ({"target": "testapp.Order:999999"}, "target"),
        ({"target": "testapp.Order:not-a-number"}, "target"),
        ({"target": "testapp.Order", "rules": ["no_such_rule"]}, "rules"),
        ({"target": "testapp.Order", "schedule": "whenever"}, "schedule"),
    ],
)
def test_a_bad_task_is_a_400_naming_the_field(author, payload, field):
    response = client_for(author).post(f"{API}/validation-tasks/", payload, format="json")

    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid_entities"
    assert list(body["errors"]) == [field]
    assert not ValidationTask.objects.exists()


def test_a_task_on_an_order_its_author_may_not_view_is_a_400(author, orders):
    response = client_for(author).post(
        f"{API}/validation-tasks/", {"target": f"testapp.Order:{orders[2].pk}"}, format="json"
    )

    assert response.status_code == 400
    assert response.json()["code"] == "invalid_entities"
    assert list(response.json()["errors"]) == ["target"]
    assert not ValidationTask.objects.exists()


def test_a_task_made_over_rest_validates_only_the_records_its_author_may_view(
    author, orders, django_capture_on_commit_callbacks
):
    assign_perm("testapp.view_order", author, orders[1])
    client = client_for(author)
    created = client.post(
        f"{API}/validation-tasks/",
        {"target": "testapp.Order", "rules": ["test_reference_has_prefix"]},
        format="json",
    )
    assert created.status_code == 201, created.json()

    with django_capture_on_commit_callbacks(execute=True):
        client.post(f"{API}/validation-tasks/{created.json()['id']}/run/")

    run = ValidationRun.objects.get()
    assert [target for _, target, _, _ in findings(run)] == ["ORD-2"]


def test_the_list_shows_own_tasks_and_tasks_shared_with_you_only(make_user):
    alice, bob = make_user("alice"), make_user("bob")
    mine = task_for(name="Mine", owner=alice)
    shared = task_for(name="Shared", owner=bob)
    task_for(name="Private", owner=bob)
    task_for(name="Ownerless")
    assign_perm("assistant.view_validationtask", alice, shared)

    response = client_for(alice).get(f"{API}/validation-tasks/")

    assert response.status_code == 200
    body = response.json()
    assert [task["name"] for task in body["results"]] == ["Mine", "Shared"]
    assert [task["id"] for task in body["results"]] == [mine.pk, shared.pk]
    assert body["count"] == 2


def test_someone_elses_task_is_not_found(make_user):
    alice, bob = make_user("alice"), make_user("bob")
    task = task_for(owner=bob)

    response = client_for(alice).get(f"{API}/validation-tasks/{task.pk}/")

    assert response.status_code == 404
    assert response.json()["code"] == "not_found"
    assert client_for(bob).get(f"{API}/validation-tasks/{task.pk}/").json()["name"] == "Orders"


def test_the_owner_runs_a_task_and_gets_the_run_with_202(
    make_user, orders, django_capture_on_commit_callbacks
):
    alice = make_user("alice", "testapp.view_order")  # runs see what the owner may view
    task = task_for(owner=alice)

    with django_capture_on_commit_callbacks(execute=True):
        response = client_for(alice).post(f"{API}/validation-tasks/{task.pk}/run/")

    assert response.status_code == 202
    body = response.json()
    run = ValidationRun.objects.get()
    assert (body["id"], body["task"], body["triggered_by"]) == (run.pk, task.pk, "user")
    assert body["job"] == str(run.job_id)
    assert (run.status, run.triggered_by_user) == (ValidationRun.Status.FAILED, alice)


def test_a_user_granted_only_view_may_not_run_the_task(make_user):
    alice, bob = make_user("alice"), make_user("bob")
    task = task_for(owner=bob)
    assign_perm("assistant.view_validationtask", alice, task)

    response = client_for(alice).post(f"{API}/validation-tasks/{task.pk}/run/")

    assert response.status_code == 403
    assert response.json()["code"] == "permission_denied"
    assert not ValidationRun.objects.exists()


def test_running_a_task_you_cannot_see_is_not_found(make_user):
    alice = make_user("alice")
    task = task_for(owner=make_user("bob"))

    response = client_for(alice).post(f"{API}/validation-tasks/{task.pk}/run/")

    assert response.status_code == 404
    assert not ValidationRun.objects.exists()


def test_the_runs_of_a_task_are_listed_with_their_findings(
    make_user, orders, django_capture_on_commit_callbacks
):
    alice = make_user("alice", "testapp.view_order")  # runs see what the owner may view
    task = task_for(owner=alice)
    other = task_for(name="Other", owner=alice)
    with django_capture_on_commit_callbacks(execute=True):
        run = ValidationTaskService.trigger_run(task, user=alice)
        ValidationTaskService.trigger_run(other, user=alice)

    response = client_for(alice).get(f"{API}/validation-runs/", {"task": task.pk})

    assert response.status_code == 200
    (listed,) = response.json()["results"]
    assert (listed["id"], listed["status"]) == (run.pk, "failed")
    assert (listed["passed"], listed["failed"], listed["warned"]) == (2, 1, 0)
    assert [(f["target_repr"], f["outcome"]) for f in listed["findings"]] == [
        ("ORD-1", "pass"),
        ("ORD-2", "pass"),
        ("bad-3", "fail"),
    ]
    assert listed["findings"][2] == {
        "rule": "test_reference_has_prefix",
        "target_id": str(orders[2].pk),
        "target_repr": "bad-3",
        "outcome": "fail",
        "message": "bad-3 lacks ORD-",
        "details": {"prefix": "ORD-"},
    }


def test_runs_of_tasks_you_cannot_see_are_not_listed(
    make_user, orders, django_capture_on_commit_callbacks
):
    alice, bob = make_user("alice"), make_user("bob")
    task = task_for(owner=bob)
    with django_capture_on_commit_callbacks(execute=True):
        ValidationTaskService.trigger_run(task, user=bob)

    client = client_for(alice)

    assert client.get(f"{API}/validation-runs/", {"task": task.pk}).json()["results"] == []
    assert client.get(f"{API}/validation-runs/").json()["results"] == []


def test_a_task_parameter_that_is_not_an_id_is_a_400(plain_user):
    response = client_for(plain_user).get(f"{API}/validation-runs/", {"task": "orders"})

    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid"
    assert list(body["errors"]) == ["task"]


def test_the_validation_endpoints_need_a_login():
    client = APIClient()

    assert client.get(f"{API}/validation-tasks/").status_code == 401
    assert client.get(f"{API}/validation-runs/").status_code == 401


# The run_llm_validation tool


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

    assert (outcome.decision, outcome.code) == ("denied", "permission_denied")
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
    assert f"Validation task {task.pk}" in outcome.text
    assert str(run.job_id) in outcome.text
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
