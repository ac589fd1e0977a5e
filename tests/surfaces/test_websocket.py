"""The chat websocket: AG-UI runs streamed to every socket of a conversation, stopped, replayed."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.test import Client, override_settings
from django.utils import timezone

from assistant.dispatch.door import adispatch
from assistant.models import AuditEntry, Conversation, Message, PendingAction
from assistant.stream.broadcast import Publisher, group_name
from assistant.surfaces.websocket.output import _arrays
from assistant.turns.turn import TURN_FAILED
from tests.agui_clients import AG_UI_EVENT
from tests.audit_trail import decisions
from tests.sockets import (
    PING_RUN,
    WAIT,
    Socket,
    count_group_sends,
    kind,
    kinds,
    only,
    receive,
    receive_run,
    receive_until,
    request_cancel_order,
    send,
    stored,
    turns_ended,
)
from tests.testapp.models import Order

# A run that answers a pending action: no user message, the call and its result, the reply.
DECISION_RUN = [
    "RUN_STARTED",
    "TOOL_CALL_START cancel_order",
    "TOOL_CALL_ARGS",
    "TOOL_CALL_END",
    "TOOL_CALL_RESULT",
    "CUSTOM assistant.outcome",
    "TEXT_MESSAGE_START assistant",
    "TEXT_MESSAGE_CONTENT",
    "TEXT_MESSAGE_END",
    "RUN_FINISHED",
]


# -- connecting ------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_an_anonymous_socket_is_accepted_then_closed_with_4401(open_socket):
    socket = await open_socket()

    assert await socket.receive_output(timeout=WAIT) == {"type": "websocket.close", "code": 4401}


@pytest.mark.django_db(transaction=True)
async def test_a_logged_in_session_opens_the_socket_for_its_user(open_socket, plain_user):
    client = Client()
    assert await sync_to_async(client.login)(username="plain", password="pw")
    session = client.cookies[settings.SESSION_COOKIE_NAME].value
    socket = await open_socket(cookie=f"{settings.SESSION_COOKIE_NAME}={session}")

    await send(socket, type="message", text="ping")
    frames = await receive_run(socket)

    assert frames[-1]["type"] == "RUN_FINISHED"
    conversation = await Conversation.objects.aget(pk=frames[0]["threadId"])
    assert conversation.user_id == plain_user.pk
    assert "pong for plain" in [f.get("content") for f in frames]


# -- one run ---------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_a_message_streams_one_ag_ui_run_in_order(open_socket, plain_user):
    socket = await open_socket(plain_user)

    await send(socket, type="message", text="ping")
    frames = await receive_run(socket)

    assert kinds(frames) == PING_RUN
    conversation = await Conversation.objects.aget(user=plain_user)
    assert {frame["threadId"] for frame in frames} == {str(conversation.pk)}
    (run_id,) = {frame["runId"] for frame in frames}
    assert run_id
    seqs = [frame["seq"] for frame in frames]
    assert seqs == list(range(seqs[0], seqs[0] + len(frames)))
    assert await socket.receive_nothing(timeout=0.1)


@pytest.mark.django_db(transaction=True)
async def test_a_quick_run_goes_out_as_one_burst_when_it_ends_not_when_the_window_does(
    settings, open_socket, plain_user, monkeypatch
):
    settings.ASSISTANT = {**settings.ASSISTANT, "BURST_WINDOW": 60}
    bursts = count_group_sends(monkeypatch)
    socket = await open_socket(plain_user)

    await send(socket, type="message", text="ping")
    frames = await receive_run(socket)  # each frame within WAIT seconds, far below the window

    assert kinds(frames) == PING_RUN
    assert bursts == [len(PING_RUN)]


@pytest.mark.django_db(transaction=True)
async def test_frames_before_a_long_step_arrive_while_it_runs(settings, open_socket, plain_user):
    settings.ASSISTANT = {**settings.ASSISTANT, "BURST_WINDOW": 0.05}
    socket = await open_socket(plain_user)

    await send(socket, type="message", text="slow seconds=3")
    started = time.monotonic()
    shown = await receive_until(socket, "TOOL_CALL_END")

    assert time.monotonic() - started < 2.5, "the call was shown while the tool still ran"
    assert "TOOL_CALL_RESULT" not in kinds(shown)
    frames = await receive_run(socket)
    assert frames[-1]["type"] == "RUN_FINISHED"
    assert "slept 3s" in [frame.get("content") for frame in frames]


async def test_each_window_of_a_long_run_sends_its_burst_before_the_run_ends(settings, monkeypatch):
    # Frames put while an earlier burst is out gather a window of their own: a long run's
    # later steps show as they happen, not all at its end.
    settings.ASSISTANT = {**settings.ASSISTANT, "BURST_WINDOW": 0.05}
    bursts = count_group_sends(monkeypatch)
    publisher = Publisher("long-run")
    for step in range(3):
        publisher.put({"type": "CUSTOM", "name": "step", "value": step, "threadId": "long-run"})
        publisher.put({"type": "CUSTOM", "name": "more", "value": step, "threadId": "long-run"})
        for _ in range(100):
            if len(bursts) > step:
                break
            await asyncio.sleep(0.01)
        assert bursts == [2] * (step + 1)

    await publisher.close()

    assert bursts == [2, 2, 2]


@pytest.mark.django_db(transaction=True)
async def test_a_client_that_asks_for_bursts_gets_a_burst_as_one_json_array_of_the_same_frames(
    settings, open_socket, plain_user
):
    """The chat page's way (the ``assistant.bursts`` subprotocol) and the default side by side."""
    settings.ASSISTANT = {**settings.ASSISTANT, "BURST_WINDOW": 60}  # a run is one burst
    bursts = await open_socket(plain_user, subprotocols=["assistant.bursts"])
    plain = await open_socket(plain_user)
    assert (bursts.subprotocol, plain.subprotocol) == ("assistant.bursts", None)
    await send(bursts, type="message", text="ping")
    first = json.loads(await bursts.receive_from(timeout=WAIT))
    assert isinstance(first, list)
    assert kinds(first) == PING_RUN
    await turns_ended(WAIT)
    thread_id = first[0]["threadId"]
    await send(plain, type="resume", conversation=thread_id, after=first[-1]["seq"])
    assert kind(await receive(plain)) == "CUSTOM assistant.resumed"

    await send(bursts, type="message", text="ping", conversation=thread_id)

    burst = json.loads(await bursts.receive_from(timeout=WAIT))
    assert burst == await receive_run(plain)  # the very frames, numbers included
    assert burst[0]["seq"] == first[-1]["seq"] + 1
    assert await bursts.receive_nothing(timeout=0.1)
    # what is not a run's burst (an error, a snapshot, a marker) stays one object a message
    await send(bursts, type="no_such_frame")
    refused = json.loads(await bursts.receive_from(timeout=WAIT))
    assert refused["value"]["code"] == "unknown_type"


