"""Pending actions: owned, bound to their arguments, expiring, and run exactly once."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db import connection
from django.utils import timezone
from guardian.shortcuts import assign_perm, remove_perm

from assistant.dispatch.confirmation import aconfirm_action, cancel_action, confirm_action
from assistant.dispatch.door import adispatch, dispatch
from assistant.exceptions import ActionNotFound, AlreadyDecided
from assistant.models import AuditEntry, PendingAction, entities_digest
from tests.testapp.models import Order


def request_approval(user, order, **entities):
    outcome = dispatch("approve_order", {"order_id": order.pk, **entities}, user=user)
    assert outcome.decision == "confirmation_requested"
    return outcome.pending_action


def approvals(order):
    return Order.objects.get(pk=order.pk).approvals


def decisions_for(action):
    return list(
        AuditEntry.objects.filter(pending_action=action)
        .order_by("id")
        .values_list("decision", flat=True)
    )


@pytest.mark.django_db
def test_requesting_opens_an_owned_pending_action_and_runs_nothing(clerk, order):
    outcome = dispatch("approve_order", {"order_id": order.pk, "note": "rush"}, user=clerk)

    assert outcome.decision == "confirmation_requested"
    assert outcome.status == 202
    action = outcome.pending_action
    assert action.user == clerk
    assert action.operation == "approve_order"
    assert action.status == "pending"
    assert action.entities == {"order_id": order.pk, "note": "rush"}
    assert outcome.text == f"Approve an order (order_id: {order.pk}, note: “rush”)"
    assert approvals(order) == 0
    assert decisions_for(action) == ["confirmation_requested"]


@pytest.mark.django_db
def test_the_digest_binds_the_validated_entities(clerk, order):
    # 3.0 validates to the integer 3: the action is bound to what will run, not what was sent.
    outcome = dispatch("approve_order", {"order_id": float(order.pk)}, user=clerk)

    action = PendingAction.objects.get(pk=outcome.pending_action.pk)
    assert action.entities == {"order_id": order.pk}
    assert type(action.entities["order_id"]) is int
    assert action.entities_digest == entities_digest({"order_id": order.pk})
    assert action.entities_digest != entities_digest({"order_id": order.pk + 1})


@pytest.mark.django_db
def test_the_action_expires_after_the_configured_ttl(clerk, order, settings):
    settings.ASSISTANT = {**settings.ASSISTANT, "CONFIRMATION_TTL": 90}

    action = request_approval(clerk, order)

    assert action.expires_at - action.created_at == timedelta(seconds=90)
    assert not action.is_expired


@pytest.mark.django_db
def test_the_default_ttl_is_ten_minutes(clerk, order, settings):
    settings.ASSISTANT = {"RESOURCES": {"orders": "testapp.Order"}}

    action = request_approval(clerk, order)

    assert action.expires_at - action.created_at == timedelta(minutes=10)


@pytest.mark.django_db
def test_confirming_runs_the_tool_once(clerk, order):
    action = request_approval(clerk, order)

    outcome = confirm_action(action.pk, user=clerk, source="cli")

    assert outcome.decision == "confirmed"
    assert outcome.ok
    assert outcome.status == 200
    assert outcome.text == "Approved ORD-1"
    assert outcome.result.actions == [{"type": "approved", "id": order.pk}]
    assert approvals(order) == 1
    action.refresh_from_db()
    assert action.status == "confirmed"
    assert action.decided_by == clerk
    assert action.decided_at is not None
    assert decisions_for(action) == ["confirmation_requested", "confirmed"]
    assert AuditEntry.objects.get(pk=outcome.audit_id).source == "cli"


@pytest.mark.django_db
def test_a_second_confirmation_is_refused(clerk, order):
    action = request_approval(clerk, order)
    confirm_action(action.pk, user=clerk)

    with pytest.raises(AlreadyDecided) as refused:
        confirm_action(action.pk, user=clerk)

    assert refused.value.code == "already_decided"
    assert refused.value.status == 409
    assert approvals(order) == 1
    assert decisions_for(action) == ["confirmation_requested", "confirmed"]


@pytest.mark.django_db
def test_someone_elses_action_is_not_found(clerk, superuser, make_user, order):
    action = request_approval(clerk, order)
    colleague = make_user("colleague", "testapp.approve_order")

    for stranger in (colleague, superuser):
        with pytest.raises(ActionNotFound) as missing:
            confirm_action(action.pk, user=stranger)
        assert missing.value.code == "not_found"
        assert missing.value.status == 404
        with pytest.raises(ActionNotFound):
            cancel_action(action.pk, user=stranger)

    action.refresh_from_db()
    assert action.status == "pending"
    assert approvals(order) == 0


@pytest.mark.django_db
def test_an_unknown_action_id_is_not_found(clerk):
    with pytest.raises(ActionNotFound):
        confirm_action("6f1c1d0e-0000-4000-8000-000000000000", user=clerk)


@pytest.mark.django_db
def test_an_expired_action_does_not_run(clerk, order):
    action = request_approval(clerk, order)
    PendingAction.objects.filter(pk=action.pk).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )

    outcome = confirm_action(action.pk, user=clerk)

    assert outcome.decision == "expired"
    assert outcome.code == "expired"
    assert outcome.status == 410
    assert approvals(order) == 0
    action.refresh_from_db()
    assert action.status == "expired"
    assert decisions_for(action) == ["confirmation_requested", "expired"]


@pytest.mark.django_db
def test_an_expired_action_cannot_be_confirmed_later_either(clerk, order):
    action = request_approval(clerk, order)
    PendingAction.objects.filter(pk=action.pk).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    confirm_action(action.pk, user=clerk)

    again = confirm_action(action.pk, user=clerk)

    assert again.code == "expired"
    assert approvals(order) == 0


@pytest.mark.django_db
def test_cancelling_refuses_the_action_for_good(clerk, order):
    action = request_approval(clerk, order)

    outcome = cancel_action(action.pk, user=clerk)

    assert outcome.decision == "cancelled"
    assert AuditEntry.objects.get(pk=outcome.audit_id).decision == "cancelled"
    with pytest.raises(AlreadyDecided):
        confirm_action(action.pk, user=clerk)
    with pytest.raises(AlreadyDecided):
        cancel_action(action.pk, user=clerk)
    assert approvals(order) == 0
    action.refresh_from_db()
    assert action.status == "cancelled"
    assert decisions_for(action) == ["confirmation_requested", "cancelled"]


@pytest.mark.django_db
def test_confirming_rechecks_a_revoked_global_permission(clerk, order):
    action = request_approval(clerk, order)
    clerk.user_permissions.remove(
        Permission.objects.get(content_type__app_label="testapp", codename="approve_order")
    )

    # The same user object as at request time: its cached permissions must not be trusted.
    outcome = confirm_action(action.pk, user=clerk)

    assert outcome.decision == "denied"
    assert outcome.code == "permission_denied"
    assert approvals(order) == 0
    assert decisions_for(action) == ["confirmation_requested", "denied"]


@pytest.mark.django_db
def test_confirming_rechecks_a_revoked_object_permission(make_user, order):
    olga = make_user("olga")
    assign_perm("testapp.approve_order", olga, order)
    olga = get_user_model().objects.get(pk=olga.pk)
    action = request_approval(olga, order)
    remove_perm("testapp.approve_order", olga, order)

    outcome = confirm_action(action.pk, user=olga)

    assert outcome.decision == "denied"
    assert approvals(order) == 0


@pytest.mark.django_db
def test_tampered_stored_entities_are_refused(clerk, order):
    other = Order.objects.create(reference="ORD-2")
    action = request_approval(clerk, order)
    PendingAction.objects.filter(pk=action.pk).update(entities={"order_id": other.pk})

    outcome = confirm_action(action.pk, user=clerk)

    assert outcome.decision == "invalid"
    assert outcome.code == "invalid_entities"
    assert approvals(order) == 0
    assert approvals(other) == 0


@pytest.mark.django_db
def test_a_dangerous_tool_always_asks_first(clerk, order):
    outcome = dispatch("cancel_order", {"order_id": order.pk}, user=clerk)

    assert outcome.decision == "confirmation_requested"
    assert Order.objects.get(pk=order.pk).status == "open"

    confirm_action(outcome.pending_action.pk, user=clerk)

    assert Order.objects.get(pk=order.pk).status == "cancelled"


@pytest.mark.django_db(transaction=True)
async def test_aconfirm_action_runs_the_tool_once(clerk):
    order = await Order.objects.acreate(reference="ORD-A")
    requested = await adispatch("approve_order", {"order_id": order.pk}, user=clerk)

    outcome = await aconfirm_action(requested.pending_action.pk, user=clerk)

    assert outcome.decision == "confirmed"
    assert outcome.text == "Approved ORD-A"
    assert (await Order.objects.aget(pk=order.pk)).approvals == 1
    with pytest.raises(AlreadyDecided):
        await aconfirm_action(requested.pending_action.pk, user=clerk)
    assert await AuditEntry.objects.filter(decision="confirmed").acount() == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_racing_confirmations_run_the_tool_exactly_once(clerk, order):
    action = request_approval(clerk, order)
    threads_count = 8
    barrier = threading.Barrier(threads_count)
    results: list[object] = []
    lock = threading.Lock()

    def confirm() -> None:
        try:
            user = get_user_model().objects.get(pk=clerk.pk)
            barrier.wait(timeout=10)
            try:
                result: object = confirm_action(action.pk, user=user)
            except AlreadyDecided as exc:
                result = exc
            except Exception as exc:  # anything else is a failure the assertions will show
                result = exc
            with lock:
                results.append(result)
        finally:
            connection.close()

    threads = [threading.Thread(target=confirm) for _ in range(threads_count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert len(results) == threads_count
    confirmed = [r for r in results if getattr(r, "decision", None) == "confirmed"]
    refused = [r for r in results if isinstance(r, AlreadyDecided)]
    assert len(confirmed) == 1, results
    assert len(refused) == threads_count - 1, results
    assert approvals(order) == 1
    assert AuditEntry.objects.filter(decision="confirmed").count() == 1
    assert decisions_for(action) == ["confirmation_requested", "confirmed"]
