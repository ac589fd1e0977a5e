"""The LLM planner: any OpenAI-compatible chat-completions endpoint, streamed, with native tool calls."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import openai
from asgiref.sync import sync_to_async

from .. import events
from ..chat import redact_message
from ..conf import assistant_settings
from ..dispatch import Outcome
from ..exceptions import LLMUnavailable
from ..models import Message
from . import Intent

if TYPE_CHECKING:
    from ..chat import Turn

logger = logging.getLogger("assistant.planner.llm")
RESULT_LIMIT = 4000  # characters of a tool result the model sees; the UI gets everything
FALLBACK_NOTICE = "The language model is unavailable; I answered with simple keyword matching.\n\n"


def make_client(config: dict[str, Any]) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=config["BASE_URL"],
        api_key=os.environ.get(config["API_KEY_ENV"] or "", "") or "not-needed",
        timeout=float(config["TIMEOUT"]),
        max_retries=0,
    )


def history(turn: Turn, limit: int) -> list[dict[str, Any]]:
    """The conversation's earlier messages as chat messages, newest ``limit`` only."""
    earlier = Message.objects.filter(conversation=turn.conversation)
    if turn.user_message is not None:
        earlier = earlier.exclude(pk=turn.user_message.pk)
    earlier = earlier.order_by("-created_at", "-id")[:limit]
    return [
        {"role": message.role, "content": message.text}
        for message in reversed(list(earlier))
        if message.text
    ]


def result_for_model(outcome: Outcome) -> str:
    """What the model is told about a call: a short summary, never the full data."""
    text = outcome.text
    if len(text) > RESULT_LIMIT:
        text = text[:RESULT_LIMIT] + " …(truncated)"
    summary: dict[str, Any] = {"decision": outcome.decision, "text": text}
    if outcome.code:
        summary["code"] = outcome.code
    if outcome.pending_action is not None:
        summary["note"] = "Waiting for the user to confirm or reject; do not retry."
    return json.dumps(summary)


class LLMPlanner:
    """Streams the model's words; every tool call it proposes still goes through dispatch."""

    async def run(self, turn: Turn) -> None:
        config = assistant_settings.llm
        try:
            await self.converse(turn, config)
        except LLMUnavailable as exc:
            if not config["FALLBACK_TO_KEYWORDS"] or turn.text or turn.outcomes:
                raise
            logger.warning("LLM unavailable, falling back to keywords: %s", exc.message)
            from .keywords import KeywordPlanner

            await turn.emit(
                events.custom("assistant.notice", {"code": exc.code, "message": exc.message})
            )
            await turn.say(FALLBACK_NOTICE)
            await KeywordPlanner().run(turn)

    async def converse(self, turn: Turn, config: dict[str, Any]) -> None:
        client = make_client(config)
        tools = await sync_to_async(turn.site.get_catalog)(turn.user, session=turn.session)
        earlier = await sync_to_async(history)(turn, int(config["MAX_HISTORY"]))
        messages: list[dict[str, Any]] = [{"role": "system", "content": config["SYSTEM_PROMPT"]}]
        messages += earlier
        if turn.user_message is not None:
            messages.append({"role": "user", "content": turn.user_message.text})
        try:
            for _ in range(int(config["MAX_STEPS"])):
                calls = await self.step(turn, client, config, messages, tools)
                if not calls:
                    return
                for call in calls:
                    arguments = _arguments(call["arguments"])
                    outcome = await turn.call(call["name"], arguments, tool_call_id=call["id"])
                    if isinstance(arguments, dict) and turn.user_message is not None:
                        intent = Intent(operation=call["name"], entities=arguments, source="llm")
                        await sync_to_async(redact_message)(turn.user_message, [intent], turn.site)
                    messages.append(
                        {
                            "role": "tool",
                            "tool_call_id": call["id"],
                            "content": result_for_model(outcome),
                        }
                    )
                if turn.interrupts:
                    return  # the run waits for the user's decision
            await turn.say(f"\n\n(I stopped after {config['MAX_STEPS']} steps.)")
        finally:
            await client.close()

    async def step(
        self,
        turn: Turn,
        client: openai.AsyncOpenAI,
        config: dict[str, Any],
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
    ) -> list[dict[str, str]]:
        """One streamed model call: speak its text, return the tool calls it made."""
        text: list[str] = []
        calls: dict[int, dict[str, str]] = {}
        timeout = float(config["TIMEOUT"])
        try:
            stream: Any = await client.chat.completions.create(
                model=config["MODEL"],
                messages=messages,  # type: ignore[arg-type]
                tools=tools or openai.omit,  # type: ignore[arg-type]
                temperature=config["TEMPERATURE"],
                stream=True,
            )
            async for chunk in _bounded(stream, timeout):
                for choice in chunk.choices:
                    delta = choice.delta
                    if delta.content:
                        text.append(delta.content)
                        await turn.say(delta.content)
                    for part in delta.tool_calls or []:
                        slot = calls.setdefault(part.index, {"id": "", "name": "", "arguments": ""})
                        if part.id:
                            slot["id"] = part.id
                        if part.function and part.function.name:
                            slot["name"] += part.function.name
                        if part.function and part.function.arguments:
                            slot["arguments"] += part.function.arguments
        except openai.APIStatusError as exc:
            raise LLMUnavailable(
                f"The language model answered {exc.status_code}: {_short(exc)}", code="llm_error"
            ) from exc
        except openai.APITimeoutError as exc:
            raise LLMUnavailable("The language model did not answer in time.") from exc
        except openai.APIError as exc:
            raise LLMUnavailable(f"The language model is unreachable: {_short(exc)}") from exc
        ordered = [calls[index] for index in sorted(calls)]
        for position, call in enumerate(ordered):
            call["id"] = call["id"] or f"call_{turn.run_id[:8]}_{len(messages)}_{position}"
        if ordered:
            messages.append(
                {
                    "role": "assistant",
                    "content": "".join(text) or None,
                    "tool_calls": [
                        {
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": call["name"], "arguments": call["arguments"]},
                        }
                        for call in ordered
                    ],
                }
            )
        return ordered


async def _bounded(stream: Any, seconds: float) -> AsyncIterator[Any]:
    """The stream's chunks, each within ``seconds`` (keep-alive comments do not count)."""
    chunks = stream.__aiter__()
    try:
        while True:
            try:
                chunk = await asyncio.wait_for(anext(chunks), seconds)
            except StopAsyncIteration:
                return
            except TimeoutError:
                raise LLMUnavailable("The language model stopped answering.") from None
            yield chunk
    finally:
        await stream.close()


def _arguments(raw: str) -> Any:
    """The model's JSON arguments; anything unparseable goes to dispatch to be refused as invalid."""
    try:
        return json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError:
        return raw


def _short(exc: Exception) -> str:
    message = getattr(exc, "message", None) or str(exc)
    return message if len(message) <= 200 else message[:197] + "..."
