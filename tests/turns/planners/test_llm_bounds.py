"""A turn is bounded in every dimension a hostile model server could stretch: tool calls per reply
and per turn, the bytes of one call's arguments, the reply's length and the turn's wall-clock time.
Each refusal tells the user and the model, and is audited once."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from types import SimpleNamespace

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import get_channel_layer
from django.test import Client
from rest_framework.authtoken.models import Token

from assistant.checks import check_settings
from assistant.core.cancellation import CancellationToken
from assistant.dispatch.door import dispatch
from assistant.models import AuditEntry, Conversation
from assistant.stream.broadcast import group_name
from assistant.stream.eventlog import event_log
from assistant.turns.planners.llm import StreamedCalls
from assistant.turns.runs import arun_turn, run_turn
from tests.openai_peer import call, endless, text, tool_calls
from tests.openai_peer import openai_peer as openai_peer  # the fixtures
from tests.openai_peer import use_llm as use_llm
from tests.turns.reading import fed_back, next_frame, of_type

pytestmark = pytest.mark.django_db

HUGE = 30 * 1024 * 1024  # bytes: the argument a hostile model sent


def audited():
    return list(AuditEntry.objects.order_by("id").values_list("operation", "decision"))


def size(value) -> int:
    return len(json.dumps(value, default=str))


# Tool calls per model reply and per turn


def test_ten_thousand_calls_in_one_reply_run_at_most_the_cap_and_are_audited_boundedly(
    use_llm, plain_user
):
    peer = use_llm(MAX_TOOL_CALLS_PER_REPLY=4)
    flood = [call("apong", {"times": times % 7}, pieces=1) for times in range(10_000)]
    peer.script(tool_calls(*flood), text("Sorry, too many."))

    started = time.monotonic()
    turn = run_turn(plain_user, "ping a lot")

    assert time.monotonic() - started < 30
    assert audited() == [("apong", "executed")] * 4 + [("tool_calls", "over_limit")]
    refusal = AuditEntry.objects.get(decision="over_limit")
    assert refusal.entities["refused"] == 9_996
    assert refusal.entities["limit"] == 4
    assert "too_many_tool_calls" in refusal.error
    # The model is told, in a tool result for a call it made, that the rest were not run.
    results = fed_back(peer.requests[1])
    assert len(results) == 5
    (_, told) = results[-1]
    assert (told["decision"], told["code"]) == ("over_limit", "too_many_tool_calls")
    assert "9,996" in told["text"]
    assert "not run" in told["text"]
    # So is the user: the refused calls show as one card that says why, and the turn goes on.
    records = turn.assistant_message.tool_calls
    assert [record["decision"] for record in records] == ["executed"] * 4 + ["over_limit"]
    assert records[-1]["code"] == "too_many_tool_calls"
    assert of_type(turn, "TOOL_CALL_RESULT")[-1]["content"] == told["text"]
    assert turn.assistant_message.text == "Sorry, too many."
    assert turn.assistant_message.status == "complete"
    assert len(turn.frames) < 60
    assert size(peer.requests[1]) < 20_000


def test_calls_past_the_turns_cap_are_not_run_and_the_model_is_told(use_llm, plain_user):
    peer = use_llm(MAX_TOOL_CALLS_PER_REPLY=4, MAX_TOOL_CALLS_PER_TURN=5)
    peer.script(
        tool_calls(*[call("apong", {"times": times}) for times in range(4)]),
        tool_calls(*[call("apong", {"times": times}) for times in range(4, 7)]),
        tool_calls(*[call("apong", {"times": times}) for times in range(7, 10)]),
        text("Done."),
    )

    turn = run_turn(plain_user, "ping a lot")

    assert audited() == [("apong", "executed")] * 5 + [("tool_calls", "over_limit")] * 2
    refused = [told for _, told in fed_back(peer.requests[2]) if told["decision"] == "over_limit"]
    assert len(refused) == 2
    assert all(told["code"] == "too_many_tool_calls" for told in refused)
    assert "not run" in refused[0]["text"]
    assert turn.assistant_message.text == "Done."


def delta(index=None, id=None, name=None, arguments=None):
    """One streamed tool-call delta, as the openai client hands it over."""
    return SimpleNamespace(
        index=index, id=id, function=SimpleNamespace(name=name, arguments=arguments)
    )


@pytest.mark.parametrize(
    "shape",
    [
        "by index",  # OpenAI: an opening delta per index, then arguments by index
        "all at index 0",  # Ollama, vLLM: every call at index 0 with its own id
        "no index",  # Gemini, proxies: index-less deltas, the id on the opening one
    ],
)
def test_calls_past_the_kept_ones_are_counted_whatever_the_stream_shape(shape):
    calls = StreamedCalls(keep=3)
    for number in range(10):
        index = {"by index": number, "all at index 0": 0, "no index": None}[shape]
        calls.add(delta(index, f"call_{number}", "ping", ""))
        calls.add(delta(index, None, None, '{"n": '))
        calls.add(delta(index, None, None, f"{number}}}"))

    kept = calls.finished(prefix="call")
    assert [(call.id, call.arguments) for call in kept] == [
        ("call_0", '{"n": 0}'),
        ("call_1", '{"n": 1}'),
        ("call_2", '{"n": 2}'),
    ]
    assert calls.dropped == 7


def test_arguments_past_the_byte_cap_keep_their_digest_and_start_only():
    calls = StreamedCalls(max_bytes=100)
    pieces = ['{"tags": ["', "é" * 5_000, '"]}']
    calls.add(delta(0, "call_big", "echo_types", ""))
    for piece in pieces:
        calls.add(delta(0, None, None, piece))

    (call,) = calls.finished(prefix="call")
    whole = "".join(pieces).encode()
    assert call.too_large["bytes"] == len(whole)
    assert call.too_large["sha256"] == hashlib.sha256(whole).hexdigest()
    assert len(call.arguments) <= 200
    assert len(json.dumps(call.as_message())) < 500


# The bytes of one call's arguments


def test_a_30_mb_argument_from_the_model_stores_no_more_than_the_cap(use_llm, plain_user):
    peer = use_llm()
    arguments = json.dumps({"count": 1, "tags": ["x" * HUGE]})
    peer.script(tool_calls(call("echo_types", arguments, pieces=3)), text("Too big, sorry."))

    turn = run_turn(plain_user, "echo something huge")

    entry = AuditEntry.objects.get()
    assert (entry.operation, entry.decision) == ("echo_types", "invalid")
    assert "arguments_too_large" in entry.error
    assert size(entry.entities) < 2_000
    assert hashlib.sha256(arguments.encode()).hexdigest() in json.dumps(entry.entities)
    (record,) = turn.assistant_message.tool_calls
    assert (record["decision"], record["code"]) == ("invalid", "arguments_too_large")
    assert size(turn.assistant_message.tool_calls) < 4_000
    assert size(turn.frames) < 10_000
    logged = async_to_sync(event_log().since)(turn.frames[0]["threadId"], 0).frames
    assert size(logged) < 10_000
    # The model hears why, and is not sent its 30 MB back.
    ((_, told),) = fed_back(peer.requests[1])
    assert (told["decision"], told["code"]) == ("invalid", "arguments_too_large")
    assert "not run" in told["text"].lower()
    assert size(peer.requests[1]) < 20_000
    assert turn.assistant_message.text == "Too big, sorry."


def test_a_30_mb_argument_through_dispatch_is_refused_before_anything_is_stored(plain_user):
    tags = ["x" * HUGE]

    outcome = dispatch("echo_types", {"count": 1, "tags": tags}, user=plain_user, source="api")

    assert (outcome.decision, outcome.code) == ("invalid", "arguments_too_large")
    entry = AuditEntry.objects.get()
    assert entry.decision == "invalid"
    assert size(entry.entities) < 2_000
    assert entry.entities["bytes"] > HUGE
    assert len(entry.entities["sha256"]) == 64


def test_a_rest_dispatch_over_the_argument_cap_is_a_clear_400(plain_user, settings):
    settings.ASSISTANT = {**settings.ASSISTANT, "MAX_TOOL_ARGUMENT_BYTES": 1_000}
    key = Token.objects.create(user=plain_user).key

    response = Client().post(
        "/assistant/api/dispatch/",
        {"operation": "echo_types", "entities": {"count": 1, "tags": ["y" * 5_000]}},
        content_type="application/json",
        headers={"Authorization": f"Bearer {key}"},
    )

    assert response.status_code == 400
    assert response.json()["code"] == "arguments_too_large"
    assert "1,000 bytes" in response.json()["detail"]
    assert size(AuditEntry.objects.get().entities) < 1_000


@pytest.mark.django_db(transaction=True)
async def test_an_mcp_call_over_the_argument_cap_is_an_error_result_and_stores_no_blob(
    asgi_live_server, reader, settings
):
    from tests.mcp_clients import issue, mcp_client

    settings.ASSISTANT = {**settings.ASSISTANT, "MAX_TOOL_ARGUMENT_BYTES": 1_000}
    async with mcp_client(asgi_live_server, await issue(reader), "2026-07-28") as client:
        refused = await client.call_tool("echo_types", {"count": 1, "tags": ["z" * 50_000]})

    assert refused.is_error
    assert refused.structured_content["code"] == "arguments_too_large"
    entry = await AuditEntry.objects.aget()
    assert (entry.source, entry.decision) == ("mcp", "invalid")
    assert size(entry.entities) < 1_000


def test_a_sensitive_value_in_an_oversized_argument_is_never_previewed(superuser, settings):
    settings.ASSISTANT = {**settings.ASSISTANT, "MAX_TOOL_ARGUMENT_BYTES": 1_000}
    secret = "hunter2-" + "s" * 2_000

    dispatch("store_secret", {"secret": secret, "label": "wifi"}, user=superuser, source="api")

    assert "hunter2" not in json.dumps(AuditEntry.objects.get().entities)


# The reply's length and the turn's wall-clock time


def test_a_reply_past_its_length_is_cut_short_stored_and_ends_the_turn(
    use_llm, plain_user, settings
):
    peer = use_llm(MAX_REPLY_CHARS=50)
    settings.ASSISTANT = {**settings.ASSISTANT, "TURN_DEADLINE": 10.0}  # (never hangs the suite)
    peer.script(endless("a" * 30, "b" * 30, every=0.01))

    started = time.monotonic()
    turn = run_turn(plain_user, "talk forever")

    assert time.monotonic() - started < 5
    (failure,) = of_type(turn, "RUN_ERROR")
    assert failure["code"] == "reply_too_long"
    stored = turn.assistant_message
    assert stored.status == "failed"
    assert stored.text.startswith("a" * 30 + "b" * 20)
    assert "cut short" in stored.text.lower()
    assert len(stored.text) < 50 + 200
    assert audited() == [("llm_reply", "over_limit")]
    assert len(peer.requests) == 1


@pytest.mark.django_db(transaction=True)
async def test_a_never_ending_stream_ends_at_the_turn_deadline_with_the_reply_stored(
    use_llm, plain_user, settings
):
    peer = use_llm(TIMEOUT=5)
    settings.ASSISTANT = {**settings.ASSISTANT, "TURN_DEADLINE": 1.0}
    peer.script(endless("Let me ", "think ", every=0.05))

    started = time.monotonic()
    async with asyncio.timeout(8):
        turn = await arun_turn(plain_user, "think forever", source="api")
    elapsed = time.monotonic() - started

    assert 1.0 <= elapsed < 3
    (failure,) = of_type(turn, "RUN_ERROR")
    assert failure["code"] == "turn_deadline"
    stored = await sync_to_async(lambda: turn.assistant_message)()
    assert stored.status == "failed"
    assert stored.text.startswith("Let me think and ")
    assert "cut short" in stored.text.lower()
    entries = await sync_to_async(audited)()
    assert entries == [("turn", "over_limit")]
    assert not of_type(turn, "RUN_FINISHED")


@pytest.mark.django_db(transaction=True)
async def test_the_turn_deadline_holds_for_a_tool_that_runs_on(plain_user, settings):
    settings.ASSISTANT = {**settings.ASSISTANT, "TURN_DEADLINE": 0.5}
    from assistant.turns.turn import Turn

    async def forever(turn: Turn) -> None:
        await turn.say("Working ")
        await asyncio.sleep(30)

    from assistant.turns import messages, runs

    started = time.monotonic()
    async with asyncio.timeout(5):
        conversation, message = await sync_to_async(messages.start_turn)(
            plain_user, "work", None, None
        )
        turn = Turn(user=plain_user, conversation=conversation, user_message=message, source="api")
        result = await runs.run_started_turn(turn, forever)

    assert time.monotonic() - started < 2
    assert [f["code"] for f in of_type(result, "RUN_ERROR")] == ["turn_deadline"]
    assert result.assistant_message.text.startswith("Working ")
    assert result.assistant_message.status == "failed"


@pytest.mark.django_db(transaction=True)
async def test_a_stop_still_reaches_a_never_ending_stream_before_the_deadline(
    use_llm, plain_user, settings
):
    peer = use_llm(TIMEOUT=5)
    settings.ASSISTANT = {**settings.ASSISTANT, "TURN_DEADLINE": 30.0}
    peer.script(endless("Thinking ", every=0.05))
    conversation = await Conversation.objects.acreate(user=plain_user, title="stop me")
    layer = get_channel_layer()
    watcher = await layer.new_channel()
    await layer.group_add(group_name(conversation.pk), watcher)
    cancel = CancellationToken()
    running = asyncio.ensure_future(
        arun_turn(plain_user, "think", conversation_id=conversation.pk, cancel=cancel)
    )

    await next_frame(layer, watcher, lambda frame: frame.get("delta") == "Thinking ")
    started = time.monotonic()
    cancel.cancel()
    async with asyncio.timeout(5):
        turn = await running

    assert time.monotonic() - started < 1.5
    (finished,) = of_type(turn, "RUN_FINISHED")
    assert finished["result"]["status"] == "cancelled"
    assert not of_type(turn, "RUN_ERROR")
    assert await sync_to_async(audited)() == []
    await layer.group_discard(group_name(conversation.pk), watcher)


# The bounds are settings, checked


@pytest.mark.parametrize(
    "configured",
    [
        {"TURN_DEADLINE": 0},
        {"MAX_TOOL_ARGUMENT_BYTES": -1},
        {"LLM": {"MAX_TOOL_CALLS_PER_REPLY": 0}},
        {"LLM": {"MAX_TOOL_CALLS_PER_TURN": 2.5}},
        {"LLM": {"MAX_REPLY_CHARS": "lots"}},
    ],
)
def test_a_bound_that_is_not_a_positive_number_is_refused_at_start_up(configured, settings):
    settings.ASSISTANT = configured

    assert [message.id for message in check_settings()] == ["assistant.E002"]


@pytest.mark.django_db(transaction=True)
async def test_the_turn_deadline_stops_a_running_tool_through_its_stop_token(
    use_llm, plain_user, settings
):
    peer = use_llm(TIMEOUT=5)
    settings.ASSISTANT = {**settings.ASSISTANT, "TURN_DEADLINE": 1.0}
    peer.script(tool_calls(call("slow_sync", {"seconds": 30})), text("Never asked."))

    started = time.monotonic()
    async with asyncio.timeout(10):
        turn = await arun_turn(plain_user, "take your time", source="api")

    assert time.monotonic() - started < 3
    assert [f["code"] for f in of_type(turn, "RUN_ERROR")] == ["turn_deadline"]
    assert await sync_to_async(audited)() == [("slow_sync", "cancelled"), ("turn", "over_limit")]
    assert len(peer.requests) == 1


@pytest.mark.parametrize(
    "entities",
    [
        {(1, 2): "a tuple key JSON refuses"},
        {"bytes": b"\x00\xff" * 1_000},
    ],
)
def test_arguments_json_cannot_encode_are_still_measured_not_a_500(entities, plain_user, settings):
    settings.ASSISTANT = {**settings.ASSISTANT, "MAX_TOOL_ARGUMENT_BYTES": 1_000}

    outcome = dispatch("echo_types", entities, user=plain_user, source="api")

    assert outcome.decision == "invalid"
    assert size(AuditEntry.objects.get().entities) < 1_000
