"""Ids in query strings and paths, and NUL characters: a JSON 400 or 404, never a 500."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from assistant.models import AuditEntry, Conversation, ValidationTask
from assistant.validation import ValidationTaskService
from tests.clients import API, client_for
from tests.testapp.models import Order

pytestmark = pytest.mark.django_db

BAD_IDS = ["²", "\u0661\u0662", "9" * 5000, "0", str(2**63), "00000000000000000000001"]


@pytest.fixture
def staff(make_user: Callable[..., Any]) -> Any:
    """Staff who may read every conversation and the audit trail, and see every task."""
    return make_user(
        "sam", "assistant.view_auditentry", "assistant.view_validationtask", is_staff=True
    )


@pytest.fixture
def task(staff: Any) -> ValidationTask:
    Order.objects.create(reference="ORD-1")
    return ValidationTaskService.create_task(name="Orders", target="testapp.Order", owner=staff)


@pytest.mark.parametrize(
    ("path", "param"),
    [
        ("validation-runs/", "task"),
        ("admin/conversations/", "user"),
        ("admin/audit/", "user"),
    ],
)
@pytest.mark.parametrize(
    "value", BAD_IDS, ids=["superscript", "arabic", "5000", "0", "2**63", "long"]
)
def test_an_id_that_is_not_ascii_digits_in_range_is_a_json_400(staff, path, param, value):
    response = client_for(staff).get(f"{API}/{path}", {param: value})

    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert body["code"] == "invalid"
    assert list(body["errors"]) == [param]
    assert "digits 0-9" in body["errors"][param]


def test_a_task_id_in_range_still_selects_that_tasks_runs(staff, task):
    response = client_for(staff).get(f"{API}/validation-runs/", {"task": str(2**63 - 1)})

    assert (response.status_code, response.json()["results"]) == (200, [])


def test_a_user_id_or_a_username_still_selects_that_users_rows(staff, make_user):
    other = make_user("olga")
    Conversation.objects.create(user=other, title="hello")
    AuditEntry.objects.create(user=other, username="olga", operation="x", decision="allowed")
    client = client_for(staff)

    for value in (str(other.pk), "olga"):
        conversations = client.get(f"{API}/admin/conversations/", {"user": value}).json()
        audit = client.get(f"{API}/admin/audit/", {"user": value}).json()
        assert [row["username"] for row in conversations["results"]] == ["olga"]
        assert [row["username"] for row in audit["results"]] == ["olga"]
    assert client.get(f"{API}/admin/audit/", {"user": "-1"}).json()["results"] == []


@pytest.mark.parametrize(
    "path",
    [
        "tools/?style=open\x00ai",
        "actions/?status=pend\x00ing",
        "conversations/?page=1\x00",
        "jobs/?status=\x00",
        "validation-tasks/?page_size=\x00",
        "validation-runs/?task=1\x00",
        "admin/conversations/?user=ad\x00min",
        "admin/audit/?operation=show\x00report",
        "admin/audit/?since=2024-01-01\x00",
        "admin/audit/?us\x00er=1",
    ],
)
def test_a_nul_in_any_query_parameter_is_a_json_400_naming_it(staff, path):
    response = client_for(staff).get(f"{API}/{path}")

    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid"
    (name,) = body["errors"]
    assert name in path.replace("\x00", "\\x00")
    assert body["errors"][name] == "a NUL character is not allowed"


def test_a_nul_in_a_query_parameter_of_a_post_is_refused_before_anything_is_stored(staff):
    response = client_for(staff).post(
        f"{API}/validation-tasks/?x=\x00", {"target": "testapp.Order"}, format="json"
    )

    assert response.status_code == 400
    assert not ValidationTask.objects.exists()


@pytest.mark.parametrize("task_id", [str(2**63), "9" * 30, "9" * 5000])
@pytest.mark.parametrize("suffix", ["", "run/"])
def test_a_task_id_out_of_range_in_the_path_is_a_json_404(staff, task, task_id, suffix):
    client = client_for(staff)
    url = f"{API}/validation-tasks/{task_id}/{suffix}"

    response = client.post(url) if suffix else client.get(url)

    assert response.status_code == 404
    assert response.json()["code"] == "not_found"
