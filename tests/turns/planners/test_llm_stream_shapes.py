"""The LLM planner against the stream shapes real OpenAI-compatible servers send (tests/stream_shapes.py),
replayed by a local server through the real ``openai`` client, through whole turns."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rest_framework.test import APIClient

from assistant.models import AuditEntry
from assistant.turns.runs import run_turn
from tests.audit_trail import audited
from tests.openai_peer import call, raw, text, tool_calls
from tests.openai_peer import openai_peer as openai_peer  # the fixtures
from tests.openai_peer import use_llm as use_llm
from tests.sockets import connect
from tests.stream_shapes import SHAPES, SIGNATURE
from tests.turns.reading import read_told

pytestmark = pytest.mark.django_db

CALL_SHAPES = [name for name, make in SHAPES.items() if make().calls]
TEXT_SHAPES = [name for name, make in SHAPES.items() if not make().calls]


def proposed(request: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool calls of the last assistant message sent back to the model."""
    (assistant,) = [
        m for m in request["messages"] if m["role"] == "assistant" and m.get("tool_calls")
    ]
    return assistant["tool_calls"]


def answered(request: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (m["tool_call_id"], read_told(m["content"]))
        for m in request["messages"]
        if m["role"] == "tool"
    ]


def shown(frames: list[dict[str, Any]], message_id: str) -> str:
    return "".join(
        f["delta"]
        for f in frames
        if f["type"] == "TEXT_MESSAGE_CONTENT" and f["messageId"] == message_id
    )


@pytest.mark.parametrize("name", CALL_SHAPES)
def test_every_call_shape_dispatches_each_call_once_and_sends_the_history_back(
    name, use_llm, plain_user
):
    shape = SHAPES[name]()
    peer = use_llm()
    peer.script(raw(*shape.chunks), text("Done."))

    turn = run_turn(plain_user, "ping, and pong twice")

    assert audited() == [(operation, "executed", "rest") for operation, _ in shape.calls]
    arrival = "text" if name.startswith("text_") else "native"  # (the audit says how it came)
    assert set(AuditEntry.objects.values_list("arrival", flat=True)) == {arrival}
    calls = proposed(peer.requests[1])
    assert [
        (c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls
    ] == shape.calls
    ids = [c["id"] for c in calls]
    assert all(ids)
    assert len(set(ids)) == len(ids)
    assert [call_id for call_id, _ in answered(peer.requests[1])] == ids
    assert [result["decision"] for _, result in answered(peer.requests[1])] == ["executed"] * len(
        ids
    )
    started = [f for f in turn.frames if f["type"] == "TOOL_CALL_START"]
    assert [(f["toolCallName"], f["toolCallId"]) for f in started] == [
        (c["function"]["name"], c["id"]) for c in calls
    ]
    assert shown(turn.frames, str(turn.assistant_message.pk)) == "Done."
    for sent in calls:
        for key, value in shape.extras.get(sent["function"]["name"], {}).items():
            assert sent[key] == value


def test_a_thought_signature_goes_back_exactly_as_it_came(use_llm, plain_user):
    peer = use_llm()
    peer.script(raw(*SHAPES["gemini3_thought_signature"]().chunks), text("Done."))

    run_turn(plain_user, "ping, and pong twice")

    ping, apong = proposed(peer.requests[1])
    assert ping["extra_content"] == {"google": {"thought_signature": SIGNATURE}}
    assert "extra_content" not in apong


@pytest.mark.parametrize("name", TEXT_SHAPES)
def test_every_text_shape_shows_only_the_answer(name, use_llm, plain_user):
    shape = SHAPES[name]()
    use_llm().script(raw(*shape.chunks))

    turn = run_turn(plain_user, "hello")

    assert shown(turn.frames, str(turn.assistant_message.pk)) == shape.said
    assert turn.assistant_message.text == shape.said
    assert turn.assistant_message.status == "complete"
    assert "greets me" not in json.dumps(turn.frames)  # reasoning is never the answer
    assert audited() == []


def test_a_whole_rest_turn_on_the_same_index_shape(use_llm, plain_user):
    peer = use_llm()
    peer.script(raw(*SHAPES["same_index_distinct_ids"]().chunks), text("Both done."))
    client = APIClient()
    client.force_login(plain_user)

    response = client.post("/assistant/api/messages/", {"message": "ping and pong"}, format="json")

    assert response.status_code == 201
    body = response.json()
    assert [o["operation"] for o in body["outcomes"]] == ["ping", "apong"]
    assert [o["decision"] for o in body["outcomes"]] == ["executed", "executed"]
    assert body["assistant_message"]["text"] == "Both done."
    assert len(peer.requests) == 2


@pytest.mark.django_db(transaction=True)
async def test_a_whole_websocket_turn_on_the_gemini3_shape(use_llm, plain_user):
    peer = use_llm()
    peer.script(raw(*SHAPES["gemini3_thought_signature"]().chunks), text("Both done."))
    socket = await connect(plain_user)
    try:
        await socket.send_json_to({"type": "message", "text": "ping and pong"})
        frames: list[dict[str, Any]] = []
        while not frames or frames[-1]["type"] not in ("RUN_FINISHED", "RUN_ERROR"):
            frames.append(await socket.receive_json_from(timeout=10))
    finally:
        await socket.disconnect()

    assert frames[-1]["type"] == "RUN_FINISHED"
    results = [f for f in frames if f["type"] == "TOOL_CALL_RESULT"]
    assert len(results) == 2
    assert [f["toolCallName"] for f in frames if f["type"] == "TOOL_CALL_START"] == [
        "ping",
        "apong",
    ]
    assert "Both done." in "".join(
        f.get("delta", "") for f in frames if f["type"] == "TEXT_MESSAGE_CONTENT"
    )
    assert (
        proposed(peer.requests[1])[0]["extra_content"]["google"]["thought_signature"] == SIGNATURE
    )


def test_arguments_the_model_got_wrong_go_back_as_errors_it_can_correct(use_llm, plain_user):
    peer = use_llm()
    peer.script(
        tool_calls(call("apong", '{"times": 2')),  # cut-off JSON
        tool_calls(call("apong", {"times": "twice"})),  # refused by entity validation
        tool_calls(call("a_pong", {"times": 2})),  # no such tool
        tool_calls(call("apong", {"times": 2})),
        text("Pong, pong."),
    )

    turn = run_turn(plain_user, "pong twice")

    assert audited() == [
        ("apong", "invalid", "rest"),
        ("apong", "invalid", "rest"),
        ("a_pong", "unknown", "rest"),
        ("apong", "executed", "rest"),
    ]
    codes = [answered(request)[-1][1].get("code") for request in peer.requests[1:4]]
    assert codes == ["invalid_entities", "invalid_entities", "unknown_operation"]
    assert turn.assistant_message.status == "complete"
    assert shown(turn.frames, str(turn.assistant_message.pk)) == "Pong, pong."
