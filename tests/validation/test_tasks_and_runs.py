"""Validation tasks and their tracked runs: creating a task, running it, statuses, schedules."""

from __future__ import annotations

import datetime as dt
import threading
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from assistant.exceptions import InvalidEntities
from assistant.models import Job, ValidationRun, ValidationTask
from assistant.validation import ValidationTaskService, rules, run_due_validations
from tests.testapp.models import Order
from tests.validations import counted, counts, findings, refetch, task_for
from tests.validations import orders as orders  # a fixture
from tests.validations import run_now as run_now  # a fixture

pytestmark = pytest.mark.django_db

Schedule = ValidationTask.Schedule


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
