"""The validation REST endpoints: tasks owned and shared, runs and their findings."""

from __future__ import annotations

import pytest
from guardian.shortcuts import assign_perm
from rest_framework.test import APIClient

from assistant.models import ValidationRun, ValidationTask
from assistant.validation import ValidationTaskService
from tests.clients import API, client_for
from tests.validations import findings, refetch, task_for
from tests.validations import orders as orders  # a fixture

pytestmark = pytest.mark.django_db


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
