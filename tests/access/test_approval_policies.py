"""Approval policies: who approves what, and what a confirmation must carry, on every surface."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.core.management import call_command
from django.test import override_settings

from assistant.access.approvals import Approval, policy_for
from assistant.checks import check_settings, policy_errors
from assistant.core.registry import registry
from assistant.dispatch.catalog import inventory_row
from assistant.dispatch.confirmation import aconfirm_action, confirm_action
from assistant.dispatch.door import adispatch, dispatch
from assistant.exceptions import SecondPersonRequired
from assistant.models import AuditEntry, Conversation, Message, PendingAction
from tests.approving import BASE, TWO_PERSON, approvals, ask, audit, policies, status_of
from tests.clients import API, client_for
from tests.sockets import kind, kinds, only, receive, receive_run, send
from tests.testapp.models import Order


def confirm(client: Any, action: PendingAction, **body: Any) -> Any:
    return client.post(f"{API}/actions/{action.pk}/confirm/", body, format="json")


def cancel(client: Any, action: PendingAction, **body: Any) -> Any:
    return client.post(f"{API}/actions/{action.pk}/cancel/", body, format="json")


@pytest.fixture
def lead(make_user: Any) -> Any:
    """A second person who may approve orders (and holds nothing else)."""
    return make_user("lead", "testapp.approve_order")


# -- which policy ------------------------------------------------------------------------------


def test_unset_the_declaration_decides_as_always(settings):
    settings.ASSISTANT = BASE

    assert policy_for(registry.get("approve_order")) == Approval(policy="confirm")
    assert policy_for(registry.get("cancel_order")) == Approval(policy="confirm")
    assert policy_for(registry.get("ping")) == Approval(policy="auto")


def test_an_operation_beats_its_risk_level(settings):
    policies(settings, guarded="confirm_with_reason", approve_order=TWO_PERSON, safe="confirm")

    assert policy_for(registry.get("approve_order")) == Approval(
        policy="two_person", permission="testapp.approve_order"
    )
    assert policy_for(registry.get("merge_orders")).policy == "confirm_with_reason"
    assert policy_for(registry.get("ping")).policy == "confirm"


def test_a_dangerous_tool_is_never_run_unasked(settings):
    policies(settings, dangerous="auto", cancel_order="auto")

    assert policy_for(registry.get("cancel_order")).policy == "confirm"


def test_the_inventory_shows_the_policy_in_force(settings):
    policies(settings, approve_order=TWO_PERSON, guarded="auto")

    assert inventory_row(registry.get("approve_order"))["approval_policy"] == "two_person"
    assert inventory_row(registry.get("merge_orders"))["approval_policy"] == "auto"
    assert inventory_row(registry.get("cancel_order"))["approval_policy"] == "confirm"


@pytest.mark.django_db
def test_the_capabilities_say_which_tools_ask(settings, clerk):
    policies(settings, approve_order="auto", list_orders="confirm")

    text = dispatch("show_capabilities", {}, user=clerk).text

    assert "- Approve order: Approve an order\n" in text + "\n"
    assert "- List orders: List orders, optionally by status (asks for confirmation)" in text


@pytest.mark.django_db
def test_auto_runs_without_asking(settings, clerk, order):
    policies(settings, approve_order="auto")

    outcome = dispatch("approve_order", {"order_id": order.pk}, user=clerk)

    assert (outcome.decision, outcome.status, outcome.text) == ("executed", 200, "Approved ORD-1")
    assert approvals(order) == 1
    assert not PendingAction.objects.exists()
    assert audit("approve_order") == [("executed", "clerk", "")]


@pytest.mark.django_db
def test_a_safe_tool_can_be_made_to_ask(settings, clerk):
    policies(settings, safe="confirm")

    outcome = dispatch("ping", {}, user=clerk)

    assert outcome.decision == "confirmation_requested"
    assert outcome.pending_action.policy == "confirm"


@pytest.mark.django_db
def test_the_pending_action_records_its_policy_and_shows_it(settings, clerk, order):
    policies(settings, approve_order=TWO_PERSON)

    action = ask(clerk, order)

    stored = PendingAction.objects.get(pk=action.pk)
    assert (stored.policy, stored.approver_permission) == ("two_person", "testapp.approve_order")
    assert stored.shown()["policy"] == "two_person"


# -- confirm (today's behaviour) ---------------------------------------------------------------


@pytest.mark.django_db
def test_confirm_needs_nothing_more(settings, clerk, order):
    policies(settings, approve_order="confirm")
    action = ask(clerk, order)

    response = confirm(client_for(clerk), action)

    assert response.status_code == 200
    assert response.json()["decision"] == "confirmed"
    assert approvals(order) == 1
    assert audit("approve_order") == [
        ("confirmation_requested", "clerk", ""),
        ("confirmed", "clerk", ""),
    ]


# -- confirm_with_reason -----------------------------------------------------------------------


@pytest.mark.parametrize("body", [{}, {"reason": ""}, {"reason": "   "}], ids=str)
@pytest.mark.django_db
def test_confirm_with_reason_refuses_a_confirmation_without_one(settings, clerk, order, body):
    policies(settings, guarded="confirm_with_reason")
    action = ask(clerk, order)

    response = confirm(client_for(clerk), action, **body)

    assert response.status_code == 400
    assert response.json()["code"] == "reason_required"
    assert response.json()["detail"]
    assert status_of(action) == "pending"
    assert approvals(order) == 0
    assert audit("approve_order") == [("confirmation_requested", "clerk", "")]


@pytest.mark.django_db
def test_confirm_with_reason_stores_the_reason_on_the_action_and_its_audit(settings, clerk, order):
    policies(settings, guarded="confirm_with_reason")
    action = ask(clerk, order)

    response = confirm(client_for(clerk), action, reason="  customer called  ")

    assert response.status_code == 200
    assert response.json()["decision"] == "confirmed"
    assert PendingAction.objects.get(pk=action.pk).reason == "customer called"
    assert audit("approve_order") == [
        ("confirmation_requested", "clerk", ""),
        ("confirmed", "clerk", "customer called"),
    ]


# Reasons that look like something to a program but show nothing to a person reading the audit.
INVISIBLE_REASONS = {
    "zero-width space": "\u200b",
    "invisible separator": "\u2063",
    "soft hyphen": "\u00ad",
    "byte order mark": "\ufeff",
    "bidi controls": "\u202e\u2066\u2069",
    "hangul filler": "\u3164",
    "a combining mark alone": "\u0301",
    "invisible among spaces": " \u200b\u00a0\u2063\t\u3000",
}


@pytest.mark.parametrize("reason", INVISIBLE_REASONS.values(), ids=INVISIBLE_REASONS.keys())
@pytest.mark.django_db
def test_confirm_with_reason_refuses_a_reason_with_nothing_visible(settings, clerk, order, reason):
    policies(settings, guarded="confirm_with_reason")
    action = ask(clerk, order)

    response = confirm(client_for(clerk), action, reason=reason)

    assert (response.status_code, response.json()["code"]) == (400, "reason_required")
    assert status_of(action) == "pending"
    assert approvals(order) == 0
    assert audit("approve_order") == [("confirmation_requested", "clerk", "")]


FULL_WIDTH_CUSTOMER = "\u200b\uff43\uff55\uff53\uff54\uff4f\uff4d\uff45\uff52"  # "customer"


@pytest.mark.django_db
def test_a_reason_is_stored_normalised(settings, clerk, order):
    policies(settings, guarded="confirm_with_reason")
    action = ask(clerk, order)

    response = confirm(
        client_for(clerk), action, reason=FULL_WIDTH_CUSTOMER + "\u00ad \u2063 called\ufeff"
    )

    assert response.status_code == 200
    assert PendingAction.objects.get(pk=action.pk).reason == "customer called"
    assert audit("approve_order")[-1] == ("confirmed", "clerk", "customer called")


@pytest.mark.django_db
def test_a_refusals_reason_is_stored_normalised_too(settings, clerk, order):
    action = ask(clerk, order)

    assert cancel(client_for(clerk), action, reason="wrong\u200b  order\u2063").status_code == 200

    assert PendingAction.objects.get(pk=action.pk).reason == "wrong order"
    assert audit("approve_order")[-1] == ("cancelled", "clerk", "wrong order")


@pytest.mark.django_db
def test_a_reason_that_is_not_text_is_a_bad_request(settings, clerk, order):
    policies(settings, guarded="confirm_with_reason")
    action = ask(clerk, order)

    response = confirm(client_for(clerk), action, reason={"why": "because"})

    assert response.status_code == 400
    assert response.json()["code"] == "invalid"
    assert status_of(action) == "pending"


@pytest.mark.django_db
def test_refusing_needs_no_reason_but_keeps_one(settings, clerk, order):
    policies(settings, guarded="confirm_with_reason")
    first, second = ask(clerk, order), ask(clerk, order)
    client = client_for(clerk)

    assert cancel(client, first).status_code == 200
    assert cancel(client, second, reason="wrong order").status_code == 200

    assert audit("approve_order")[2:] == [
        ("cancelled", "clerk", ""),
        ("cancelled", "clerk", "wrong order"),
    ]
    assert PendingAction.objects.get(pk=second.pk).reason == "wrong order"


# -- the confirm phrase (a dangerous action's deliberate second step) -------------------------


def phrased(user: Any, order: Order) -> PendingAction:
    return PendingAction.open(
        user=user,
        operation="approve_order",
        entities={"order_id": order.pk},
        ttl_seconds=600,
        confirm_phrase="ORD-1",
    )


@pytest.mark.parametrize("body", [{}, {"phrase": ""}, {"phrase": "ORD-2"}, {"phrase": "ORD 1"}])
@pytest.mark.django_db
def test_a_wrong_or_missing_phrase_is_refused(clerk, order, body):
    action = phrased(clerk, order)

    response = confirm(client_for(clerk), action, **body)

    assert response.status_code == 400
    assert response.json()["code"] == "phrase_mismatch"
    assert "ORD-1" in response.json()["detail"]
    assert status_of(action) == "pending"
    assert approvals(order) == 0
    assert audit("approve_order") == []


@pytest.mark.django_db
def test_the_phrase_is_compared_stripped_and_case_insensitively(clerk, order):
    action = phrased(clerk, order)

    response = confirm(client_for(clerk), action, phrase="  ord-1 ")

    assert response.status_code == 200
    assert response.json()["decision"] == "confirmed"
    assert approvals(order) == 1


@pytest.mark.parametrize(
    "typed",
    ["ORD\u200b-1", "\u2063ORD-\u00ad1\ufeff", "\uff2f\uff32\uff24\uff0d\uff11", "\u202eord-1"],
    ids=["zero-width space", "invisible separator and soft hyphen", "full-width", "bidi control"],
)
@pytest.mark.django_db
def test_the_phrase_is_compared_normalised(clerk, order, typed):
    action = phrased(clerk, order)

    response = confirm(client_for(clerk), action, phrase=typed)

    assert response.status_code == 200
    assert response.json()["decision"] == "confirmed"
    assert approvals(order) == 1


@pytest.mark.django_db
def test_an_invisible_character_does_not_stand_for_a_visible_one(clerk, order):
    action = phrased(clerk, order)

    response = confirm(client_for(clerk), action, phrase="ORD\u200b1")

    assert (response.status_code, response.json()["code"]) == (400, "phrase_mismatch")
    assert approvals(order) == 0


@pytest.mark.django_db
def test_without_a_phrase_none_is_asked_for(clerk, order):
    action = ask(clerk, order)

    assert confirm(client_for(clerk), action, phrase="anything").status_code == 200


# -- two_person --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_two_person_the_requester_cannot_approve_their_own(settings, clerk, order):
    policies(settings, approve_order=TWO_PERSON)
    action = ask(clerk, order)

    response = confirm(client_for(clerk), action)

    assert response.status_code == 403
    assert response.json()["code"] == "second_person_required"
    assert status_of(action) == "pending"
    assert approvals(order) == 0
    assert audit("approve_order") == [("confirmation_requested", "clerk", "")]


@pytest.mark.django_db
def test_two_person_a_second_person_with_the_permission_approves(settings, clerk, lead, order):
    policies(settings, approve_order=TWO_PERSON)
    action = ask(clerk, order)

    response = confirm(client_for(lead), action)

    assert response.status_code == 200
    assert response.json()["decision"] == "confirmed"
    assert approvals(order) == 1
    decided = PendingAction.objects.get(pk=action.pk)
    assert (decided.status, decided.user, decided.decided_by) == ("confirmed", clerk, lead)
    assert audit("approve_order") == [
        ("confirmation_requested", "clerk", ""),
        ("confirmed", "clerk", "approved by lead"),
    ]
    entry = AuditEntry.objects.get(pk=response.json()["audit_id"])
    assert (entry.user, entry.pending_action_id) == (clerk, action.pk)


@pytest.mark.django_db
def test_two_person_the_handler_runs_as_the_requester(settings, clerk, lead):
    policies(settings, ping={"policy": "two_person", "permission": "testapp.approve_order"})
    action = dispatch("ping", {}, user=clerk).pending_action

    outcome = confirm_action(action.pk, user=lead, reason="checked")

    assert (outcome.decision, outcome.text) == ("confirmed", "pong for clerk")
    assert audit("ping")[-1] == ("confirmed", "clerk", "approved by lead: checked")


@pytest.mark.django_db
def test_two_person_with_a_reason_asks_both(settings, clerk, lead, order):
    policies(settings, approve_order=TWO_PERSON)
    action = ask(clerk, order)
    PendingAction.objects.filter(pk=action.pk).update(confirm_phrase="ORD-1")

    refused = confirm(client_for(lead), action)
    approved = confirm(client_for(lead), action, phrase="ord-1", reason="month end")

    assert (refused.status_code, refused.json()["code"]) == (400, "phrase_mismatch")
    assert approved.status_code == 200
    assert audit("approve_order")[-1] == ("confirmed", "clerk", "approved by lead: month end")


@pytest.mark.django_db
def test_two_person_anyone_else_is_told_the_action_does_not_exist(
    settings, clerk, make_user, order
):
    policies(settings, approve_order=TWO_PERSON)
    action = ask(clerk, order)
    stranger = make_user("stranger", "testapp.view_order", "testapp.change_order")
    missing = client_for(stranger).post(
        f"{API}/actions/6f1c1d0e-0000-4000-8000-000000000000/confirm/", {}, format="json"
    )

    for response in (confirm(client_for(stranger), action), cancel(client_for(stranger), action)):
        assert response.status_code == 404
        assert response.json() == missing.json()
        assert response.json()["code"] == "not_found"

    assert status_of(action) == "pending"
    assert audit("approve_order") == [("confirmation_requested", "clerk", "")]


@pytest.mark.django_db
def test_without_two_person_a_holder_of_the_permission_is_a_stranger(settings, clerk, lead, order):
    policies(settings, approve_order="confirm")
    action = ask(clerk, order)

    assert confirm(client_for(lead), action).status_code == 404
    assert status_of(action) == "pending"


@pytest.mark.django_db
def test_two_person_the_requester_may_still_cancel(settings, clerk, order):
    policies(settings, approve_order=TWO_PERSON)
    action = ask(clerk, order)

    response = cancel(client_for(clerk), action)

    assert response.status_code == 200
    assert response.json()["decision"] == "cancelled"
    assert PendingAction.objects.get(pk=action.pk).decided_by == clerk
    assert audit("approve_order")[-1] == ("cancelled", "clerk", "")


@pytest.mark.django_db
def test_two_person_the_approver_may_refuse(settings, clerk, lead, order):
    policies(settings, approve_order=TWO_PERSON)
    action = ask(clerk, order)

    response = cancel(client_for(lead), action, reason="not this month")

    assert response.status_code == 200
    decided = PendingAction.objects.get(pk=action.pk)
    assert (decided.status, decided.decided_by) == ("cancelled", lead)
    assert approvals(order) == 0
    assert audit("approve_order")[-1] == ("cancelled", "clerk", "refused by lead: not this month")


@pytest.mark.django_db
def test_two_person_the_requester_still_needs_the_tools_permissions(settings, clerk, lead, order):
    policies(settings, approve_order=TWO_PERSON)
    action = ask(clerk, order)
    clerk.user_permissions.clear()

    outcome = confirm_action(action.pk, user=lead)

    assert (outcome.decision, outcome.code) == ("denied", "permission_denied")
    assert approvals(order) == 0
    assert audit("approve_order")[-1] == ("denied", "clerk", "")


@pytest.mark.django_db
def test_two_person_a_second_approval_is_already_decided(settings, clerk, lead, make_user, order):
    policies(settings, approve_order=TWO_PERSON)
    action = ask(clerk, order)
    other = make_user("other-lead", "testapp.approve_order")
    confirm_action(action.pk, user=lead)

    response = confirm(client_for(other), action)

    assert (response.status_code, response.json()["code"]) == (409, "already_decided")
    assert approvals(order) == 1


@pytest.mark.django_db(transaction=True)
async def test_an_async_tool_confirmed_from_the_loop_keeps_the_reason(settings, clerk, lead):
    policies(settings, apong={"policy": "two_person", "permission": "testapp.approve_order"})
    action = (await adispatch("apong", {"times": 2}, user=clerk)).pending_action

    with pytest.raises(SecondPersonRequired):
        await aconfirm_action(action.pk, user=clerk, reason="mine")
    outcome = await aconfirm_action(action.pk, user=lead, reason="fine")

    assert (outcome.decision, outcome.text) == ("confirmed", "pong pong")
    assert await sync_to_async(audit)("apong") == [
        ("confirmation_requested", "clerk", ""),
        ("confirmed", "clerk", "approved by lead: fine"),
    ]


@pytest.mark.django_db
def test_an_approver_can_list_what_awaits_their_approval(settings, clerk, lead, make_user, order):
    policies(settings, approve_order=TWO_PERSON)
    action = ask(clerk, order)
    policies(settings)
    ask(clerk, order)  # a plain confirm: only clerk's to answer
    stranger = make_user("stranger", "testapp.view_order")

    def listed(user: Any, query: str = "?awaiting=approval") -> list[str]:
        response = client_for(user).get(f"{API}/actions/{query}")
        assert response.status_code == 200
        return [row["id"] for row in response.json()["results"]]

    assert listed(lead) == [str(action.pk)]
    assert listed(stranger) == listed(clerk) == []
    assert len(listed(clerk, "")) == 2
    assert listed(lead, "") == []
    response = client_for(lead).get(f"{API}/actions/?awaiting=everything")
    assert (response.status_code, response.json()["code"]) == (400, "invalid")
    confirm_action(action.pk, user=lead)
    assert listed(lead) == []


# -- the command line ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_cli_passes_the_reason_and_the_phrase(settings, clerk, order):
    policies(settings, guarded="confirm_with_reason")
    action = phrased(clerk, order)
    PendingAction.objects.filter(pk=action.pk).update(policy="confirm_with_reason")
    out = StringIO()

    call_command(
        "assistant_call",
        "--confirm",
        str(action.pk),
        "--reason",
        "audit",
        "--phrase",
        "ORD-1",
        "--user",
        "clerk",
        stdout=out,
    )

    assert "[approve_order: confirmed]" in out.getvalue()
    assert audit("approve_order") == [("confirmed", "clerk", "audit")]


# -- the websocket -------------------------------------------------------------------------------


async def answered_with_error(socket: Any, code: str) -> None:
    error = await receive(socket)
    assert kind(error) == "CUSTOM assistant.error"
    assert error["value"]["code"] == code
    assert error["value"]["message"]
    assert await socket.receive_nothing(timeout=0.1)


@pytest.mark.django_db(transaction=True)
async def test_websocket_auto_runs_without_an_interrupt(settings, open_socket, clerk):
    policies(settings, approve_order="auto")
    order = await Order.objects.acreate(reference="ORD-1")
    socket = await open_socket(clerk)

    await send(socket, type="message", text=f"approve order {order.pk}")
    frames = await receive_run(socket)

    assert only(frames, "CUSTOM assistant.outcome")["value"]["decision"] == "executed"
    assert frames[-1].get("outcome") is None
    assert (await Order.objects.aget()).approvals == 1
    assert not await PendingAction.objects.aexists()


@pytest.mark.django_db(transaction=True)
async def test_websocket_confirm_with_reason(settings, open_socket, clerk):
    policies(settings, guarded="confirm_with_reason")
    order = await Order.objects.acreate(reference="ORD-1")
    action = (await adispatch("approve_order", {"order_id": order.pk}, user=clerk)).pending_action
    socket = await open_socket(clerk)
    await receive(socket)  # the pending actions, resent on connect

    await send(socket, type="confirm", action=str(action.pk))
    await answered_with_error(socket, "reason_required")
    await send(socket, type="confirm", action=str(action.pk), reason=["no"])
    await answered_with_error(socket, "bad_frame")

    assert await Conversation.objects.acount() == 0
    assert (await PendingAction.objects.aget()).status == "pending"

    await send(socket, type="confirm", action=str(action.pk), reason="customer called")
    frames = await receive_run(socket)

    assert only(frames, "CUSTOM assistant.outcome")["value"]["decision"] == "confirmed"
    assert (await PendingAction.objects.aget()).reason == "customer called"
    assert await sync_to_async(audit)("approve_order") == [
        ("confirmation_requested", "clerk", ""),
        ("confirmed", "clerk", "customer called"),
    ]


@pytest.mark.parametrize("reason", INVISIBLE_REASONS.values(), ids=INVISIBLE_REASONS.keys())
@pytest.mark.django_db(transaction=True)
async def test_websocket_refuses_a_reason_with_nothing_visible(
    settings, open_socket, clerk, reason
):
    policies(settings, guarded="confirm_with_reason")
    order = await Order.objects.acreate(reference="ORD-1")
    action = (await adispatch("approve_order", {"order_id": order.pk}, user=clerk)).pending_action
    socket = await open_socket(clerk)
    await receive(socket)  # the pending actions, resent on connect

    await send(socket, type="confirm", action=str(action.pk), reason=reason)

    await answered_with_error(socket, "reason_required")
    assert (await PendingAction.objects.aget()).status == "pending"
    assert (await Order.objects.aget()).approvals == 0
    assert await sync_to_async(audit)("approve_order") == [("confirmation_requested", "clerk", "")]


@pytest.mark.django_db(transaction=True)
async def test_websocket_the_phrase(open_socket, clerk):
    order = await Order.objects.acreate(reference="ORD-1")
    action = await sync_to_async(phrased)(clerk, order)
    socket = await open_socket(clerk)
    await receive(socket)

    await send(socket, type="confirm", action=str(action.pk), phrase="ORD-2")
    await answered_with_error(socket, "phrase_mismatch")
    assert (await Order.objects.aget()).approvals == 0

    await send(socket, type="confirm", action=str(action.pk), phrase="ord-1")
    frames = await receive_run(socket)

    assert only(frames, "CUSTOM assistant.outcome")["value"]["decision"] == "confirmed"
    assert (await Order.objects.aget()).approvals == 1


@pytest.mark.django_db(transaction=True)
async def test_websocket_two_person(settings, open_socket, clerk, lead, make_user):
    policies(settings, approve_order=TWO_PERSON)
    order = await Order.objects.acreate(reference="ORD-1")
    requester = await open_socket(clerk)
    await send(requester, type="message", text=f"approve order {order.pk}")
    asked = await receive_run(requester)
    (interrupt,) = asked[-1]["outcome"]["interrupts"]
    stranger = await sync_to_async(make_user)("stranger", "testapp.view_order")
    messages = await Message.objects.acount()

    await send(requester, type="confirm", action=interrupt["id"])
    await answered_with_error(requester, "second_person_required")
    elsewhere = await open_socket(stranger)
    await send(elsewhere, type="confirm", action=interrupt["id"])
    await answered_with_error(elsewhere, "not_found")
    await send(elsewhere, type="reject", action=interrupt["id"])
    await answered_with_error(elsewhere, "not_found")
    assert await Message.objects.acount() == messages
    assert (await PendingAction.objects.aget()).status == "pending"

    approver = await open_socket(lead)
    # on connect the approver is told one action waits for them (their inbox's count)
    hello = await receive(approver)
    assert (hello["name"], hello["value"]["waiting"]) == ("assistant.pending_actions", {"": 1})
    await send(approver, type="confirm", action=interrupt["id"], reason="month end")
    frames = await receive_run(approver)

    assert kinds(frames)[0] == "RUN_STARTED"
    assert only(frames, "CUSTOM assistant.outcome")["value"]["decision"] == "confirmed"
    # The approver's run is in a conversation of their own, not the requester's.
    assert frames[0]["threadId"] != asked[0]["threadId"]
    own = await Conversation.objects.aget(pk=frames[0]["threadId"])
    assert own.user_id == lead.pk
    assert (await Order.objects.aget()).approvals == 1
    decided = await PendingAction.objects.select_related("decided_by").aget()
    assert (decided.status, decided.decided_by) == ("confirmed", lead)
    assert await sync_to_async(audit)("approve_order") == [
        ("confirmation_requested", "clerk", ""),
        ("confirmed", "clerk", "approved by lead: month end"),
    ]


# -- the system check ----------------------------------------------------------------------------


def policy_ids(**configured: Any) -> list[str]:
    with override_settings(ASSISTANT={**BASE, "APPROVAL_POLICIES": configured}):
        return sorted(message.id for message in [*check_settings(), *policy_errors(registry)])


def test_a_sound_configuration_passes():
    assert (
        policy_ids(
            safe="auto",
            guarded="confirm_with_reason",
            dangerous={"policy": "two_person", "permission": "testapp.approve_order"},
            approve_order={"policy": "confirm"},
        )
        == []
    )


def test_e011_a_policy_for_an_operation_that_does_not_exist():
    with override_settings(ASSISTANT={**BASE, "APPROVAL_POLICIES": {"aprove_order": "confirm"}}):
        (message,) = policy_errors(registry)

    assert message.id == "assistant.E011"
    assert "'approve_order'" in message.hint


def test_e012_an_unknown_policy_name():
    assert policy_ids(guarded="four_eyes") == ["assistant.E012"]
    assert policy_ids(approve_order={"policy": "ask"}) == ["assistant.E012"]


@pytest.mark.parametrize(
    "entry",
    [
        "two_person",
        {"policy": "two_person"},
        {"policy": "two_person", "permission": ""},
        {"policy": "two_person", "permission": "testapp.fly_order"},
        {"policy": "two_person", "permission": "nowhere.approve"},
    ],
    ids=str,
)
def test_e013_two_person_without_a_real_permission(entry):
    assert policy_ids(approve_order=entry) == ["assistant.E013"]


@pytest.mark.parametrize("configured", [{"dangerous": "auto"}, {"cancel_order": "auto"}], ids=str)
def test_e014_a_dangerous_tool_configured_to_run_unasked(configured):
    dangerous = [tool.operation for tool in registry if tool.risk_level == "dangerous"]
    expected = dangerous if "dangerous" in configured else ["cancel_order"]
    with override_settings(ASSISTANT={**BASE, "APPROVAL_POLICIES": configured}):
        messages = list(policy_errors(registry))

    assert [message.id for message in messages] == ["assistant.E014"] * len(expected)
    assert [message.obj for message in messages] == [registry.get(op).handler for op in expected]
    assert all(message.hint for message in messages)


def test_e014_not_when_the_operation_itself_asks():
    assert policy_ids(dangerous="confirm", cancel_order="confirm_with_reason") == []


@pytest.mark.parametrize(
    "value",
    [
        ["confirm"],
        {"guarded": 3},
        {"guarded": {"permission": "a.b"}},
        {"guarded": {"policy": "confirm", "who": 1}},
    ],
    ids=str,
)
def test_e002_a_malformed_approval_policies_setting(value):
    with override_settings(ASSISTANT={**BASE, "APPROVAL_POLICIES": value}):
        assert sorted(m.id for m in [*check_settings(), *policy_errors(registry)]) == [
            "assistant.E002"
        ]
