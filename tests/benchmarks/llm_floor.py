"""The floor an LLM chat turn is measured against: a bare async Channels consumer doing its job.

Per message it does what an LLM turn that calls one tool does, the simplest correct way: store
the user's message (one thread hop), ask the model with the tool offered, run the tool and audit
it (one hop), ask the model again with the result and forward its words as they come, store the
reply with its call and usage (one hop). The model is awaited on the event loop through ONE
``AsyncOpenAI`` client shared by every socket of the process (``ASSISTANT_LLM_BASE_URL``); no
thread or database connection is held meanwhile. Frames go to its own socket, one AG-UI event a
message (each streamed word too): no event log, no channel layer, no lanes, no planner.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import openai
from asgiref.sync import sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.utils import timezone

from tests.benchmarks.floor import whoami

WHOAMI = {
    "type": "function",
    "function": {
        "name": "whoami",
        "description": "Tell who you are signed in as, and your groups",
        "parameters": {"type": "object", "properties": {}},
    },
}
_client: openai.AsyncOpenAI | None = None


def shared_client() -> openai.AsyncOpenAI:
    """The process's one client of the model (daphne runs one event loop)."""
    global _client
    if _client is None:
        _client = openai.AsyncOpenAI(
            base_url=os.environ["ASSISTANT_LLM_BASE_URL"],
            api_key="not-needed",
            timeout=30,
            max_retries=0,
        )
    return _client


class LLMFloorConsumer(AsyncWebsocketConsumer):
    """``{"type": "message", "text": …, "conversation": …}`` in, one AG-UI run out."""

    async def connect(self) -> None:
        self.user = self.scope["user"]
        self.conversations: dict[str, tuple[Any, list[dict[str, Any]]]] = {}
        await self.accept()

    async def frame(self, **event: Any) -> None:
        await self.send(text_data=json.dumps(event, separators=(",", ":")))

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        content = json.loads(text_data or "{}")
        try:
            await self.turn(content)
        except openai.APIError as exc:  # the model failed: the run ends with an error, not silence
            await self.frame(type="RUN_ERROR", message=str(exc)[:200], code="llm_unavailable")

    async def turn(self, content: dict[str, Any]) -> None:
        """One run: the user's message, a model call, its tool, a model call, the reply."""
        known = self.conversations.get(str(content.get("conversation")))
        conversation, message = await sync_to_async(self.store_message)(
            content["text"], known[0] if known else None
        )
        history = known[1] if known else []
        self.conversations[str(conversation.pk)] = (conversation, history)
        thread, run = str(conversation.pk), uuid.uuid4().hex
        ids = {"threadId": thread, "runId": run}
        await self.frame(type="RUN_STARTED", protocolVersion="1.0", **ids)
        await self.frame(type="TEXT_MESSAGE_START", messageId=str(message.pk), role="user", **ids)
        await self.frame(
            type="TEXT_MESSAGE_CONTENT", messageId=str(message.pk), delta=message.text, **ids
        )
        await self.frame(type="TEXT_MESSAGE_END", messageId=str(message.pk), **ids)
        history.append({"role": "user", "content": message.text})
        reply_id = str(uuid.uuid4())
        usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
        model = ""

        calls: dict[int, dict[str, str]] = {}
        async for chunk in self.ask(history, usage):
            model = chunk.model or model
            for choice in chunk.choices:
                for part in choice.delta.tool_calls or ():
                    call = calls.setdefault(part.index, {"id": "", "name": "", "arguments": ""})
                    call["id"] = part.id or call["id"]
                    if part.function is not None:
                        call["name"] += part.function.name or ""
                        call["arguments"] += part.function.arguments or ""
        records = []
        for call in calls.values():
            await self.frame(
                type="TOOL_CALL_START",
                toolCallId=call["id"],
                toolCallName=call["name"],
                parentMessageId=reply_id,
                **ids,
            )
            await self.frame(type="TOOL_CALL_ARGS", toolCallId=call["id"], delta="{}", **ids)
            await self.frame(type="TOOL_CALL_END", toolCallId=call["id"], **ids)
            record = await sync_to_async(self.run_tool)(conversation, call["id"])
            records.append(record)
            await self.frame(
                type="TOOL_CALL_RESULT",
                messageId=f"{call['id']}-result",
                toolCallId=call["id"],
                content=record["text"],
                role="tool",
                **ids,
            )
        history.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": c["id"],
                        "type": "function",
                        "function": {"name": c["name"], "arguments": "{}"},
                    }
                    for c in calls.values()
                ],
            }
        )
        history += [
            {"role": "tool", "tool_call_id": r["tool_call_id"], "content": r["text"]}
            for r in records
        ]

        words: list[str] = []
        await self.frame(
            type="TEXT_MESSAGE_START",
            timestamp=int(time.time() * 1000),
            messageId=reply_id,
            role="assistant",
            **ids,
        )
        async for chunk in self.ask(history, usage):
            for choice in chunk.choices:
                if choice.delta.content:
                    words.append(choice.delta.content)
                    await self.frame(
                        type="TEXT_MESSAGE_CONTENT",
                        messageId=reply_id,
                        delta=choice.delta.content,
                        **ids,
                    )
        await self.frame(type="TEXT_MESSAGE_END", messageId=reply_id, **ids)
        text = "".join(words)
        history.append({"role": "assistant", "content": text})
        await sync_to_async(self.store_reply)(conversation, reply_id, text, records, model, usage)
        result = {"message": reply_id, "status": "complete"}
        await self.frame(type="RUN_FINISHED", result=result, **ids)

    async def ask(self, history: list[dict[str, Any]], usage: dict[str, int]) -> AsyncIterator[Any]:
        """One streamed model call with the tool offered: its chunks; its usage added up."""
        request: dict[str, Any] = {
            "model": os.environ.get("ASSISTANT_LLM_MODEL", "bench-model"),
            "messages": [{"role": "system", "content": "Be brief."}, *history],
            "tools": [WHOAMI],
        }
        stream = await shared_client().chat.completions.create(
            **request, stream=True, stream_options={"include_usage": True}
        )
        async for chunk in stream:
            if chunk.usage is not None:
                for key in usage:
                    usage[key] += getattr(chunk.usage, key, 0) or 0
            yield chunk

    def store_message(self, text: str, conversation: Any) -> tuple[Any, Any]:
        """The user's message (and its conversation, on the first one)."""
        from assistant.models import Conversation, Message

        if conversation is None:
            conversation = Conversation.objects.create(user=self.user, title=text[:60])
        message = Message.objects.create(conversation=conversation, role="user", text=text)
        return conversation, message

    def run_tool(self, conversation: Any, call_id: str) -> dict[str, Any]:
        """``whoami`` and its audit entry."""
        return whoami(self.user, conversation, call_id)

    def store_reply(
        self,
        conversation: Any,
        reply_id: str,
        text: str,
        records: list[dict[str, Any]],
        model: str,
        usage: dict[str, int],
    ) -> None:
        """The assistant's reply with its calls and what the model spent; the conversation's stamp."""
        from assistant.models import Conversation, Message

        Message.objects.create(
            id=reply_id,
            conversation=conversation,
            role="assistant",
            text=text,
            tool_calls=records,
            model=model,
            **usage,
        )
        Conversation.objects.filter(pk=conversation.pk).update(updated_at=timezone.now())
