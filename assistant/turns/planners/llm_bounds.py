"""What an LLM turn runs of the tool calls its model asks for, and how it refuses the rest."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async

from ...conf import assistant_settings
from ...core.redaction import redact_text
from ...dispatch.audit import write_audit
from ...dispatch.bounds import preview
from ...dispatch.calls import Decision, Outcome
from ...exceptions import ArgumentsTooLarge, AssistantError, TooManyToolCalls
from .told import told

if TYPE_CHECKING:
    from ..turn import Turn


@dataclass(kw_only=True, slots=True)
class Tally:
    """What a turn's model calls have used of its bounds so far."""

    run: int = 0  # tool calls dispatched (or proposed to the client)
    chars: int = 0  # reply characters streamed
    asked: int = 0  # tool calls the last reply asked for, the ones not kept included


def within_bounds(
    config: dict[str, Any], calls: list[dict[str, Any]], tally: Tally
) -> tuple[list[dict[str, Any]], Refused]:
    """The calls of a reply that may run, and the ones refused: past the calls a reply or the
    turn may run, or with arguments larger than a call may bring."""
    per_reply, per_turn = config["MAX_TOOL_CALLS_PER_REPLY"], config["MAX_TOOL_CALLS_PER_TURN"]
    room = max(0, min(per_reply, per_turn - tally.run))
    kept, over = calls[:room], calls[room:]
    runs = [call for call in kept if call["too_large"] is None]
    tally.run += len(runs)
    refused = Refused(
        large=[call for call in kept if call["too_large"] is not None],
        over=over,
        asked=tally.asked,
        room=room,
        per_reply=per_reply,
        per_turn=per_turn,
    )
    return runs, refused


@dataclass(kw_only=True, slots=True)
class Refused:
    """The calls of one reply that were not run, by why."""

    large: list[dict[str, Any]]
    over: list[dict[str, Any]]
    asked: int  # tool calls the reply asked for, the ones not kept included
    room: int  # how many of them the reply and the turn could still run
    per_reply: int
    per_turn: int

    async def tell(self, turn: Turn, messages: list[dict[str, Any]]) -> None:
        """Each refused call shown to the user as not run, its result (why) told to the model;
        audited once per kind of refusal (never once per call)."""
        if self.large:
            await self._tell_large(turn, messages)
        if self.over:
            await self._tell_over(turn, messages)

    async def _tell_large(self, turn: Turn, messages: list[dict[str, Any]]) -> None:
        limit = assistant_settings.MAX_TOOL_ARGUMENT_BYTES
        for call in self.large:  # their start shows only as the tool's redaction allows
            shown = preview(await turn.known_tool(call["name"]), call["arguments"])
            call["too_large"]["preview"] = redact_text(shown, turn.secrets)
        errors = [
            ArgumentsTooLarge(call["too_large"]["bytes"], limit, operation=call["name"][:64])
            for call in self.large
        ]
        audit_id = await _audit_refusal(
            turn,
            self.large[0]["name"],
            Decision.INVALID,
            errors[0],
            {"refused": len(self.large), "calls": [_refused(call) for call in self.large]},
        )
        for call, error in zip(self.large, errors, strict=True):
            await _tell(turn, messages, call, Decision.INVALID, error, audit_id)

    async def _tell_over(self, turn: Turn, messages: list[dict[str, Any]]) -> None:
        refused = self.asked - self.room
        if self.room < self.per_reply:
            said = (
                f"Not run: this turn has run the {self.per_turn} tool calls a turn may make, so "
                f"{refused:,} more were not run. Answer with what you have."
            )
        else:
            said = (
                f"Not run: the reply asked for {self.asked:,} tool calls and at most "
                f"{self.per_reply} run per reply, so {refused:,} were not run. Ask for fewer "
                "at a time."
            )
        error = TooManyToolCalls(said)
        names = list(dict.fromkeys(call["name"][:64] for call in self.over))[:10]
        audit_id = await _audit_refusal(
            turn,
            "tool_calls",
            Decision.OVER_LIMIT,
            error,
            {
                "refused": refused,
                "limit": min(self.per_reply, self.per_turn),
                "operations": names,
            },
        )
        for call in self.over:
            await _tell(turn, messages, call, Decision.OVER_LIMIT, error, audit_id)


def _refused(call: dict[str, Any]) -> dict[str, Any]:
    """What the audit keeps of a call refused for its arguments' size."""
    return {"tool_call_id": call["id"][:200], "operation": call["name"][:64], **call["too_large"]}


async def _audit_refusal(
    turn: Turn, operation: str, decision: str, error: AssistantError, entities: dict[str, Any]
) -> int:
    """One audit entry for a kind of refusal in one model reply (never one per refused call)."""
    refused = Outcome(
        operation=operation[:64],
        decision=decision,
        entities=entities,
        error=error,
        error_summary=f"{error.code}: {error.message}",
    )
    return await sync_to_async(write_audit)(turn.call_context(), refused, domain="assistant")


async def _tell(
    turn: Turn,
    messages: list[dict[str, Any]],
    call: dict[str, Any],
    decision: str,
    error: AssistantError,
    audit_id: int,
) -> None:
    """A refused call, shown to the user as not run, and its result (why) told to the model."""
    arguments = call["too_large"] or {}
    outcome = Outcome(
        operation=call["name"][:64], decision=decision, entities=arguments, error=error
    )
    outcome.audit_id = audit_id
    await turn.announce_call(call["id"], call["name"][:64], json.dumps(arguments))
    await turn.record(outcome, call["id"])
    content = told(error.message, decision, code=error.code)
    messages.append({"role": "tool", "tool_call_id": call["id"], "content": content})
