"""What the approval tests share: approval policies in the settings, an order's approval asked
for, and what the order, the action and the audit trail say afterwards."""

from __future__ import annotations

from typing import Any

from assistant.dispatch.door import dispatch
from assistant.models import AuditEntry, PendingAction
from tests.testapp.models import Order

BASE = {"RESOURCES": {"orders": "testapp.Order"}, "THROTTLE_RATE": "10000/min"}
TWO_PERSON = {"policy": "two_person", "permission": "testapp.approve_order"}
CHANGES = {"kind": "changes", "rows": [{"field": "status", "before": "open", "after": "cancelled"}]}


def policies(settings: Any, **configured: Any) -> None:
    settings.ASSISTANT = {**BASE, "APPROVAL_POLICIES": configured}


def audit(operation: str) -> list[tuple[str, str, str]]:
    """Each audit entry of ``operation``: its decision, its user's name and its reason."""
    return list(
        AuditEntry.objects.filter(operation=operation)
        .order_by("id")
        .values_list("decision", "username", "reason")
    )


def approvals(order: Order) -> int:
    return Order.objects.get(pk=order.pk).approvals


def ask(user: Any, order: Order) -> PendingAction:
    outcome = dispatch("approve_order", {"order_id": order.pk}, user=user)
    assert outcome.decision == "confirmation_requested"
    assert outcome.pending_action is not None
    return outcome.pending_action


def status_of(action: PendingAction) -> str:
    return PendingAction.objects.get(pk=action.pk).status
