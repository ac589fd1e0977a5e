"""The reply event vocabulary: AG-UI events as JSON frames.

The events a turn streams are built as plain dicts, spelled as the ag-ui-protocol models encode
them (tests/stream/test_events.py holds every shape against ``ag_ui.core``); the rarer ones (a
snapshot, an interrupted or cancelled run) are built by the models.
"""

from __future__ import annotations

import json
import time
from typing import Any

from ag_ui.core import (
    AssistantMessage,
    BaseEvent,
    FunctionCall,
    Interrupt,
    MessagesSnapshotEvent,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    TokenUsage,
    UserMessage,
)
from ag_ui.core import (
    ToolCall as AGUIToolCall,
)
from django.core.serializers.json import DjangoJSONEncoder

from ..models import Message

PROTOCOL_VERSION = "1.0"


Event = dict[str, Any]  # an AG-UI event as JSON spells it


def frame(
    event: Event | BaseEvent, *, thread_id: str, run_id: str | None, seq: int = 0
) -> dict[str, Any]:
    """One websocket frame: the AG-UI event as the protocol spells it, plus seq/threadId/runId."""
    data: dict[str, Any] = (
        event if isinstance(event, dict) else event.model_dump(mode="json", by_alias=True)
    )
    data["seq"] = seq
    data["threadId"] = thread_id
    data["runId"] = run_id
    return data


def run_started(thread_id: str, run_id: str) -> Event:
    return {
        "type": "RUN_STARTED",
        "threadId": thread_id,
        "runId": run_id,
        "protocolVersion": PROTOCOL_VERSION,
    }


def run_finished(
    thread_id: str,
    run_id: str,
    *,
    result: Any = None,
    interrupts: list[Interrupt] | None = None,
    cancelled: bool = False,
    pending_tool_calls: list[str] | None = None,
    usage: list[TokenUsage] | None = None,
) -> Event | RunFinishedEvent:
    outcome: Any = None
    if interrupts:
        outcome = RunFinishedInterruptOutcome(interrupts=interrupts)
    elif cancelled:
        outcome = RunFinishedCancelledOutcome()
    elif pending_tool_calls:  # calls of the client's own tools, for it to answer
        outcome = RunFinishedSuccessOutcome(pending_tool_call_ids=pending_tool_calls)
    if outcome is not None or usage is not None:
        return RunFinishedEvent(
            thread_id=thread_id, run_id=run_id, result=result, outcome=outcome, usage=usage
        )
    event: Event = {"type": "RUN_FINISHED", "threadId": thread_id, "runId": run_id}
    if result is not None:  # (JSON values: the message id and its status)
        event["result"] = result
    return event


def run_error(
    message: str, code: str, *, usage: list[TokenUsage] | None = None
) -> Event | RunErrorEvent:
    if usage is not None:
        return RunErrorEvent(message=message, code=code, usage=usage)
    return {"type": "RUN_ERROR", "message": message, "code": code}


def token_usage(model: str, usage: dict[str, int]) -> list[TokenUsage] | None:
    """A turn's summed usage (OpenAI's names) as AG-UI's one entry, or None when none was told."""
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    total = usage.get("total_tokens")
    if prompt is None and completion is None and total is None:
        return None
    return [
        TokenUsage(
            model=model or None, input_tokens=prompt, output_tokens=completion, total_tokens=total
        )
    ]


# What a confirmation interrupt asks for: approve it (true) or reject it (false).
APPROVED: dict[str, Any] = {"approved": {"type": "boolean"}}
APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": APPROVED,
    "required": ["approved"],
}


def approval_schema(shown: dict[str, Any]) -> dict[str, Any]:
    """What answering this pending action takes, as JSON Schema a generic client can follow:
    ``approved``, plus the phrase its card asks to be typed or the reason its policy asks for,
    both needed only to approve (rejecting needs nothing more)."""
    needed: dict[str, Any] = {}
    if shown["confirm_phrase"]:
        needed["phrase"] = {
            "type": "string",
            "description": f"Type {shown['confirm_phrase']!r} to confirm (case does not matter).",
        }
    if shown["policy"] == "confirm_with_reason":
        needed["reason"] = {"type": "string", "description": "Why you approve: required."}
    if not needed:
        return APPROVAL_SCHEMA
    return {
        "type": "object",
        "properties": {**APPROVED, **needed},
        "required": ["approved"],
        "if": {"properties": {"approved": {"const": True}}},
        "then": {"required": list(needed)},
    }