def test_a_burst_is_cut_into_arrays_under_the_budget_and_an_event_too_big_goes_alone():
    texts = ['{"n":1}', '{"n":22}', '{"n":333}', '{"big":"' + "x" * 40 + '"}', '{"n":4}']

    sent = _arrays(texts, budget=24)

    assert sent == ['[{"n":1},{"n":22}]', '[{"n":333}]', texts[3], '[{"n":4}]']
    assert all(len(frame) <= 24 for frame in sent if frame.startswith("["))


@pytest.mark.django_db(transaction=True)
async def test_a_burst_larger_than_half_a_mebibyte_reaches_a_bursts_client_in_several_arrays(
    open_socket, plain_user
):
    """daphne sends no frame over 1 MiB: a burst of big outcomes must not kill the socket."""
    socket = await open_socket(plain_user, subprotocols=["assistant.bursts"])
    await send(socket, type="message", text="ping")
    run = json.loads(await socket.receive_from(timeout=WAIT))
    await turns_ended(WAIT)
    big = [
        json.dumps({"type": "CUSTOM", "name": "big", "value": "x" * 300_000, "seq": n})
        for n in range(1, 5)
    ]
    await get_channel_layer().group_send(
        group_name(run[0]["threadId"]), {"type": "assistant.events", "texts": big}
    )

    arrays = [json.loads(await socket.receive_from(timeout=WAIT)) for _ in range(4)]

    assert [[event["seq"] for event in array] for array in arrays] == [[1], [2], [3], [4]]
    assert await socket.receive_nothing(timeout=0.1)


