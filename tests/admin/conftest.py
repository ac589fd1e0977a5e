"""The admin tests' staff users, signed-in superuser client and audit history."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from assistant.dispatch import dispatch
from assistant.models import AuditEntry, Conversation
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
def keeper(make_user: Callable[..., Any]) -> Any:
    """May store secrets."""
    return make_user("keeper", "assistant.vault_write")


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
