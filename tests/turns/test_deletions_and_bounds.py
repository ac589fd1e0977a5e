"""A conversation deleted elsewhere, by its user or by staff, answers as a missing one and leaves
nothing waiting or unaudited; the staff audit's date bounds; two first runs on one new AG-UI
thread; a token revoked while its MCP call waits for a job."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async

from assistant.models import AuditEntry, Conversation, Message, PendingAction
from tests.approving import BASE
from tests.clients import API, client_for
from tests.sockets import kind, receive, receive_run, send


def _delete_over_rest(user: Any, conversation_id: str) -> int:
    return client_for(user).delete(f"{API}/conversations/{conversation_id}/").status_code


# --- a conversation deleted over REST, on a socket that already watches it ------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "frame",
    [{"type": "message", "text": "ping"}, {"type": "resume", "after": 0}],
    ids=["message", "resume"],
)
async def test_a_conversation_deleted_elsewhere_is_not_found_on_an_open_socket(
    settings, open_socket, plain_user, frame
):
    settings.ASSISTANT = BASE
    socket = await open_socket(plain_user)
    await send(socket, type="message", text="ping")
    run = await receive_run(socket)
    thread_id = run[0]["threadId"]
    assert await sync_to_async(_delete_over_rest)(plain_user, thread_id) == 204

    await send(socket, **frame, conversation=thread_id)
    answer = await receive(socket)

    assert kind(answer) == "CUSTOM assistant.error", answer
    assert answer["value"]["code"] == "not_found", answer
    assert not await Conversation.objects.filter(pk=thread_id).aexists()


# --- staff deleting a conversation skips what a user's own deletion does --------------------


def _ask_in(user: Any, conversation: Conversation) -> PendingAction:
    from assistant.dispatch.door import dispatch
    from tests.testapp.models import Order

    order = Order.objects.create(reference="ORD-1")
    outcome = dispatch(
        "approve_order", {"order_id": order.pk}, user=user, conversation=conversation
    )
    assert outcome.decision == "confirmation_requested"
    return outcome.pending_action


@pytest.mark.django_db
def test_staff_deleting_a_conversation_refuses_its_waiting_actions(settings, clerk, make_user):
    """A conversation deleted over the staff endpoint leaves none of its actions waiting to be
    approved (as the user's own DELETE does: refused, audited ``cancelled``)."""
    settings.ASSISTANT = BASE
    conversation = Conversation.objects.create(user=clerk, title="orders")
    action = _ask_in(clerk, conversation)
    eraser = make_user("eraser", "assistant.delete_conversation", is_staff=True)

    response = client_for(eraser).delete(f"{API}/admin/conversations/{conversation.pk}/")
    assert response.status_code == 204

    action.refresh_from_db()
    assert action.status == PendingAction.Status.CANCELLED, action.status
    confirmed = client_for(clerk).post(f"{API}/actions/{action.pk}/confirm/", {}, format="json")
    assert confirmed.status_code == 409, confirmed.json()
    assert not AuditEntry.objects.filter(operation="approve_order", decision="confirmed").exists()
    refused = AuditEntry.objects.get(operation="approve_order", decision="cancelled")
    assert refused.reason == "refused by eraser: conversation deleted"
    deleted = AuditEntry.objects.get(operation="delete_conversation")
    assert (deleted.username, deleted.entities) == (
        "eraser",
        {"conversation": str(conversation.pk), "user": clerk.pk},
    )


@pytest.mark.django_db
def test_deleting_a_conversation_in_the_django_admin_refuses_its_waiting_actions(
    settings, clerk, superuser
):
    from django.test import Client

    settings.ASSISTANT = BASE
    conversation = Conversation.objects.create(user=clerk, title="orders")
    action = _ask_in(clerk, conversation)

    admin = client_for(superuser, Client)
    response = admin.post(
        f"/admin/assistant/conversation/{conversation.pk}/delete/", {"post": "yes"}
    )
    assert response.status_code == 302, response.content[:500]
    assert not Conversation.objects.filter(pk=conversation.pk).exists()

    action.refresh_from_db()
    assert action.status == PendingAction.Status.CANCELLED, action.status


# --- the staff audit endpoint's since/until at the ends of the calendar ---------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("name", "value"),
    [("since", "0001-01-01T00:00:00+01:00"), ("until", "9999-12-31T23:59:59-12:00")],
)
def test_an_audit_bound_at_the_calendars_end_is_an_answer_not_a_500(superuser, name, value):
    """A well-formed ISO date-time whose UTC instant falls outside year 1..9999 is a 400
    ``invalid`` naming the parameter (or an empty page), never a 500."""
    response = client_for(superuser).get(f"{API}/admin/audit/", {name: value})

    assert response.status_code in (200, 400), response.json()
    if response.status_code == 400:
        assert response.json()["code"] == "invalid"
        assert name in response.json()["errors"]