@pytest.mark.django_db(transaction=True)
async def test_every_frame_is_an_ag_ui_event_spelled_in_camel_case(open_socket, plain_user):
    socket = await open_socket(plain_user)

    await send(socket, type="message", text="ping")
    frames = await receive_run(socket)

    for frame in frames:
        event = AG_UI_EVENT.validate_python(frame)
        assert event.type == frame["type"]
        assert not [key for key in frame if "_" in key], frame
        assert {"seq", "threadId", "runId"} <= frame.keys()
    start = only(frames, "TOOL_CALL_START ping")
    reply = only(frames, "TEXT_MESSAGE_START assistant")
    assert start["parentMessageId"] == reply["messageId"]
    assert frames[-1]["result"] == {"message": reply["messageId"], "status": "complete"}


@pytest.mark.django_db(transaction=True)
async def test_the_stored_messages_are_the_streamed_ones(open_socket, plain_user):
    socket = await open_socket(plain_user)

    await send(socket, type="message", text="  ping  ")
    frames = await receive_run(socket)

    question, answer = await sync_to_async(stored)(frames[0]["threadId"])
    assert (question.role, question.text, question.status) == ("user", "ping", "complete")
    assert str(question.pk) == only(frames, "TEXT_MESSAGE_START user")["messageId"]
    assert (answer.role, answer.text, answer.status) == ("assistant", "pong for plain", "complete")
    assert str(answer.pk) == only(frames, "TEXT_MESSAGE_START assistant")["messageId"]
    (call,) = answer.tool_calls
    assert call["tool_call_id"] == only(frames, "TOOL_CALL_START ping")["toolCallId"]
    assert (call["operation"], call["decision"]) == ("ping", "executed")
    assert only(frames, "CUSTOM assistant.outcome")["value"] == call


@pytest.mark.django_db(transaction=True)
async def test_a_next_message_continues_the_conversation_and_its_numbering(open_socket, plain_user):
    socket = await open_socket(plain_user)
    await send(socket, type="message", text="ping")
    first = await receive_run(socket)

    await send(socket, type="message", text="ping again", conversation=first[0]["threadId"])
    second = await receive_run(socket)

    assert kinds(second) == PING_RUN
    assert {frame["threadId"] for frame in second} == {first[0]["threadId"]}
    assert second[0]["runId"] != first[0]["runId"]
    assert [frame["seq"] for frame in second] == list(
        range(first[-1]["seq"] + 1, first[-1]["seq"] + 1 + len(second))
    )
    assert await Conversation.objects.acount() == 1
    assert await Message.objects.acount() == 4


# -- approvals -------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_a_dangerous_tool_ends_the_run_with_an_interrupt_for_its_pending_action(
    open_socket, clerk
):
    order = await Order.objects.acreate(reference="ORD-1")
    socket = await open_socket(clerk)

    frames = await request_cancel_order(socket, order)

    action = await PendingAction.objects.aget()
    finished = frames[-1]
    assert finished["type"] == "RUN_FINISHED"
    assert finished["outcome"]["type"] == "interrupt"
    (interrupt,) = finished["outcome"]["interrupts"]
    assert interrupt["id"] == str(action.pk)
    assert interrupt["reason"] == "confirmation_required"
    assert interrupt["toolCallId"] == only(frames, "TOOL_CALL_START cancel_order")["toolCallId"]
    assert interrupt["metadata"] == {
        "operation": "cancel_order",
        "entities": {"order_id": order.pk},
        "preview": None,
        "risk": "dangerous",
        "policy": "confirm",
        "confirm": "hold",
        "confirm_phrase": "",
        "requested_by": "clerk",
        "conversation": finished["threadId"],
        "created_at": action.created_at.isoformat(),
    }
    assert interrupt["message"] == action.summary
    assert interrupt["expiresAt"] == action.expires_at.isoformat()
    assert (action.status, action.user_id, str(action.conversation_id)) == (
        "pending",
        clerk.pk,
        finished["threadId"],
    )
    assert await sync_to_async(decisions)("cancel_order") == ["confirmation_requested"]
    assert (await Order.objects.aget()).status == "open"


