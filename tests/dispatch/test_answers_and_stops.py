"""Who answers an action is read as they are now; a bounded token answers only within its
ceiling; a call stopped at any step is audited and its action keeps what it came to; the stdio
MCP server reads its user afresh for each request."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async

from assistant.dispatch.door import dispatch
from assistant.models import AuditEntry, Conversation, PendingAction
from tests.approving import BASE, TWO_PERSON
from tests.sockets import kind, receive, send
from tests.testapp.models import Order


def _ask_two_person(user: Any, order: Order) -> PendingAction:
    outcome = dispatch("approve_order", {"order_id": order.pk}, user=user)
    assert outcome.decision == "confirmation_requested"
    return outcome.pending_action


def _revoke_all(user: Any) -> None:
    type(user).objects.get(pk=user.pk).user_permissions.clear()  # (m2m signal: access_changed)


@pytest.mark.django_db(transaction=True)
async def test_a_revoked_approver_cannot_approve_over_an_open_socket(
    settings, open_socket, clerk, make_user
):
    """An approver whose permission was revoked while their socket was open approves nothing
    on it: their permissions are read afresh at the answer, not taken from the connect's."""
    settings.ASSISTANT = {**BASE, "APPROVAL_POLICIES": {"approve_order": TWO_PERSON}}
    order = await Order.objects.acreate(reference="ORD-1")
    lead = await sync_to_async(make_user)("lead", "testapp.approve_order")
    action = await sync_to_async(_ask_two_person)(clerk, order)

    approver = await open_socket(lead)
    hello = await receive(approver)  # told one action waits for them
    assert hello["value"]["waiting"] == {"": 1}

    await sync_to_async(_revoke_all)(lead)  # lead may approve no more

    await send(approver, type="confirm", action=str(action.pk))
    answer = await receive(approver)
    assert kind(answer) == "CUSTOM assistant.error", answer
    assert answer["value"]["code"] == "not_found"
    assert (await PendingAction.objects.aget(pk=action.pk)).status == "pending"
    assert not await AuditEntry.objects.filter(decision="confirmed").aexists()


def _deactivate(user: Any) -> None:
    fresh = type(user).objects.get(pk=user.pk)
    fresh.is_active = False
    fresh.save()  # (post_save with the flag: access_changed)


@pytest.mark.django_db(transaction=True)
async def test_a_deactivated_approver_cannot_approve_over_an_open_socket(
    settings, open_socket, clerk, make_user
):
    """A second person deactivated while their socket was open approves nothing on it."""
    settings.ASSISTANT = {**BASE, "APPROVAL_POLICIES": {"approve_order": TWO_PERSON}}
    order = await Order.objects.acreate(reference="ORD-1")
    lead = await sync_to_async(make_user)("lead", "testapp.approve_order")
    action = await sync_to_async(_ask_two_person)(clerk, order)

    approver = await open_socket(lead)
    await receive(approver)  # the waiting count
    await sync_to_async(_deactivate)(lead)

    await send(approver, type="confirm", action=str(action.pk))
    answer = await receive(approver)
    assert kind(answer) == "CUSTOM assistant.error", answer
    assert answer["value"]["code"] == "not_found"
    assert (await PendingAction.objects.aget(pk=action.pk)).status == "pending"


@pytest.mark.django_db(transaction=True)
async def test_a_revoked_approver_is_no_longer_counted_others_approvals_on_resume(
    settings, open_socket, clerk, make_user
):
    """The counts a resume sends read the approver's permissions as they are now."""
    settings.ASSISTANT = {**BASE, "APPROVAL_POLICIES": {"approve_order": TWO_PERSON}}
    order = await Order.objects.acreate(reference="ORD-1")
    lead = await sync_to_async(make_user)("lead", "testapp.approve_order")
    await sync_to_async(_ask_two_person)(clerk, order)
    own = await Conversation.objects.acreate(user=lead, title="mine")

    approver = await open_socket(lead)
    assert (await receive(approver))["value"]["waiting"] == {"": 1}
    await sync_to_async(_revoke_all)(lead)

    await send(approver, type="resume", conversation=str(own.pk))
    resumed = [kind(await receive(approver)) for _ in range(2)]
    assert resumed == ["MESSAGES_SNAPSHOT", "CUSTOM assistant.resumed"]


# -- MCP: a call cancelled while its toolset starts --------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_mcp_call_cancelled_while_its_toolset_starts_is_audited(
    asgi_live_server, mode, diagnostician, monkeypatch
):
    """An MCP call cancelled while its toolset is still starting is audited ``cancelled``
    (``in_loop``: a stop at any step, not only while the handler runs)."""
    import asyncio

    from assistant.access import tokens
    from tests.mcp_clients import mcp_client
    from tests.testapp.assistant_tools import Sluggish

    monkeypatch.setattr(Sluggish, "delay", 3.0)
    _, secret = await sync_to_async(tokens.issue)(diagnostician, name="laptop")
    async with mcp_client(asgi_live_server, secret, mode) as client:
        call = asyncio.ensure_future(client.call_tool("sluggish_tool", {}))
        await asyncio.sleep(1.0)  # the call is waiting for Sluggish.on_start
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        await asyncio.sleep(4.0)  # long past the start: whatever is written is written
    entries = [
        entry.decision
        async for entry in AuditEntry.objects.filter(operation="sluggish_tool").order_by("id")
    ]
    assert entries == ["cancelled"]


# -- a bounded token refuses actions outside its ceiling ---------------------------------------


