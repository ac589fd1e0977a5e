"""dispatch() and adispatch(): the only door into a handler, and one audit entry per call."""

from __future__ import annotations

import logging
import threading

import pytest
from django.contrib.auth.models import AnonymousUser

from assistant.core.registry import registry
from assistant.dispatch.catalog import get_catalog
from assistant.dispatch.door import adispatch, dispatch
from assistant.models import AuditEntry, Conversation, PendingAction
from assistant.turns.planners import Intent
from tests.testapp.models import Order


def only_new_entry(before_id):
    """The one audit entry written since ``before_id``; fails if there is not exactly one."""
    (entry,) = AuditEntry.objects.filter(id__gt=before_id)
    return entry


def last_audit_id():
    return AuditEntry.objects.order_by("-id").values_list("id", flat=True).first() or 0


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("username", "operation", "entities", "decision"),
    [
        ("reader", "list_orders", lambda order: {"status": "open"}, "executed"),
        ("plain_user", "explode", lambda order: {}, "failed"),
        ("plain_user", "list_orders", lambda order: {}, "denied"),
        ("plain_user", "forbid", lambda order: {}, "denied"),
        ("plain_user", "echo_types", lambda order: {"count": "many"}, "invalid"),
        ("plain_user", "no_such_tool", lambda order: {"x": 1}, "unknown"),
        ("clerk", "approve_order", lambda order: {"order_id": order.pk}, "confirmation_requested"),
    ],
    ids=["executed", "failed", "denied", "denied-by-handler", "invalid", "unknown", "confirm"],
)
def test_every_call_writes_exactly_one_audit_entry(
    request, order, username, operation, entities, decision
):
    user = request.getfixturevalue(username)
    before = last_audit_id()

    outcome = dispatch(operation, entities(order), user=user)

    entry = only_new_entry(before)
    assert entry.decision == decision
    # a tool the caller has no part in is answered as a missing one; only the audit says denied
    assert outcome.decision == (
        "unknown" if decision == "denied" and operation == "list_orders" else decision
    )
    assert outcome.audit_id == entry.pk
    assert entry.operation == operation
    assert entry.user == user
    assert entry.username == user.get_username()


@pytest.mark.django_db
def test_an_executed_call_records_the_tool_and_its_entities(reader):
    Order.objects.create(reference="ORD-2", status="open")
    Order.objects.create(reference="ORD-3", status="shipped")

    outcome = dispatch("list_orders", {"status": "open"}, user=reader)

    assert outcome.ok
    assert outcome.status == 200
    assert outcome.text == "ORD-2"
    assert outcome.result.data == ["ORD-2"]
    entry = AuditEntry.objects.get(pk=outcome.audit_id)
    assert (entry.domain, entry.risk_level, entry.entities, entry.error) == (
        "orders",
        "safe",
        {"status": "open"},
        "",
    )


@pytest.mark.django_db
def test_context_of_the_call_is_recorded(plain_user):
    conversation = Conversation.objects.create(user=plain_user, title="t")

    outcome = dispatch(
        "ping", user=plain_user, conversation=conversation, source="cli", request_ip="10.1.2.3"
    )

    entry = AuditEntry.objects.get(pk=outcome.audit_id)
    assert entry.source == "cli"
    assert entry.request_ip == "10.1.2.3"
    assert entry.conversation == conversation


@pytest.mark.django_db
def test_duration_is_recorded(plain_user):
    outcome = dispatch("echo_types", {"count": 2}, user=plain_user)

    entry = AuditEntry.objects.get(pk=outcome.audit_id)
    assert outcome.duration_ms > 0
    assert entry.duration_ms == pytest.approx(outcome.duration_ms)


@pytest.mark.django_db
def test_a_tool_the_llm_proposes_outside_the_catalog_is_denied_and_audited(reader):
    catalog = {spec["function"]["name"] for spec in get_catalog(reader, site=registry)}
    proposal = Intent(operation="merge_orders", entities={"keep": 1, "remove": 2}, source="llm")
    assert proposal.operation not in catalog
    before = last_audit_id()

    outcome = dispatch(proposal.operation, proposal.entities, user=reader, source=proposal.source)

    assert outcome.decision == "denied"
    assert outcome.code == "permission_denied"
    assert outcome.status == 403
    assert outcome.result is None
    entry = only_new_entry(before)
    assert (entry.operation, entry.decision, entry.source) == ("merge_orders", "denied", "llm")
    assert entry.entities == {"keep": 1, "remove": 2}


@pytest.mark.django_db
def test_anonymous_caller_is_denied_even_a_public_tool():
    before = last_audit_id()

    outcome = dispatch("ping", user=AnonymousUser())

    assert outcome.decision == "unknown"  # they may use nothing: nothing is theirs to know of
    assert outcome.code == "unknown_operation"
    entry = only_new_entry(before)
    assert entry.decision == "denied"
    assert entry.user is None
    assert entry.username == ""


@pytest.mark.django_db
def test_an_unknown_operation_is_audited_with_its_name(plain_user):
    outcome = dispatch("drop_database", {"really": True}, user=plain_user)

    assert outcome.code == "unknown_operation"
    assert outcome.status == 404
    entry = AuditEntry.objects.get(pk=outcome.audit_id)
    assert entry.operation == "drop_database"
    assert entry.domain == ""
    # Entities of an unknown tool are not trusted into the trail verbatim.
    assert entry.entities == {"really": "[redacted]"}