@pytest.mark.django_db(transaction=True)
async def test_confirm_starts_a_new_run_that_shows_the_call_and_its_result(open_socket, clerk):
    order = await Order.objects.acreate(reference="ORD-1")
    socket = await open_socket(clerk)
    asked = await request_cancel_order(socket, order)
    action_id = asked[-1]["outcome"]["interrupts"][0]["id"]

    await send(socket, type="confirm", action=action_id)
    frames = await receive_run(socket)

    assert kinds(frames) == DECISION_RUN
    assert {frame["threadId"] for frame in frames} == {asked[0]["threadId"]}
    (run_id,) = {frame["runId"] for frame in frames}
    assert run_id != asked[0]["runId"]
    assert frames[0]["seq"] == asked[-1]["seq"] + 1
    assert json.loads(only(frames, "TOOL_CALL_ARGS")["delta"]) == {"order_id": order.pk}
    assert only(frames, "TOOL_CALL_RESULT")["content"] == f"Cancelled order {order.pk}"
    assert only(frames, "CUSTOM assistant.outcome")["value"]["decision"] == "confirmed"
    # The action is answered: the run does not ask for it again.
    assert frames[-1]["result"]["status"] == "complete"
    assert frames[-1].get("outcome") is None
    assert await sync_to_async(decisions)("cancel_order") == [
        "confirmation_requested",
        "confirmed",
    ]
    assert (await Order.objects.aget()).status == "cancelled"
    assert (await PendingAction.objects.aget()).status == "confirmed"


@pytest.mark.django_db(transaction=True)
async def test_a_second_confirm_of_the_same_action_runs_nothing(open_socket, clerk):
    order = await Order.objects.acreate(reference="ORD-1")
    socket = await open_socket(clerk)
    await send(socket, type="message", text=f"approve order {order.pk}")
    action_id = (await receive_run(socket))[-1]["outcome"]["interrupts"][0]["id"]
    await send(socket, type="confirm", action=action_id)
    await receive_run(socket)

    await send(socket, type="confirm", action=action_id)
    again = await receive_run(socket)

    assert again[-1]["type"] == "RUN_ERROR"
    assert again[-1]["code"] == "already_decided"
    assert (await Order.objects.aget()).approvals == 1
    assert await sync_to_async(decisions)("approve_order") == [
        "confirmation_requested",
        "confirmed",
    ]


@pytest.mark.django_db(transaction=True)
async def test_reject_is_audited_cancelled_and_runs_nothing(open_socket, clerk):
    order = await Order.objects.acreate(reference="ORD-1")
    socket = await open_socket(clerk)
    asked = await request_cancel_order(socket, order)
    action_id = asked[-1]["outcome"]["interrupts"][0]["id"]

    await send(socket, type="reject", action=action_id)
    frames = await receive_run(socket)

    assert kinds(frames) == DECISION_RUN
    outcome = only(frames, "CUSTOM assistant.outcome")["value"]
    assert (outcome["operation"], outcome["decision"]) == ("cancel_order", "cancelled")
    assert frames[-1].get("outcome") is None
    assert await sync_to_async(decisions)("cancel_order") == [
        "confirmation_requested",
        "cancelled",
    ]
    assert (await Order.objects.aget()).status == "open"
    assert (await PendingAction.objects.aget()).status == "cancelled"


@pytest.mark.django_db(transaction=True)
async def test_a_new_socket_is_told_only_how_many_approvals_wait_where(open_socket, clerk):
    order = await Order.objects.acreate(reference="ORD-1")
    first = await open_socket(clerk)
    asked = await request_cancel_order(first, order)
    await adispatch("cancel_order", {"order_id": order.pk}, user=clerk)  # in no conversation

    second = await open_socket(clerk)

    frame = await receive(second)
    assert kind(frame) == "CUSTOM assistant.pending_actions"
    assert frame["threadId"] == ""
    assert frame["value"] == {"actions": [], "waiting": {asked[0]["threadId"]: 1, "": 1}}
    assert await second.receive_nothing(timeout=0.1)


async def receive_resumed(socket: Any) -> list[dict[str, Any]]:
    frames = [await receive(socket)]
    while kind(frames[-1]) != "CUSTOM assistant.resumed":
        frames.append(await receive(socket))
    return frames


@pytest.mark.django_db(transaction=True)
async def test_a_resumed_conversation_gets_its_own_approval_cards_and_counts_of_the_rest(
    open_socket, clerk
):
    order = await Order.objects.acreate(reference="ORD-1")
    first = await open_socket(clerk)
    asked = await request_cancel_order(first, order)
    thread = asked[0]["threadId"]
    await send(first, type="message", text="ping")
    other = (await receive_run(first))[0]["threadId"]
    assert other != thread  # (a message without a conversation starts a new one)
    action = await PendingAction.objects.aget()
    second = await open_socket(clerk)
    await receive(second)  # the counts on connect

    await send(second, type="resume", conversation=thread, after=0)
    here = await receive_resumed(second)
    await send(second, type="resume", conversation=other, after=0)
    there = await receive_resumed(second)

    (cards,) = [frame for frame in here if kind(frame) == "CUSTOM assistant.pending_actions"]
    assert cards["threadId"] == thread
    assert cards["value"] == {
        "actions": [await sync_to_async(action.shown)()],
        "waiting": {thread: 1},
    }
    (counts,) = [frame for frame in there if kind(frame) == "CUSTOM assistant.pending_actions"]
    assert (counts["threadId"], counts["value"]) == (other, {"actions": [], "waiting": {thread: 1}})