@pytest.mark.django_db
def test_a_bounded_token_cannot_refuse_an_action_of_a_tool_beyond_its_ceiling(clerk):
    """A token bounded to safe tools cannot refuse a guarded tool's action over REST either:
    403 ``token_scope``, and the action keeps waiting."""
    from rest_framework.test import APIClient

    from assistant.access.tokens import issue
    from tests.clients import API

    order = Order.objects.create(reference="A-1")
    outcome = dispatch("approve_order", {"order_id": order.pk}, user=clerk)
    action = outcome.pending_action
    _, secret = issue(clerk, name="bot", max_risk="safe")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")

    response = client.post(f"{API}/actions/{action.pk}/cancel/", {}, format="json")

    assert response.status_code == 403, response.json()
    assert response.json()["code"] == "token_scope"
    assert PendingAction.objects.get(pk=action.pk).status == "pending"


# -- MCP: the retry of an approved call whose run was stopped ----------------------------------


@pytest.mark.django_db(transaction=True)
async def test_mcp_retry_after_a_stopped_approved_run_is_not_waiting_forever(
    asgi_live_server, plain_user, settings
):
    """An approved run stopped while it ran leaves its action with what it came to: the MCP
    retry is told ``cancelled`` instead of waiting for an approval for ever."""
    import asyncio

    from assistant.access import tokens
    from assistant.dispatch.calls import CallContext
    from assistant.dispatch.confirmation import aconfirm_action
    from tests.mcp_clients import mcp_client

    settings.ASSISTANT = {**settings.ASSISTANT, "APPROVAL_POLICIES": {"slow": "confirm"}}
    _, secret = await sync_to_async(tokens.issue)(plain_user, name="laptop")
    async with mcp_client(asgi_live_server, secret) as client:
        first = await client.call_tool("slow", {"seconds": 3})
        waiting = first.structured_content
        assert waiting["status"] == "confirmation_requested"

        # the user approves on the approvals page, then presses Stop while it runs
        approving = asyncio.ensure_future(
            aconfirm_action(waiting["action_id"], context=CallContext(user=plain_user))
        )
        await asyncio.sleep(0.5)
        approving.cancel()
        with pytest.raises(asyncio.CancelledError):
            await approving
        action = await PendingAction.objects.aget(pk=waiting["action_id"])
        assert action.status == "confirmed"
        assert [
            e.decision async for e in AuditEntry.objects.filter(operation="slow").order_by("id")
        ] == [
            "confirmation_requested",
            "cancelled",
        ]

        retried = await client.call_tool("slow", {"seconds": 3})
    assert retried.structured_content.get("status") != "confirmation_requested", retried
    assert retried.is_error
    assert retried.structured_content["code"] == "cancelled"


# -- MCP stdio: each request reads its user afresh ---------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_stdio_mcp_server_notices_a_revoked_permission(reader):
    """``manage.py assistant_mcp --user NAME`` holds one user object for its life: a permission
    revoked meanwhile hides and refuses the tool on the next request."""
    from mcp import Client

    from assistant.access.tokens import Bearer
    from assistant.surfaces.mcp.callers import Caller
    from assistant.surfaces.mcp.server import build_server, stdio_lifespan

    User = type(reader)
    user = await User.objects.aget(username="reader")  # as the command loads it
    caller = Caller(bearer=Bearer(user=user, kind="local", name="stdio"))
    server = build_server(lifespan=stdio_lifespan(caller))
    async with Client(server, mode="legacy") as client:
        first = await client.call_tool("list_orders", {})
        assert not first.is_error

        await sync_to_async(_revoke_all)(reader)  # reader may read orders no more

        listed = [tool.name for tool in (await client.list_tools()).tools]
        again = await client.call_tool("list_orders", {})
    assert "list_orders" not in listed
    assert again.is_error
    assert again.structured_content["code"] == "unknown_operation"  # no tool of orders left


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("approved", [True, False])
def test_a_bounded_token_answers_no_ag_ui_interrupt_beyond_its_ceiling(
    asgi_live_server, clerk, approved
):
    """AG-UI (``AgentView.applies_ceiling``): a read-only personal token resuming a thread
    neither approves nor refuses a dangerous action it could not call: the run says
    ``token_scope`` (audited denied) and the action keeps waiting."""
    from assistant.access.tokens import issue
    from tests.agui_clients import Agent, ask_to_cancel, resume

    order = Order.objects.create(reference="ORD-1")
    asked, events = ask_to_cancel(Agent(asgi_live_server, clerk), order)  # a DRF token: no ceiling
    interrupt_id = events[-1].outcome.interrupts[0].id
    bounded = Agent.__new__(Agent)
    bounded.url = f"{asgi_live_server}/assistant/agui/"
    bounded.headers = {"Authorization": f"Bearer {issue(clerk, name='bot', max_risk='safe')[1]}"}

    resumed = bounded.run(resume(asked, interrupt_id, approved=approved))

    [outcome] = [e.value for e in resumed if getattr(e, "name", "") == "assistant.outcome"]
    assert (outcome["decision"], outcome["code"]) == ("denied", "token_scope")
    assert resumed[-1].type.value == "RUN_FINISHED"
    assert PendingAction.objects.get().status == "pending"
    order.refresh_from_db()
    assert order.status != "cancelled"
    assert list(AuditEntry.objects.order_by("id").values_list("decision", flat=True)) == [
        "confirmation_requested",
        "denied",
    ]