# --- a gated call whose conversation was deleted meanwhile -----------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_gated_call_in_a_conversation_deleted_meanwhile_is_audited_not_lost(settings, clerk):
    """As a run call does (README: "a tool call that still finishes after the deletion writes
    its audit entry unlinked rather than losing it"), a call that reaches the confirmation gate
    after its conversation was deleted is answered and audited: no IntegrityError escapes."""
    from assistant.dispatch.door import dispatch
    from tests.testapp.models import Order

    settings.ASSISTANT = BASE
    order = Order.objects.create(reference="ORD-1")
    conversation = Conversation.objects.create(user=clerk, title="orders")
    Conversation.objects.filter(pk=conversation.pk).delete()  # a DELETE while the turn ran

    outcome = dispatch(
        "approve_order", {"order_id": order.pk}, user=clerk, conversation=conversation
    )

    assert outcome.audit_id is not None
    entry = AuditEntry.objects.get(pk=outcome.audit_id)
    assert (entry.operation, entry.conversation_id) == ("approve_order", None)


@pytest.mark.django_db(transaction=True)
def test_a_rest_turn_whose_conversation_is_deleted_before_its_gate_audits_the_call(
    settings, clerk, monkeypatch
):
    """The same through a whole turn: the conversation is deleted (over REST, by its user's
    other tab) while the turn prepares its call; the call still leaves its audit entry."""
    import assistant.dispatch.door as dispatch_module
    from tests.testapp.models import Order

    settings.ASSISTANT = BASE
    order = Order.objects.create(reference="ORD-1")
    conversation = Conversation.objects.create(user=clerk, title="orders")
    real_open = dispatch_module.open_action

    def deleted_first(call: Any) -> Any:
        Conversation.objects.filter(pk=conversation.pk).delete()
        return real_open(call)

    monkeypatch.setattr(dispatch_module, "open_action", deleted_first)
    response = client_for(clerk).post(
        f"{API}/messages/",
        {"message": f"approve order order_id={order.pk}", "conversation": str(conversation.pk)},
        format="json",
    )

    # (the reply has nowhere to go: 503 reply_not_stored, the call audited all the same)
    assert response.status_code < 500 or response.json()["code"] == "reply_not_stored"
    entry = AuditEntry.objects.get(operation="approve_order")
    assert (entry.decision, entry.conversation_id) == ("cancelled", None)
    assert not PendingAction.objects.exists()


# --- two first runs at once on one new AG-UI thread -----------------------------------------


@pytest.mark.django_db(transaction=True)
def test_two_first_runs_on_one_new_agui_thread_both_store_their_message(plain_user):
    """Both runs read the thread before either stored it (``AgentView.post`` then the lane's
    ``_begin``): the second's message belongs in the conversation the first created, not a
    ``message_not_stored`` refusal (the database refused nothing the user sent)."""
    from assistant.turns.conversations import thread_conversation
    from assistant.turns.messages import start_turn

    first = thread_conversation(plain_user, "thread-1")
    second = thread_conversation(plain_user, "thread-1")  # read before the first was stored
    assert first._state.adding
    assert second._state.adding

    start_turn(plain_user, "ping", first)
    conversation, _ = start_turn(plain_user, "ping again", second)

    assert conversation.pk == first.pk
    assert Message.objects.filter(conversation_id=first.pk).count() == 2


# --- a token revoked while its MCP call waits for a job ------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_an_mcp_call_whose_token_is_revoked_while_it_waits_gets_no_job_result(
    asgi_live_server, diagnostician, settings, monkeypatch
):
    """``DELETE tokens/<id>/`` revokes "at once, everywhere": a call still open on the revoked
    token (waiting up to MCP_JOB_WAIT for its job) must not go on to hand the job's result to
    whoever holds that token."""
    import asyncio

    import httpx2
    from django.utils import timezone

    import assistant.jobs as jobs_module
    from assistant.access import tokens
    from assistant.models import AccessToken, Job

    settings.ASSISTANT = {**BASE, "MCP_JOB_WAIT": 30}
    monkeypatch.setattr(jobs_module, "_hand_over", lambda job: None)  # no worker picks it up
    token, secret = await sync_to_async(tokens.issue)(diagnostician, name="laptop")
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "start_job",
            "arguments": {"kind": "count"},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    }
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "MCP-Method": "tools/call",
        "MCP-Name": "start_job",
        "Authorization": f"Bearer {secret}",
    }
    async with httpx2.AsyncClient(timeout=60) as http:
        call = asyncio.ensure_future(
            http.post(f"{asgi_live_server}/assistant/mcp/", json=body, headers=headers)
        )
        job = None
        for _ in range(200):
            job = await Job.objects.filter(user=diagnostician).afirst()
            if job is not None:
                break
            await asyncio.sleep(0.05)
        assert job is not None, (await call).text

        assert await sync_to_async(lambda: AccessToken.objects.get(pk=token.pk).revoke())()
        now = timezone.now()
        await Job.objects.filter(pk=job.pk).aupdate(
            status="succeeded", result="the quarterly payroll", finished_at=now, updated_at=now
        )
        response = await asyncio.wait_for(call, 30)

    assert "the quarterly payroll" not in response.text, response.text
    assert "token_revoked" in response.text
