"""The admin tests' staff users, signed-in superuser client, audit history and one of every record."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from assistant.access.tokens import issue
from assistant.dispatch.door import dispatch
from assistant.models import AuditEntry, Conversation, Job, ValidationFinding, ValidationRun
from assistant.validation import ValidationTaskService
from tests.admin.pages import SECRET, VIEW_EVERYTHING, History
from tests.clients import client_for
from tests.testapp.models import Order


@pytest.fixture
def auditor(make_user: Callable[..., Any]) -> Any:
    """Staff who may view the audit trail and every other assistant record."""
    return make_user("auditor", *VIEW_EVERYTHING, is_staff=True)


@pytest.fixture
def helpdesk(make_user: Callable[..., Any]) -> Any:
    """Staff who may view conversations and jobs, but not the audit trail."""
    return make_user("helpdesk", "assistant.view_conversation", "assistant.view_job", is_staff=True)


@pytest.fixture
def admin_client(superuser: Any) -> Client:
    return client_for(superuser, Client)


@pytest.fixture
def history(plain_user: Any, clerk: Any, keeper: Any) -> History:
    """Six dispatches by three users through four transports, oldest first."""
    order = Order.objects.create(reference="ORD-1")
    conversation = Conversation.objects.create(user=plain_user, title="trouble")
    calls = [
        ("ping", {}, plain_user, "rest", conversation),
        ("explode", {}, plain_user, "websocket", conversation),
        ("list_orders", {}, plain_user, "api", None),
        ("approve_order", {"order_id": order.pk}, clerk, "api", None),
        ("store_secret", {"label": "wifi", "secret": SECRET}, keeper, "cli", None),
        ("cancel_order", {"order_id": order.pk}, clerk, "rest", None),
    ]
    entries = {}
    for operation, entities, user, source, in_conversation in calls:
        outcome = dispatch(
            operation, entities, user=user, source=source, conversation=in_conversation
        )
        entries[operation] = AuditEntry.objects.get(pk=outcome.audit_id)
    return History(conversation=conversation, entries=entries)


@pytest.fixture
def world(history: History, superuser: Any, clerk: Any) -> dict[str, Any]:
    """One record of every kind the admin shows."""
    task = ValidationTaskService.create_task(
        name="Access", target="testapp.Order", rules=["tool_access_matrix"]
    )
    job = Job.objects.create(
        operation="start_job", function="tests.testapp.jobs.count_orders", user=superuser
    )
    run = ValidationRun.objects.create(task=task, status="failed", failed=1, job=job)
    ValidationFinding.objects.create(
        run=run, rule="tool_access_matrix", outcome="fail", message="role 'x' does not exist"
    )
    return {
        "entry": history.entries["approve_order"],
        "conversation": history.conversation,
        "action": history.entries["approve_order"].pending_action,
        "job": job,
        "task": task,
        "run": run,
        "token": issue(clerk, name="ci", max_risk="safe", operations=["list_orders"])[0],
    }