@pytest.mark.django_db
def test_invalid_entities_name_each_problem_and_change_nothing(clerk, order):
    outcome = dispatch("cancel_order", {"order_id": "seven", "reason": "too slow"}, user=clerk)

    assert outcome.decision == "invalid"
    assert outcome.code == "invalid_entities"
    assert outcome.status == 400
    assert outcome.error.errors == {"order_id": "expected an integer", "reason": "unknown entity"}
    assert "order_id" in outcome.text
    assert "reason" in outcome.text
    order.refresh_from_db()
    assert order.status == "open"
    assert not PendingAction.objects.exists()


@pytest.mark.django_db
def test_missing_required_entities_are_named(plain_user):
    outcome = dispatch("echo_types", {"ratio": "high"}, user=plain_user)

    assert outcome.error.errors == {"count": "required", "ratio": "expected a number"}


@pytest.mark.django_db
def test_a_raising_handler_gives_a_short_error_and_a_failed_audit(plain_user, caplog):
    with caplog.at_level(logging.ERROR, logger="assistant"):
        outcome = dispatch("explode", user=plain_user)

    assert outcome.decision == "failed"
    assert outcome.code == "tool_failed"
    assert outcome.result is None
    assert "explode" in outcome.text
    for leak in ("boom", "42", "RuntimeError", "Traceback"):
        assert leak not in outcome.text
    entry = AuditEntry.objects.get(pk=outcome.audit_id)
    assert entry.decision == "failed"
    assert entry.error == "RuntimeError: boom: internal detail 42"
    (record,) = [r for r in caplog.records if r.exc_info]
    assert isinstance(record.exc_info[1], RuntimeError)


@pytest.mark.django_db
def test_a_handler_raising_permission_denied_is_audited_denied(plain_user):
    outcome = dispatch("forbid", user=plain_user)

    assert outcome.decision == "denied"
    assert outcome.code == "permission_denied"
    assert outcome.status == 403
    assert outcome.text == "Not on Sundays."
    assert AuditEntry.objects.get(pk=outcome.audit_id).decision == "denied"


@pytest.mark.django_db
def test_sync_dispatch_runs_an_async_handler(plain_user):
    outcome = dispatch("apong", {"times": 3}, user=plain_user)

    assert outcome.decision == "executed"
    assert outcome.text == "pong pong pong"


@pytest.mark.django_db(transaction=True)
async def test_adispatch_awaits_an_async_handler(plain_user):
    outcome = await adispatch("apong", {"times": 2}, user=plain_user, source="websocket")

    assert outcome.decision == "executed"
    assert outcome.text == "pong pong"
    entry = await AuditEntry.objects.aget(pk=outcome.audit_id)
    assert (entry.decision, entry.source, entry.user_id) == ("executed", "websocket", plain_user.pk)


@pytest.mark.django_db(transaction=True)
async def test_adispatch_runs_a_sync_handler(plain_user):
    outcome = await adispatch("ping", user=plain_user)

    assert outcome.decision == "executed"
    assert outcome.text == "pong for plain"
    assert await AuditEntry.objects.acount() == 1


@pytest.mark.django_db(transaction=True)
async def test_adispatch_runs_the_callers_then_in_the_calls_own_thread_once_audited(plain_user):
    seen: list[tuple[int | None, bool, int]] = []

    def then(outcome):
        entry = AuditEntry.objects.get(pk=outcome.audit_id)  # (sync: no event loop here)
        seen.append((entry.pk, entry.decision == "executed", threading.get_ident()))

    outcome = await adispatch("ping", user=plain_user, then=then)

    assert seen == [(outcome.audit_id, True, seen[0][2])]
    assert seen[0][2] != threading.get_ident()


@pytest.mark.django_db(transaction=True)
async def test_a_failing_then_leaves_the_call_done_and_audited(plain_user, caplog):
    def then(outcome):
        raise RuntimeError("the caller's own work broke")

    with caplog.at_level(logging.ERROR, logger="assistant.dispatch"):
        outcome = await adispatch("ping", user=plain_user, then=then)

    assert (outcome.decision, outcome.text) == ("executed", "pong for plain")
    assert [entry.decision async for entry in AuditEntry.objects.all()] == ["executed"]
    assert "A caller's work after ping failed" in caplog.text


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("operation", "entities", "decision", "code"),
    [
        ("list_orders", {}, "unknown", "unknown_operation"),  # (no part in orders: hidden)
        ("echo_types", {}, "invalid", "invalid_entities"),
        ("nothing_here", {}, "unknown", "unknown_operation"),
        ("explode", {}, "failed", "tool_failed"),
        ("forbid", {}, "denied", "permission_denied"),
    ],
)
async def test_adispatch_audits_every_refusal_once(plain_user, operation, entities, decision, code):
    outcome = await adispatch(operation, entities, user=plain_user)

    assert (outcome.decision, outcome.code) == (decision, code)
    audited = "denied" if operation == "list_orders" else decision
    assert [entry.decision async for entry in AuditEntry.objects.all()] == [audited]


@pytest.mark.django_db(transaction=True)
async def test_adispatch_opens_a_pending_action_for_an_object_checked_tool(clerk):
    order = await Order.objects.acreate(reference="ORD-9")

    outcome = await adispatch("approve_order", {"order_id": order.pk}, user=clerk)

    assert outcome.decision == "confirmation_requested"
    assert outcome.status == 202
    action = await PendingAction.objects.aget(user=clerk)
    assert action == outcome.pending_action
    assert (await Order.objects.aget(pk=order.pk)).approvals == 0
    entry = await AuditEntry.objects.aget(pk=outcome.audit_id)
    assert entry.pending_action_id == action.pk