@pytest.mark.django_db(transaction=True)
async def test_a_socket_gets_no_pending_actions_once_they_are_answered(open_socket, clerk):
    order = await Order.objects.acreate(reference="ORD-1")
    first = await open_socket(clerk)
    outcome = await adispatch("cancel_order", {"order_id": order.pk}, user=clerk)
    await send(first, type="reject", action=str(outcome.pending_action.pk))
    await receive_run(first)

    second = await open_socket(clerk)

    assert await second.receive_nothing(timeout=0.2)


@pytest.mark.django_db(transaction=True)
async def test_a_socket_is_told_nothing_of_an_approval_that_ran_out_before_it_was_closed(
    open_socket, clerk
):
    order = await Order.objects.acreate(reference="ORD-1")
    outcome = await adispatch("cancel_order", {"order_id": order.pk}, user=clerk)
    ran_out = timezone.now() - timedelta(seconds=1)  # (still "pending": nothing closed it yet)
    await PendingAction.objects.filter(pk=outcome.pending_action.pk).aupdate(expires_at=ran_out)

    socket = await open_socket(clerk)

    assert await socket.receive_nothing(timeout=0.2)


# -- bad frames ------------------------------------------------------------------------------

LIMIT = 40
THEIRS = "THEIR-CONVERSATION"


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        pytest.param("{not json", "bad_json", id="not JSON"),
        pytest.param(b'{"type": "message", "text": "ping"}', "bad_frame", id="binary"),
        pytest.param('["message", "ping"]', "bad_frame", id="not an object"),
        pytest.param('{"text": "ping"}', "bad_frame", id="no type"),
        pytest.param('{"type": "dance"}', "unknown_type", id="unknown type"),
        pytest.param('{"type": "message"}', "invalid_message", id="message without text"),
        pytest.param('{"type": "message", "text": "  "}', "invalid_message", id="blank text"),
        pytest.param('{"type": "confirm"}', "missing_field", id="confirm without action"),
        pytest.param('{"type": "reject"}', "missing_field", id="reject without action"),
        pytest.param('{"type": "resume"}', "missing_field", id="resume without conversation"),
        pytest.param('{"type": "cancel"}', "nothing_to_cancel", id="cancel with nothing running"),
        pytest.param(
            json.dumps({"type": "message", "text": "ping " + "x" * (LIMIT - 4)}),
            "invalid_message",
            id="text over MAX_MESSAGE_LENGTH",
        ),
        pytest.param(
            json.dumps({"type": "message", "text": "ping \x00"}),
            "invalid_message",
            id="text with a NUL",
        ),
        pytest.param(
            json.dumps({"type": "message", "text": "ping \udc80"}),
            "invalid_message",
            id="text with a lone surrogate",
        ),
        pytest.param(
            json.dumps({"type": "message", "text": "x" * (3 * LIMIT + 1024)}),
            "frame_too_large",
            id="frame far over the limit",
        ),
        pytest.param(
            json.dumps({"type": "message", "text": "ping", "conversation": THEIRS}),
            "not_found",
            id="message to someone else's conversation",
        ),
        pytest.param(
            json.dumps({"type": "message", "text": "ping", "conversation": "no-such-id"}),
            "not_found",
            id="message to a malformed conversation id",
        ),
        pytest.param(
            json.dumps({"type": "resume", "conversation": THEIRS, "after": 0}),
            "not_found",
            id="resume someone else's conversation",
        ),
        pytest.param(
            json.dumps({"type": "cancel", "conversation": THEIRS}),
            "not_found",
            id="cancel in someone else's conversation",
        ),
    ],
)
@pytest.mark.django_db(transaction=True)
async def test_a_bad_frame_gets_an_error_code_stores_nothing_and_keeps_the_socket(
    open_socket, plain_user, make_user, frame, code
):
    other = await sync_to_async(make_user)("other")
    theirs = await Conversation.objects.acreate(user=other, title="theirs")
    socket = await open_socket(plain_user)

    with override_settings(ASSISTANT={**settings.ASSISTANT, "MAX_MESSAGE_LENGTH": LIMIT}):
        if isinstance(frame, bytes):
            await socket.send_to(bytes_data=frame)
        else:
            await socket.send_to(text_data=frame.replace(THEIRS, str(theirs.pk)))
        error = await receive(socket)
        assert await socket.receive_nothing(timeout=0.1)

    assert kind(error) == "CUSTOM assistant.error"
    assert error["value"]["code"] == code
    assert error["value"]["message"]
    AG_UI_EVENT.validate_python(error)
    assert await Conversation.objects.acount() == 1
    assert await Message.objects.acount() == 0
    assert await AuditEntry.objects.acount() == 0
    await send(socket, type="message", text="ping")
    assert kinds(await receive_run(socket)) == PING_RUN