def confirmation_interrupt(
    action: Any, tool_call_id: str | None, entities: dict[str, Any]
) -> Interrupt:
    """A pending action as the AG-UI interrupt a client answers with confirm or reject."""
    shown = action.shown()
    return Interrupt(
        id=shown["id"],
        reason="confirmation_required",
        message=shown["summary"],
        tool_call_id=tool_call_id,
        response_schema=approval_schema(shown),
        expires_at=shown["expires_at"],
        # the approval card's facts (shown()), with the entities as the call's record shows them
        metadata={
            name: value
            for name, value in {**shown, "entities": entities}.items()
            if name not in ("id", "summary", "expires_at")
        },
    )


def now_ms() -> int:
    """An event's ``timestamp``: milliseconds since the epoch, as AG-UI counts them."""
    return int(time.time() * 1000)


def text_start(message_id: str, role: str = "assistant") -> Event:
    return {
        "type": "TEXT_MESSAGE_START",
        "timestamp": now_ms(),
        "messageId": message_id,
        "role": role,
    }


def text_content(message_id: str, delta: str) -> Event:
    return {"type": "TEXT_MESSAGE_CONTENT", "messageId": message_id, "delta": delta}


def text_end(message_id: str) -> Event:
    return {"type": "TEXT_MESSAGE_END", "messageId": message_id}


def tool_call_start(tool_call_id: str, name: str, parent_message_id: str | None) -> Event:
    event: Event = {"type": "TOOL_CALL_START", "toolCallId": tool_call_id, "toolCallName": name}
    if parent_message_id is not None:
        event["parentMessageId"] = parent_message_id
    return event


def tool_call_args(tool_call_id: str, delta: str) -> Event:
    return {"type": "TOOL_CALL_ARGS", "toolCallId": tool_call_id, "delta": delta}


def tool_call_end(tool_call_id: str) -> Event:
    return {"type": "TOOL_CALL_END", "toolCallId": tool_call_id}


def tool_call_result(message_id: str, tool_call_id: str, content: str) -> Event:
    return {
        "type": "TOOL_CALL_RESULT",
        "messageId": message_id,
        "toolCallId": tool_call_id,
        "content": content,
        "role": "tool",
    }


def custom(name: str, value: Any) -> Event:
    return {"type": "CUSTOM", "name": name, "value": _json(value)}


def _json(value: Any) -> Any:
    """The value as JSON gives it back (dates, UUIDs and the like as Django's encoder writes them)."""
    return json.loads(json.dumps(value, cls=DjangoJSONEncoder))


def messages_snapshot(messages: list[Any]) -> MessagesSnapshotEvent:
    """The stored conversation, for a client that reconnects after its events were dropped."""
    converted: list[Any] = []
    for message in messages:
        if message.role == Message.Role.USER:
            converted.append(
                UserMessage(
                    id=str(message.pk),
                    content=message.text,
                    metadata={"createdAt": message.created_at.isoformat()},
                )
            )
            continue
        calls = [
            AGUIToolCall(
                id=call.get("tool_call_id") or f"{message.pk}-{index}",
                function=FunctionCall(
                    name=call["operation"], arguments=json.dumps(call.get("entities") or {})
                ),
            )
            for index, call in enumerate(message.tool_calls or [])
        ]
        records = list(zip(calls, message.tool_calls or [], strict=True))
        decisions = {call.id: record.get("decision") for call, record in records}
        # what each call returned, as the live TOOL_CALL_RESULT and assistant.outcome said it
        results = {
            call.id: {
                "text": record.get("text") or "",
                "data": record.get("data"),
                "data_omitted": bool(record.get("data_omitted")),
            }
            for call, record in records
        }
        converted.append(
            AssistantMessage(
                id=str(message.pk),
                content=message.text,
                tool_calls=calls or None,
                metadata={
                    "status": message.status,
                    "decisions": decisions,
                    "results": results,
                    "createdAt": message.created_at.isoformat(),
                },
            )
        )
    return MessagesSnapshotEvent(messages=converted)
