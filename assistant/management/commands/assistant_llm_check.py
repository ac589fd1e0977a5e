"""``manage.py assistant_llm_check``: probe the configured LLM endpoint and say what works."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...conf import assistant_settings
from ...core.llm_client import api_key, make_async_client
from ...turns.planners.text_calls import as_intents, calls_in_text

PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": "assistant_probe",
        "description": "Echo a word back (a connectivity probe).",
        "parameters": {
            "type": "object",
            "properties": {"word": {"type": "string", "description": "the word to echo"}},
            "required": ["word"],
        },
    },
}
ONE_CALL = "Call the assistant_probe tool once, with the word 'alpha'. Do not answer in text."
WRITTEN = " (written as JSON text, not tool_calls: the planner reads it, TEXT_TOOL_CALLS is on)"
TWO_CALLS = (
    "Call the assistant_probe tool twice in parallel, in one reply: once with the word 'alpha' "
    "and once with the word 'beta'. Do not answer in text."
)


@dataclass(kw_only=True)
class Answer:
    """What one probe request streamed back."""

    text: str = ""
    calls: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, int] | None = None
    written: bool = False  # the calls came as JSON text, not as the server's tool_calls


class Command(BaseCommand):
    help = (
        "Call the configured language model with tiny probes (a streamed reply, one tool call, "
        "two parallel tool calls, usage) and print what works and which setting to change."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--base-url", help="probe this endpoint instead of LLM BASE_URL")
        parser.add_argument("--model", help="probe this model instead of LLM MODEL")

    def handle(self, *args: Any, base_url: str | None, model: str | None, **options: Any) -> None:
        config = dict(assistant_settings.llm)
        if base_url:
            config["BASE_URL"] = base_url
        if model:
            config["MODEL"] = model
        failures = asyncio.run(self.probe(config))
        if failures:
            raise CommandError(f"{failures} check(s) failed.", returncode=1)
        self.stdout.write(self.style.SUCCESS("The language model is ready for the assistant."))

    def report(self, ok: bool | None, what: str, detail: str = "") -> int:
        mark = {True: "ok  ", False: "FAIL", None: "warn"}[ok]
        style = {True: self.style.SUCCESS, False: self.style.ERROR, None: self.style.WARNING}[ok]
        self.stdout.write(style(f"[{mark}] {what}") + (f" — {detail}" if detail else ""))
        return 1 if ok is False else 0

    async def probe(self, config: dict[str, Any]) -> int:
        """Run every probe in order; the number of failures (warnings do not count)."""
        endpoint = config["BASE_URL"] or "the openai package's default (api.openai.com)"
        key_env = config["API_KEY_ENV"] or ""
        self.stdout.write(f"Endpoint: {endpoint}")
        self.stdout.write(f"Model:    {config['MODEL'] or '(none)'}")
        has_key = bool(api_key(config))
        self.stdout.write(f"API key:  ${key_env} is {'set' if has_key else 'not set'}")
        if assistant_settings.PLANNER != "llm":
            self.report(None, "ASSISTANT['PLANNER'] is not 'llm'", "the chat uses keywords")
        try:
            from ...turns.planners import llm
        except ImportError:
            return self.report(False, "the openai package", "install the [llm] extra")
        if not config["MODEL"]:
            return self.report(False, "a model", "set ASSISTANT['LLM']['MODEL']")
        client = make_async_client(config)
        try:
            return await self.run_probes(llm, client, config)
        finally:
            await client.close()

    async def run_probes(self, llm: Any, client: Any, config: dict[str, Any]) -> int:
        try:
            reply = await self.ask(llm, client, config, "Reply with the single word: ready", [])
        except llm.LLMUnavailable as exc:
            return self.report(False, "a streamed reply", f"{exc.message} {self.hint(exc)}")
        failures = self.report(
            bool(reply.text.strip()), "a streamed reply", repr(reply.text.strip()[:60])
        )
        try:
            one = await self.ask(llm, client, config, ONE_CALL, [PROBE_TOOL])
            two = await self.ask(llm, client, config, TWO_CALLS, [PROBE_TOOL])
        except llm.LLMUnavailable as exc:
            return failures + self.report(False, "tool calls", f"{exc.message} {self.hint(exc)}")
        words = [self.word(call) for call in one.calls]
        failures += self.report(
            words == ["alpha"],
            "one tool call",
            f"got {len(one.calls)} call(s) {words}"
            + ("" if words == ["alpha"] else "; use a model (or server flag) with tool calling")
            + (WRITTEN if one.written else ""),
        )
        pair = sorted(self.word(call) for call in two.calls)
        self.report(
            True if pair == ["alpha", "beta"] else None,
            "two parallel tool calls",
            f"got {len(two.calls)} call(s) {pair}"
            + ("" if pair == ["alpha", "beta"] else "; the model will call one tool per step")
            + (WRITTEN if two.written else ""),
        )
        usage = reply.usage or one.usage or two.usage
        refused = config["BASE_URL"] in llm._refuses_usage
        self.report(
            True if usage else None,
            "token usage",
            f"{usage['total_tokens']} tokens for the reply"
            if usage and reply.usage
            else "the server refuses stream_options; budgets cannot count tokens"
            if refused
            else "the server reported none; TOKENS_PER_DAY budgets cannot count tokens",
        )
        return failures

    async def ask(
        self, llm: Any, client: Any, config: dict[str, Any], prompt: str, tools: list[Any]
    ) -> Answer:
        """One streamed request, merged the way the planner merges it."""
        answer = Answer()

        async def heard(delta: str) -> None:
            answer.text += delta

        def counted(model: str, usage: dict[str, int] | None) -> None:
            answer.usage = usage or answer.usage

        messages = [{"role": "user", "content": prompt}]
        calls = await llm.stream_reply(
            client, {**config, "TEMPERATURE": 0}, messages, tools, on_text=heard, on_usage=counted
        )
        answer.calls = [call.as_intent() for call in calls.finished(prefix="probe")]
        if not answer.calls and tools and config["TEXT_TOOL_CALLS"]:
            written = calls_in_text(answer.text, {"assistant_probe"})
            answer.calls = as_intents(written, "probe")
            answer.written = bool(written)
        return answer

    @staticmethod
    def word(call: dict[str, Any]) -> str:
        try:
            arguments = json.loads(call["arguments"] or "{}")
        except json.JSONDecodeError:
            return f"<invalid JSON {call['arguments'][:20]!r}>"
        if call["name"] != "assistant_probe" or not isinstance(arguments, dict):
            return f"<{call['name']}>"
        return str(arguments.get("word", ""))

    @staticmethod
    def hint(exc: Any) -> str:
        text = exc.message
        if "401" in text or "403" in text:
            return "Check the key in the variable ASSISTANT['LLM']['API_KEY_ENV'] names."
        if "404" in text:
            return "Check ASSISTANT['LLM']['MODEL'] (and that BASE_URL ends in /v1)."
        if "unreachable" in text or "in time" in text or "stopped answering" in text:
            return "Check ASSISTANT['LLM']['BASE_URL'] and that the server is running."
        return "Check ASSISTANT['LLM']."