@pytest.mark.parametrize("answer", ["confirm", "reject"])
@pytest.mark.parametrize("whose", ["someone else's", "malformed"])
@pytest.mark.django_db(transaction=True)
async def test_answering_an_action_that_is_not_yours_is_a_bad_frame(
    open_socket, clerk, make_user, answer, whose
):
    order = await Order.objects.acreate(reference="ORD-1")
    other = await sync_to_async(make_user)("other", "testapp.view_order", "testapp.change_order")
    outcome = await adispatch("cancel_order", {"order_id": order.pk}, user=other)
    action_id = str(outcome.pending_action.pk) if whose == "someone else's" else "not-a-uuid"
    socket = await open_socket(clerk)

    await send(socket, type=answer, action=action_id)

    error = await receive(socket)
    assert kind(error) == "CUSTOM assistant.error"
    assert error["value"]["code"] == "not_found"
    assert await socket.receive_nothing(timeout=0.1)
    assert await Conversation.objects.acount() == 0
    assert await Message.objects.acount() == 0
    assert (await PendingAction.objects.aget()).status == "pending"
    assert await sync_to_async(decisions)("cancel_order") == ["confirmation_requested"]
    await send(socket, type="message", text="ping")
    assert kinds(await receive_run(socket)) == PING_RUN


# -- cancelling ------------------------------------------------------------------------------


@pytest.mark.parametrize("tool", ["slow", "slow sync"])
@pytest.mark.django_db(transaction=True)
async def test_cancel_stops_the_running_tool_within_a_second(open_socket, plain_user, tool):
    operation = tool.replace(" ", "_")
    socket = await open_socket(plain_user)
    await send(socket, type="message", text=f"{tool} seconds=30")
    started = await receive_until(socket, "TOOL_CALL_END")
    thread_id = started[0]["threadId"]

    sent_at = time.monotonic()
    await send(socket, type="cancel")
    frames = await receive_until(socket, "RUN_FINISHED")

    assert time.monotonic() - sent_at < 1.0
    finished = frames[-1]
    assert finished["type"] == "RUN_FINISHED"
    assert finished["outcome"] == {"type": "cancelled"}
    assert finished["result"]["status"] == "cancelled"
    assert await turns_ended(1.0), "the handler still holds its turn after the cancel"
    # The stopped call is not left "in progress": it gets a result, and the reply records it.
    call_id = only(started, f"TOOL_CALL_START {operation}")["toolCallId"]
    assert only(frames, "TOOL_CALL_RESULT")["toolCallId"] == call_id
    _question, answer = await sync_to_async(stored)(thread_id)
    assert (answer.role, answer.status, str(answer.pk)) == (
        "assistant",
        "cancelled",
        finished["result"]["message"],
    )
    (call,) = answer.tool_calls
    assert (call["tool_call_id"], call["decision"]) == (call_id, "cancelled")
    assert await sync_to_async(decisions)(operation) == ["cancelled"]

    await send(socket, type="message", text="ping", conversation=thread_id)
    assert kinds(await receive_run(socket)) == PING_RUN


@pytest.mark.django_db(transaction=True)
async def test_cancel_names_the_conversation_it_stops(open_socket, plain_user):
    runner = await open_socket(plain_user)
    await send(runner, type="message", text="slow seconds=30")
    thread_id = (await receive_until(runner, "TOOL_CALL_END"))[0]["threadId"]
    other_tab = await open_socket(plain_user)

    await send(other_tab, type="cancel", conversation=thread_id)

    assert (await receive_run(runner))[-1]["outcome"] == {"type": "cancelled"}


