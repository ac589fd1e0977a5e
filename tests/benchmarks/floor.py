"""The floor a chat turn's cost is measured against: a bare Channels consumer doing its job.

Per message it makes the same rows a keyword turn running ``whoami`` makes (the user's message,
the tool's read of the user's groups, the audit entry, the reply, the conversation's new stamp),
in one thread hop, and sends the same 13 AG-UI frames to its own socket with a ``json.dumps``
each: no event log, no channel-layer fan-out, no lanes, no planner, no pydantic models.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from asgiref.sync import sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.utils import timezone


class FloorConsumer(AsyncWebsocketConsumer):
    """``{"type": "message", "text": …, "conversation": …}`` in, one AG-UI run out."""

    async def connect(self) -> None:
        self.user = self.scope["user"]
        self.conversations: dict[str, Any] = {}
        await self.accept()

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        content = json.loads(text_data or "{}")
        known = self.conversations.get(str(content.get("conversation")))
        conversation, message, reply, call = await sync_to_async(self.store)(content["text"], known)
        self.conversations[str(conversation.pk)] = conversation
        thread, run = str(conversation.pk), uuid.uuid4().hex
        now = int(time.time() * 1000)
        tool_call, reply_id = call["tool_call_id"], str(reply.pk)
        frames: list[dict[str, Any]] = [
            {"type": "RUN_STARTED", "threadId": thread, "runId": run, "protocolVersion": "1.0"},
            {"type": "TEXT_MESSAGE_START", "timestamp": now, "messageId": str(message.pk)},
            {"type": "TEXT_MESSAGE_CONTENT", "messageId": str(message.pk), "delta": message.text},
            {"type": "TEXT_MESSAGE_END", "messageId": str(message.pk)},
            {
                "type": "TOOL_CALL_START",
                "toolCallId": tool_call,
                "toolCallName": "whoami",
                "parentMessageId": reply_id,
            },
            {"type": "TOOL_CALL_ARGS", "toolCallId": tool_call, "delta": "{}"},
            {"type": "TOOL_CALL_END", "toolCallId": tool_call},
            {
                "type": "TOOL_CALL_RESULT",
                "messageId": f"{tool_call}-result",
                "toolCallId": tool_call,
                "content": call["text"],
                "role": "tool",
            },
            {"type": "CUSTOM", "name": "assistant.outcome", "value": call},
            {"type": "TEXT_MESSAGE_START", "timestamp": now, "messageId": reply_id},
            {"type": "TEXT_MESSAGE_CONTENT", "messageId": reply_id, "delta": reply.text},
            {"type": "TEXT_MESSAGE_END", "messageId": reply_id},
            {
                "type": "RUN_FINISHED",
                "threadId": thread,
                "runId": run,
                "result": {"message": reply_id, "status": "complete"},
            },
        ]
        frames[1]["role"] = "user"
        frames[9]["role"] = "assistant"
        for seq, frame in enumerate(frames, start=1):
            frame.update(seq=seq, threadId=thread, runId=run)
            await self.send(text_data=json.dumps(frame, separators=(",", ":")))

    def store(self, text: str, conversation: Any) -> tuple[Any, Any, Any, dict[str, Any]]:
        """The turn's rows: a new conversation on the first message, then five queries."""
        from assistant.models import Conversation, Message

        if conversation is None:
            conversation = Conversation.objects.create(user=self.user, title=text[:60])
        message = Message.objects.create(conversation=conversation, role="user", text=text)
        call = {
            **whoami(self.user, conversation, f"call_{uuid.uuid4().hex[:16]}"),
            "code": None,
            "task_id": None,
            "data": None,
            "pending_action": None,
        }
        answer = call["text"]
        reply = Message.objects.create(
            conversation=conversation, role="assistant", text=answer, tool_calls=[call]
        )
        conversation.updated_at = timezone.now()
        Conversation.objects.filter(pk=conversation.pk).update(updated_at=conversation.updated_at)
        return conversation, message, reply, call


def whoami(user: Any, conversation: Any, call_id: str) -> dict[str, Any]:
    """``whoami`` run the simplest way and its audit entry: the call as the turn records it."""
    from assistant.models import AuditEntry

    started = time.perf_counter()
    groups = ", ".join(user.groups.values_list("name", flat=True)) or "no groups"
    answer = f"You are {user.get_username()} (user; {groups})."
    audit = AuditEntry.objects.create(
        user=user,
        username=user.get_username(),
        operation="whoami",
        domain="account",
        risk_level="safe",
        decision="executed",
        entities={},
        duration_ms=(time.perf_counter() - started) * 1000,
        source="websocket",
        conversation=conversation,
    )
    return {
        "tool_call_id": call_id,
        "operation": "whoami",
        "entities": {},
        "decision": "executed",
        "text": answer,
        "audit_id": audit.pk,
    }
