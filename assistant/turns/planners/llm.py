"""The LLM planner: any OpenAI-compatible chat-completions endpoint, streamed, with native tool calls."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import openai
from asgiref.sync import sync_to_async
from django.utils.translation import gettext, gettext_noop
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from ... import telemetry
from ...conf import assistant_settings
from ...core.llm_client import shared_async_client
from ...dispatch.calls import Outcome
from ...dispatch.catalog import get_catalog
from ...exceptions import LLMError, LLMUnavailable, ReplyTooLong
from ...models import Message
from ...stream import events
from ..budgets import areserve_call, check_budget
from ..turn import CLIENT_TOOL
from .keywords import KeywordPlanner
from .llm_bounds import Tally, within_bounds
from .repeats import STUCK_NOTICE, CallMemory
from .streamed_calls import StreamedCalls
from .text_calls import HeldText, as_intents, as_message
from .told import told

if TYPE_CHECKING:
    from ..turn import Turn

logger = logging.getLogger("assistant.planner.llm")
RESULT_LIMIT = 4000  # characters of a tool result the model sees; the UI gets everything
FALLBACK_NOTICE = gettext_noop(
    "The language model is unavailable; I answered with simple keyword matching.\n\n"
)
HELD_LIMIT = 64_000  # characters of a reply held as a possible written call; past them, words
CLIENT_PREFIX = "client__"  # the namespace of an AG-UI client's own tools, as the model sees them


def history(turn: Turn, limit: int) -> list[dict[str, Any]]:
    """The conversation's earlier messages as chat messages, newest ``limit`` only.

    A run that brings the client's tool results continues the last reply: it is sent with its
    calls and their results, as the model made them.
    """
    earlier = Message.objects.filter(conversation=turn.conversation)
    if turn.user_message is not None:
        earlier = earlier.exclude(pk=turn.user_message.pk)
    newest = list(earlier.order_by("-created_at", "-id")[:limit])
    continued = newest.pop(0) if turn.client_results and newest else None
    shown = [
        {"role": message.role, "content": message.text}
        for message in reversed(newest)
        if message.text
    ]
    if continued is not None:
        shown += _with_calls(continued, turn)
    return shown


def _with_calls(message: Message, turn: Turn) -> list[dict[str, Any]]:
    """A stored reply with its tool calls, each followed by its result (the client's own too)."""
    records = message.tool_calls or []
    client = {result.tool_call_id: result.content for result in turn.client_results}
    calls = [
        {
            **(record.get("provider_extra") or {}),  # as the model sent it (a thought signature)
            "id": record["tool_call_id"],
            "type": "function",
            "function": {
                "name": (CLIENT_PREFIX if record["decision"] == CLIENT_TOOL else "")
                + record["operation"],
                "arguments": json.dumps(record.get("entities") or {}),
            },
        }
        for record in records
    ]
    shown: list[dict[str, Any]] = [
        {"role": "assistant", "content": message.text or None, "tool_calls": calls}
    ]
    for record in records:
        if record["decision"] == CLIENT_TOOL:
            content = client.get(record["tool_call_id"], "")
        else:
            content = told(record.get("text") or "", record["decision"])
        shown.append({"role": "tool", "tool_call_id": record["tool_call_id"], "content": content})
    return shown


def prepare(
    turn: Turn, config: dict[str, Any]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A turn's first sync step: its turns-a-minute budget (``BudgetExceeded``), then the
    user's catalog and the conversation's history, in one hop."""
    check_budget(turn.user, conversation=turn.conversation, source=turn.source)
    tools = get_catalog(turn.user, session=turn.session, site=turn.site, ceiling=turn.ceiling)
    turn.offered = frozenset(tool["function"]["name"] for tool in tools)
    return tools, history(turn, config["MAX_HISTORY"])


def kept_extras(calls: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """What the model sent with each call besides its id and function, by call id, to store
    with it (no more of it than a call's arguments may bring)."""
    kept = {}
    for call in calls:
        extra = call["extra"]
        if extra and len(json.dumps(extra)) <= assistant_settings.MAX_TOOL_ARGUMENT_BYTES:
            kept[call["id"]] = extra
    return kept


def client_tool_specs(turn: Turn) -> list[dict[str, Any]]:
    """The client's own tools in the model's catalog, under their namespace."""
    return [
        {
            "type": "function",
            "function": {
                "name": CLIENT_PREFIX + tool.name,
                "description": tool.description,
                "parameters": tool.parameters,
            },
        }
        for tool in turn.client_tools
    ]


def result_for_model(outcome: Outcome) -> str:
    """What the model is told about a call: a short summary, never the full data."""
    text = outcome.text
    if len(text) > RESULT_LIMIT:
        text = text[:RESULT_LIMIT] + " …(truncated)"
    task_id = outcome.result.task_id if outcome.result is not None else None
    return told(text, str(outcome.decision), code=outcome.code or "", task_id=task_id or "")


class LLMPlanner:
    """Streams the model's words; every tool call it proposes still goes through dispatch."""

    async def run(self, turn: Turn) -> None:
        config = assistant_settings.llm
        turn.answered_by = "llm"
        tools, earlier = await sync_to_async(prepare)(turn, config)
        try:
            await self.converse(turn, config, tools, earlier)
        except LLMUnavailable as exc:
            if not config["FALLBACK_TO_KEYWORDS"] or turn.text or turn.outcomes:
                raise
            logger.warning("LLM unavailable, falling back to keywords: %s", exc.message)
            fallback = KeywordPlanner()
            turn.answered_by = "keywords (fallback)"
            intents = await fallback.plan(turn)  # before the notice echoes the message
            await turn.emit(
                events.custom("assistant.notice", {"code": exc.code, "message": exc.message})
            )
            await turn.say(gettext(FALLBACK_NOTICE))
            await fallback.run(turn, intents)

    async def converse(
        self,
        turn: Turn,
        config: dict[str, Any],
        tools: list[dict[str, Any]],
        earlier: list[dict[str, Any]],
    ) -> None:
        client = shared_async_client(config)  # the event loop's: one connection pool, kept
        tools = tools + client_tool_specs(turn)
        own = {CLIENT_PREFIX + tool.name: tool.name for tool in turn.client_tools}
        messages: list[dict[str, Any]] = [{"role": "system", "content": config["SYSTEM_PROMPT"]}]
        messages += earlier
        if turn.user_message is not None:
            messages.append({"role": "user", "content": turn.user_message.text})
        tally = Tally()
        memory = CallMemory(turn.site)
        for _ in range(config["MAX_STEPS"]):
            # (what a result said may steer the calls of this reply: they may be asked first)
            read = any(message.get("role") == "tool" for message in messages)
            calls = await self.step(turn, client, config, messages, tools, tally)
            if not calls:
                return
            turn.call_extras.update(kept_extras(calls))
            calls, refused = within_bounds(config, calls, tally)
            parsed = [_arguments(call["arguments"]) for call in calls]
            for call, arguments in zip(calls, parsed, strict=True):
                turn.identify(call["name"], arguments)  # before the first call echoes
            for call, arguments in zip(calls, parsed, strict=True):
                if call["name"] in own:  # the client runs it; never dispatched here
                    await turn.propose_client_call(call["id"], own[call["name"]], call["arguments"])
                    continue
                answer = await self.run_call(turn, memory, call, arguments, after_results=read)
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": answer})
            await refused.tell(turn, messages)
            if turn.interrupts or turn.client_calls:
                return  # the run waits for the user's decision, or the client's results
            if memory.stuck(len(calls)):
                await turn.say(gettext(STUCK_NOTICE))
                return
        stopped = gettext("(I stopped after %(steps)s steps.)") % {"steps": config["MAX_STEPS"]}
        await turn.say(f"\n\n{stopped}")

    async def run_call(
        self,
        turn: Turn,
        memory: CallMemory,
        call: dict[str, Any],
        arguments: Any,
        *,
        after_results: bool = False,
    ) -> str:
        """Dispatch one call (an identical earlier one's result instead): what the model is told."""
        earlier = memory.earlier(call["name"], arguments)
        if earlier is not None:
            turn.repeats.append(call["name"][:64])
            return earlier
        outcome = await turn.call(
            call["name"],
            arguments,
            tool_call_id=call["id"],
            arrival=call["arrival"],
            after_results=after_results,
        )
        answer = result_for_model(outcome)
        memory.remember(call["name"], arguments, answer)
        return answer

    async def step(
        self,
        turn: Turn,
        client: openai.AsyncOpenAI,
        config: dict[str, Any],
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        tally: Tally | None = None,
    ) -> list[dict[str, Any]]:
        """One streamed model call: speak its text (to ``MAX_REPLY_CHARS`` over the turn),
        return the tool calls it made (``MAX_TOOL_CALLS_PER_REPLY`` and one more, kept)."""
        await turn.confirm_credential()  # a token revoked, a session ended: no more model calls
        tally = tally if tally is not None else Tally()
        text: list[str] = []
        most = config["MAX_REPLY_CHARS"]

        async def speak(delta: str) -> None:
            room = most - tally.chars
            if len(delta) > room:
                delta = delta[:room]
                tally.chars = most
                text.append(delta)
                await turn.say(delta)
                raise ReplyTooLong(
                    gettext(
                        "Cut short: the reply reached the %(most)s characters a reply may have."
                    )
                    % {"most": f"{most:,}"}
                )
            tally.chars += len(delta)
            text.append(delta)
            await turn.say(delta)

        calls = StreamedCalls(
            keep=config["MAX_TOOL_CALLS_PER_REPLY"] + 1,
            max_bytes=assistant_settings.MAX_TOOL_ARGUMENT_BYTES,
        )
        held = HeldText(speak, limit=HELD_LIMIT) if config["TEXT_TOOL_CALLS"] else None
        budget = await areserve_call(turn, messages, tools)  # refused: BudgetExceeded
        turn.publisher.flush()  # (RUN_STARTED and the rest need not wait for the model's words)
        with telemetry.model_span(config) as span:
            try:
                await stream_reply(
                    client,
                    config,
                    messages,
                    tools,
                    on_text=speak if held is None else held.hear,
                    on_usage=budget.metered(turn.count_usage),
                    max_tokens=budget.reply_tokens,
                    calls=calls,
                )
            except Exception:
                if held is not None:
                    await held.release()  # a reply that failed keeps its words so far
                raise
            finally:
                telemetry.answered(span, turn.model, turn.step_usage, calls.finish_reasons)
                turn.end_step()
                await budget.asettle("".join(text))  # what it spent, even failed or stopped
        prefix = f"call_{turn.run_id[:8]}_{len(messages)}"
        ordered = calls.finished(prefix=prefix)
        written = held.calls(turn.offered or ()) if held is not None and not ordered else []
        if held is not None and not written:
            await held.release()
        tally.asked = len(ordered) + calls.dropped + len(written)
        intents = [call.as_intent() | {"arrival": "native"} for call in ordered]
        intents += as_intents(written, prefix)
        if intents:
            messages.append(
                {
                    "role": "assistant",
                    "content": "".join(text) or None,
                    "tool_calls": [call.as_message() for call in ordered]
                    + [as_message(intent) for intent in intents if intent["arrival"] == "text"],
                }
            )
        return intents


async def stream_reply(
    client: openai.AsyncOpenAI,
    config: dict[str, Any],
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    *,
    on_text: Callable[[str], Awaitable[None]],
    on_usage: Callable[[str, dict[str, int] | None], None],
    max_tokens: int | None = None,
    calls: StreamedCalls | None = None,
) -> StreamedCalls:
    """One streamed completion: its words to ``on_text``, its usage to ``on_usage``, its calls
    merged (into ``calls``, bounded as it is), its reply capped at ``max_tokens``; any failure
    of the endpoint is ``LLMUnavailable``."""
    calls = calls if calls is not None else StreamedCalls()
    try:
        stream = await _open_stream(client, config, messages, tools, max_tokens)
        async for chunk in _bounded(stream, config["STREAM_TIMEOUT"]):
            on_usage(chunk.model or config["MODEL"], _usage(chunk))
            # Usage-only and keep-alive chunks have no choices (Azure, Mistral, OpenAI).
            for choice in chunk.choices or ():
                delta = choice.delta
                if choice.finish_reason:
                    calls.finish_reasons.append(str(choice.finish_reason))
                if delta is None:
                    continue
                # Reasoning deltas (reasoning_content, reasoning) are never the answer.
                if delta.content:
                    await on_text(delta.content)
                for part in delta.tool_calls or ():
                    calls.add(part)
    except openai.APIStatusError as exc:
        raise LLMError(
            gettext("The language model answered %(status)s: %(error)s")
            % {"status": exc.status_code, "error": _short(exc)}
        ) from exc
    except openai.APITimeoutError as exc:
        raise LLMUnavailable(gettext("The language model did not answer in time.")) from exc
    except openai.APIError as exc:
        raise LLMUnavailable(
            gettext("The language model is unreachable: %(error)s") % {"error": _short(exc)}
        ) from exc
    return calls


# Endpoints that refused ``stream_options`` once (some older local servers do): not asked again.
_refuses_usage: set[str | None] = set()


async def _open_stream(
    client: openai.AsyncOpenAI,
    config: dict[str, Any],
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    max_tokens: int | None = None,
) -> Any:
    """Start a streamed completion asking for usage; without it where the server refuses."""
    request: dict[str, Any] = {
        "model": config["MODEL"],
        "messages": messages,
        "tools": tools or openai.omit,
        "temperature": config["TEMPERATURE"],
        "stream": True,
    }
    if max_tokens is not None:
        request[_cap_name(config)] = max_tokens
    if config["BASE_URL"] not in _refuses_usage:
        try:
            return await _post_stream(
                client, {**request, "stream_options": {"include_usage": True}}
            )
        except openai.BadRequestError as exc:
            if _refused_cap(exc, request, config):
                return await _open_stream(client, config, messages, tools, max_tokens)
            if "stream_options" not in str(exc) and "include_usage" not in str(exc):
                raise
            logger.info("%s refuses stream_options; asking without usage", config["BASE_URL"])
            _refuses_usage.add(config["BASE_URL"])
    return await _post_stream(client, request)


async def _post_stream(client: openai.AsyncOpenAI, request: dict[str, Any]) -> Any:
    """``client.chat.completions.create(**request)``, without its recursive transform of the
    request (messages and the whole tool catalog, ~200 calls and some milliseconds of CPU a
    request): ours is plain JSON already."""
    body = {key: value for key, value in request.items() if value is not openai.omit}
    return await client.post(
        "/chat/completions",
        body=body,
        cast_to=ChatCompletion,
        stream=True,
        stream_cls=openai.AsyncStream[ChatCompletionChunk],
    )


# (endpoint, model) pairs that refused max_tokens for max_completion_tokens (OpenAI's reasoning
# models): asked with that from then on.
_caps_completion: set[tuple[str | None, str | None]] = set()


def _cap_name(config: dict[str, Any]) -> str:
    """How the endpoint wants a reply's cap named."""
    key = (config["BASE_URL"], config["MODEL"])
    return "max_completion_tokens" if key in _caps_completion else "max_tokens"


def _refused_cap(
    exc: openai.BadRequestError, request: dict[str, Any], config: dict[str, Any]
) -> bool:
    """Whether the endpoint refused ``max_tokens`` for ``max_completion_tokens`` (now learnt)."""
    if "max_tokens" not in request or "max_completion_tokens" not in str(exc):
        return False
    _caps_completion.add((config["BASE_URL"], config["MODEL"]))
    return True


def _usage(chunk: Any) -> dict[str, int] | None:
    """Token counts wherever a server puts them: ``usage``, or an extension such as Groq's."""
    usage = getattr(chunk, "usage", None)
    if usage is None:
        extra = getattr(chunk, "model_extra", None) or {}
        for extension in extra.values():
            if isinstance(extension, dict) and isinstance(extension.get("usage"), dict):
                usage = extension["usage"]
                break
    if usage is None:
        return None
    fields = usage if isinstance(usage, dict) else vars(usage)
    counts = {
        name: fields.get(name) for name in ("prompt_tokens", "completion_tokens", "total_tokens")
    }
    if not any(isinstance(value, int) for value in counts.values()):
        return None
    return {name: value if isinstance(value, int) else 0 for name, value in counts.items()}


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
                raise LLMUnavailable(gettext("The language model stopped answering.")) from None
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