# -- every socket on the conversation ----------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_a_second_socket_resumed_on_the_conversation_receives_the_same_events(
    open_socket, plain_user
):
    first = await open_socket(plain_user)
    await send(first, type="message", text="ping")
    earlier = await receive_run(first)
    thread_id = earlier[0]["threadId"]
    second = await open_socket(plain_user)
    await send(second, type="resume", conversation=thread_id, after=earlier[-1]["seq"])
    resumed = await receive(second)
    assert kind(resumed) == "CUSTOM assistant.resumed"
    assert resumed["value"] == {"last": earlier[-1]["seq"]}

    await send(first, type="message", text="ping", conversation=thread_id)

    seen_by_first = await receive_run(first)
    seen_by_second = await receive_run(second)
    assert kinds(seen_by_first) == PING_RUN
    assert seen_by_second == seen_by_first


@pytest.mark.django_db(transaction=True)
async def test_closing_the_socket_that_started_a_turn_does_not_stop_it(open_socket, plain_user):
    starter = await open_socket(plain_user)
    await send(starter, type="message", text="slow seconds=0.5")
    run_started = await receive(starter)
    await starter.disconnect(timeout=WAIT)

    watcher = await open_socket(plain_user)
    await send(
        watcher, type="resume", conversation=run_started["threadId"], after=run_started["seq"]
    )
    rest = await receive_run(watcher)

    assert rest[-1]["type"] == "RUN_FINISHED"
    assert rest[-1]["runId"] == run_started["runId"]
    assert rest[-1]["result"]["status"] == "complete"
    assert await turns_ended(WAIT)
    _question, answer = await sync_to_async(stored)(run_started["threadId"])
    assert (answer.text, answer.status) == ("slept 0.5s", "complete")
    assert await sync_to_async(decisions)("slow") == ["executed"]


# -- replay ----------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_resume_after_n_replays_exactly_the_frames_numbered_above_n(open_socket, plain_user):
    first = await open_socket(plain_user)
    await send(first, type="message", text="ping")
    original = await receive_run(first)
    after = original[4]["seq"]

    second = await open_socket(plain_user)
    await send(second, type="resume", conversation=original[0]["threadId"], after=after)

    replayed = [await receive(second) for _ in original[5:]]
    assert replayed == original[5:]
    marker = await receive(second)
    assert kind(marker) == "CUSTOM assistant.resumed"
    assert marker["value"] == {"last": original[-1]["seq"]}
    assert marker["threadId"] == original[0]["threadId"]
    assert await second.receive_nothing(timeout=0.1)


@pytest.mark.django_db(transaction=True)
async def test_a_fresh_load_gets_the_stored_messages_then_the_unfinished_run(
    open_socket, plain_user
):
    first = await open_socket(plain_user)
    await send(first, type="message", text="ping")
    thread_id = (await receive_run(first))[0]["threadId"]
    await send(first, type="message", text="slow seconds=30", conversation=thread_id)
    unfinished = await receive_until(first, "TOOL_CALL_END")

    second = await open_socket(plain_user)
    await send(second, type="resume", conversation=thread_id, after=0)

    snapshot = await receive(second)
    assert snapshot["type"] == "MESSAGES_SNAPSHOT"
    AG_UI_EVENT.validate_python(snapshot)
    messages = await sync_to_async(stored)(thread_id)
    assert [(m["id"], m["role"], m["content"]) for m in snapshot["messages"]] == [
        (str(message.pk), message.role, message.text) for message in messages
    ]
    assert [message.text for message in messages] == ["ping", "pong for plain", "slow seconds=30"]
    reply = snapshot["messages"][1]
    (ping,) = reply["toolCalls"]
    assert reply["metadata"]["results"] == {
        ping["id"]: {"text": "pong for plain", "data": None, "data_omitted": False}
    }
    replayed = [await receive(second) for _ in unfinished]
    assert replayed == unfinished
    marker = await receive(second)
    assert kind(marker) == "CUSTOM assistant.resumed"
    assert marker["value"] == {"last": unfinished[-1]["seq"]}

    await send(first, type="cancel")
    assert (await receive_run(second))[-1]["outcome"] == {"type": "cancelled"}


