"""Every event shape the server emits is an AG-UI event, spelled exactly as ``ag_ui.core`` spells it."""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
from typing import Any

import pytest
from ag_ui.core import Event, Interrupt, TokenUsage
from pydantic import TypeAdapter

from assistant.models import Message
from assistant.stream import events

AG_UI_EVENT: TypeAdapter[Any] = TypeAdapter(Event)
USAGE = [TokenUsage(model="m", input_tokens=3, output_tokens=4, total_tokens=7)]
INTERRUPT = Interrupt(
    id="a1", reason="confirmation_required", message="Cancel order 7?", tool_call_id="call_1"
)

SHAPES = {
    "run started": events.run_started("thread", "run"),
    "reply text start": events.text_start("m1"),
    "user text start": events.text_start("m0", role="user"),
    "text content": events.text_content("m1", "pong"),
    "text end": events.text_end("m1"),
    "tool call start": events.tool_call_start("call_1", "ping", "m1"),
    "tool call start, no parent": events.tool_call_start("call_1", "ping", None),
    "tool call args": events.tool_call_args("call_1", '{"order_id": 7}'),
    "tool call end": events.tool_call_end("call_1"),
    "tool call result": events.tool_call_result("call_1-result", "call_1", "pong"),
    "custom": events.custom("assistant.outcome", {"decision": "executed", "data": [1, None]}),
    "custom, Django values": events.custom(
        "assistant.job",
        {"at": dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC), "id": uuid.UUID(int=1)}
        | {"amount": decimal.Decimal("1.50")},
    ),
    "run finished": events.run_finished("thread", "run"),
    "run finished, result": events.run_finished(
        "thread", "run", result={"message": "m1", "status": "complete"}
    ),
    "run finished, interrupted": events.run_finished("thread", "run", interrupts=[INTERRUPT]),
    "run finished, cancelled": events.run_finished("thread", "run", cancelled=True),
    "run finished, client calls": events.run_finished(
        "thread", "run", pending_tool_calls=["call_2"]
    ),
    "run finished, usage": events.run_finished("thread", "run", usage=USAGE),
    "run error": events.run_error("Sorry.", "turn_failed"),
    "run error, usage": events.run_error("Sorry.", "turn_failed", usage=USAGE),
    "snapshot": events.messages_snapshot(
        [
            Message(role="user", text="ping"),
            Message(role="assistant", text="pong", tool_calls=[{"operation": "ping"}]),
        ]
    ),
}


@pytest.mark.parametrize("event", SHAPES.values(), ids=SHAPES.keys())
def test_every_frame_the_server_emits_is_the_ag_ui_models_own_encoding(event):
    frame = events.frame(event, thread_id="thread", run_id="run")

    model = AG_UI_EVENT.validate_python(frame)

    assert model.model_dump(mode="json", by_alias=True) == frame
    assert {"seq", "threadId", "runId"} <= frame.keys()
    assert set(model.model_extra or {}) <= {"seq", "threadId", "runId"}  # no field misspelled


def test_a_custom_events_value_is_json_as_djangos_encoder_writes_it():
    frame = events.frame(SHAPES["custom, Django values"], thread_id="thread", run_id=None)

    assert frame["value"] == {
        "at": "2026-01-02T03:04:05Z",
        "id": "00000000-0000-0000-0000-000000000001",
        "amount": "1.50",
    }