# -- failures --------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_a_crashing_handler_still_ends_the_run_with_a_stored_reply(open_socket, plain_user):
    socket = await open_socket(plain_user)

    await send(socket, type="message", text="explode")
    frames = await receive_run(socket)

    assert kinds(frames) == [k.replace("ping", "explode") for k in PING_RUN]
    outcome = only(frames, "CUSTOM assistant.outcome")["value"]
    assert (outcome["decision"], outcome["code"]) == ("failed", "tool_failed")
    assert frames[-1]["result"]["status"] == "complete"
    assert "internal detail" not in json.dumps(frames)
    _question, answer = await sync_to_async(stored)(frames[0]["threadId"])
    assert (answer.status, answer.text) == ("complete", outcome["text"])
    assert await sync_to_async(decisions)("explode") == ["failed"]


@pytest.mark.django_db(transaction=True)
async def test_a_crashing_planner_ends_with_run_error_and_a_stored_failed_reply(
    open_socket, plain_user, monkeypatch
):
    def broken_plan(*args: Any, **kwargs: Any) -> list[Any]:
        raise RuntimeError("planner internals 42")

    monkeypatch.setattr("assistant.turns.planners.keywords.plan", broken_plan)
    socket = await open_socket(plain_user)

    await send(socket, type="message", text="ping")
    frames = await receive_run(socket)

    assert kinds(frames) == [
        "RUN_STARTED",
        "TEXT_MESSAGE_START user",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "RUN_ERROR",
    ]
    assert (frames[-1]["code"], frames[-1]["message"]) == ("turn_failed", TURN_FAILED)
    assert "planner internals" not in json.dumps(frames)
    question, answer = await sync_to_async(stored)(frames[0]["threadId"])
    assert (question.role, question.text) == ("user", "ping")
    assert (answer.role, answer.status, answer.text) == ("assistant", "failed", TURN_FAILED)
    assert await AuditEntry.objects.acount() == 0


# -- a message waiting for a turn slot -----------------------------------------------------------


async def receive_runs(socket: Socket, thread_ids: set[str]) -> list[dict[str, Any]]:
    """Frames, in arrival order, until a run has ended on each of these conversations."""
    frames: list[dict[str, Any]] = []
    ended: set[str] = set()
    while ended != thread_ids:
        frames.append(await receive(socket))
        if frames[-1]["type"] in ("RUN_FINISHED", "RUN_ERROR"):
            ended.add(frames[-1]["threadId"])
    await turns_ended(WAIT)
    return frames


@pytest.mark.django_db(transaction=True)
async def test_a_message_waiting_for_a_turn_slot_is_started_and_queued_at_once_and_a_stop_cancels_it(
    settings, open_socket, plain_user
):
    settings.ASSISTANT = {**settings.ASSISTANT, "MAX_CONCURRENT_TURNS": 1}  # this loop's slots
    socket = await open_socket(plain_user)
    await send(socket, type="message", text="ping")
    waiting = (await receive_run(socket))[0]["threadId"]
    await send(socket, type="message", text="slow seconds=1")
    busy = (await receive_until(socket, "TOOL_CALL_END"))[0]["threadId"]  # holds the only slot

    await send(socket, type="message", text="ping", conversation=waiting)
    # Never silence: the queued turn is stored, started and says it waits while the other runs.
    shown = await receive_until(socket, "CUSTOM")
    assert [f["type"] for f in shown] == ["RUN_STARTED", "CUSTOM"]
    assert {f["threadId"] for f in shown} == {waiting}
    assert shown[-1]["name"] == "assistant.queued"
    await send(socket, type="cancel", conversation=waiting)
    frames = await receive_runs(socket, {busy, waiting})

    busy_end = next(f for f in frames if f["threadId"] == busy and f["type"] == "RUN_FINISHED")
    assert busy_end["result"]["status"] == "complete"
    assert busy_end.get("outcome") is None
    stopped = [f for f in shown + frames if f["threadId"] == waiting]
    assert stopped[-1]["type"] == "RUN_FINISHED"
    assert stopped[-1].get("outcome") == {"type": "cancelled"}
    assert stopped[-1]["result"]["status"] == "cancelled"
    assert "TOOL_CALL_START ping" not in kinds(stopped)
    messages = await sync_to_async(stored)(waiting)
    assert [(m.role, m.status) for m in messages[2:]] == [
        ("user", "complete"),
        ("assistant", "cancelled"),
    ]
    assert str(messages[3].pk) == stopped[-1]["result"]["message"]
    assert await sync_to_async(decisions)("ping") == ["executed"]  # the first turn's only
    _question, answer = await sync_to_async(stored)(busy)
    assert (answer.text, answer.status) == ("slept 1s", "complete")
    assert await sync_to_async(decisions)("slow") == ["executed"]
