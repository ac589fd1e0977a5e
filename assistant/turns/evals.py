"""Evaluations of the planner on golden conversations: what it proposes, judged, never run.

A case is a message, who sends it (an existing ``user`` or a ``role``, a group given to a
throwaway member), the calls expected (operation and entities, each exact or by a predicate),
the operations also allowed and those that must not be proposed, optionally the text a judged
call returns (``results``: the data a real call would return, or an injection inside it) and
the planners it is written for. The configured planner plans it inside a transaction that is rolled back; its calls
are judged as dispatch would judge them (unknown, invalid, denied, needs confirmation) but no
handler runs and nothing is audited.

The judge cannot be fooled: a missing, forbidden or unexpected call fails the case, so does an
LLM case the keyword planner answered (a fallback); an identical call made again warns. Each
result records the planner that answered, the model, its usage, the time and the model steps.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction
from django.test import override_settings

from ..conf import assistant_settings
from ..core.registry import ToolRegistry, ToolResult, registry
from ..dispatch.calls import CallContext, Outcome
from ..dispatch.door import preview
from ..exceptions import AssistantError, EvalError
from ..models import AuditEntry, Conversation, Message, ValidationRun, ValidationTask
from ..stream import events
from ..validation import Outcome as Finding
from ..validation import ValidationTaskService, Verdict, record_run, validation_rule
from .planners import get_planner
from .planners.repeats import call_key
from .turn import Reply, Turn

NOT_RUN = "(evaluation: this call was judged, not run)"
Decision = AuditEntry.Decision


@dataclass(frozen=True, kw_only=True, slots=True)
class Case:
    name: str
    message: str
    user: str = ""
    role: str = ""
    expect: tuple[dict[str, Any], ...] = ()
    forbid: tuple[str, ...] = ()
    allow: tuple[str, ...] = ()  # operations that may be proposed besides the expected ones
    results: dict[str, str] = field(default_factory=dict)  # what a judged call returns, by tool
    planners: tuple[str, ...] = ()  # the planners the case is written for; empty: any

    @classmethod
    def parse(cls, raw: Any, position: int) -> Case:
        if not isinstance(raw, dict) or not isinstance(raw.get("message"), str):
            raise EvalError(f"case {position}: needs a 'message' string")
        if bool(raw.get("user")) == bool(raw.get("role")):
            raise EvalError(f"case {position}: give exactly one of 'user' or 'role'")
        expect = raw.get("expect", [])
        if not isinstance(expect, list) or not all(
            isinstance(call, dict) and isinstance(call.get("operation"), str) for call in expect
        ):
            raise EvalError(f"case {position}: 'expect' is a list of {{'operation', 'entities'}}")
        names = {key: raw.get(key, []) for key in ("forbid", "allow", "planners")}
        for key, value in names.items():
            if not isinstance(value, list) or not all(isinstance(op, str) for op in value):
                raise EvalError(f"case {position}: '{key}' is a list of names")
        results = raw.get("results", {})
        if not isinstance(results, dict) or not all(isinstance(t, str) for t in results.values()):
            raise EvalError(f"case {position}: 'results' maps operations to the text they return")
        return cls(
            name=str(raw.get("name") or raw["message"]),
            message=raw["message"],
            user=str(raw.get("user") or ""),
            role=str(raw.get("role") or ""),
            expect=tuple(expect),
            forbid=tuple(names["forbid"]),
            allow=tuple(names["allow"]),
            results=results,
            planners=tuple(names["planners"]),
        )

    def written_for(self, planner: str) -> bool:
        return not self.planners or planner in self.planners


def load_cases(source: Any) -> list[Case]:
    """Cases from a list, or from a JSON file (a list, or ``{"cases": [...]}``)."""
    if isinstance(source, str | Path):
        try:
            source = json.loads(Path(source).read_text())
        except (OSError, ValueError) as exc:
            raise EvalError(f"cannot read golden cases from {source}: {exc}") from None
    if isinstance(source, dict):
        source = source.get("cases")
    if not isinstance(source, list):
        raise EvalError("golden cases are a list")
    return [Case.parse(raw, position) for position, raw in enumerate(source, start=1)]


@dataclass(kw_only=True)
class Proposed:
    operation: str
    entities: Any
    decision: str


class EvalTurn(Turn):
    """A turn whose calls are judged and recorded, never dispatched; its events go nowhere."""

    def __init__(self, *, results: dict[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.proposed: list[Proposed] = []
        self.results = results or {}  # what a judged call returns, by tool (else NOT_RUN)

    async def emit(self, event: Any) -> dict[str, Any]:
        frame = events.frame(event, thread_id=self.thread_id, run_id=self.run_id)
        self.frames.append(frame)
        return frame

    async def call(
        self,
        operation: str,
        entities: dict[str, Any] | None,
        *,
        tool_call_id: str | None = None,
        announced: bool = False,
        refusal: bool = False,
        reply: Reply | None = None,  # (nothing is stored)
        arrival: str = "",
        after_results: bool = False,
    ) -> Outcome:
        outcome = await sync_to_async(judge)(
            operation, entities, self.user, self.site, after_results=after_results
        )
        if outcome.result is not None and operation in self.results:
            outcome.result = ToolResult(text=self.results[operation])
        self.outcomes.append(outcome)
        if outcome.decision == Decision.CONFIRMATION_REQUESTED:
            self.interrupts.append(outcome)  # a real run waits for the user here: so does this
        if refusal and outcome.decision == Decision.DENIED:
            return outcome  # the planner saying no, as it means to: not a call it proposes
        self.proposed.append(
            Proposed(operation=operation, entities=outcome.entities, decision=outcome.decision)
        )
        return outcome


def judge(
    operation: str, entities: Any, user: Any, site: ToolRegistry, *, after_results: bool = False
) -> Outcome:
    """What dispatch would decide for this call, short of running it (nothing is audited).

    Dispatch's own steps: lookup, validation, the tool and the object permission checks.
    """
    context = CallContext(user=user, source="eval", site=site, after_results=after_results)
    outcome = preview(operation, entities, context)
    if outcome.error is None:
        outcome.result = ToolResult(text=NOT_RUN)
    return outcome


def matches(expected: Any, actual: Any) -> bool:
    """An expected entity value: equal, or a predicate ``{"in"|"contains"|"matches"|"present": …}``."""
    if isinstance(expected, dict) and len(expected) == 1:
        ((kind, operand),) = expected.items()
        if kind == "in":
            return actual in operand
        if kind == "contains":
            return isinstance(actual, str) and str(operand).lower() in actual.lower()
        if kind == "matches":
            return isinstance(actual, str) and re.search(str(operand), actual) is not None
        if kind == "present":
            return (actual is not None) == bool(operand)
    return bool(expected == actual)


def _found(expected: dict[str, Any], proposed: list[Proposed]) -> bool:
    wanted = expected.get("entities") or {}
    for call in proposed:
        if call.operation != expected["operation"] or not isinstance(call.entities, dict):
            continue
        if all(matches(value, call.entities.get(name)) for name, value in wanted.items()):
            return True
    return False


@dataclass(kw_only=True)
class CaseResult:
    case: Case
    outcome: str
    message: str
    proposed: list[Proposed] = field(default_factory=list)
    planner: str = ""  # the planner that answered ("keywords (fallback)" when the LLM failed)
    model: str = ""
    usage: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    steps: int = 0  # model calls
    repeats: list[str] = field(default_factory=list)  # identical calls made again, not run

    def verdict(self) -> Verdict:
        details = {
            "case": self.case.name,
            "message": self.case.message,
            "proposed": [vars(call) for call in self.proposed],
            "planner": self.planner,
            "model": self.model,
            "usage": self.usage,
            "seconds": round(self.seconds, 2),
            "steps": self.steps,
            "repeats": self.repeats,
        }
        return Verdict(
            outcome=self.outcome, message=f"{self.case.name}: {self.message}", details=details
        )


def run_case(
    case: Case, *, planner: str | None = None, site: ToolRegistry = registry
) -> CaseResult:
    """Plan one golden case and judge it; every row it wrote is rolled back."""
    started = time.monotonic()
    try:
        with transaction.atomic():
            turn = _plan(case, planner, site)
            transaction.set_rollback(True)
    except AssistantError as exc:
        return CaseResult(
            case=case,
            outcome=Finding.FAIL,
            message=f"the planner failed: {exc.message}",
            seconds=time.monotonic() - started,
        )
    outcome, message = judged(case, turn, planner or assistant_settings.PLANNER)
    return CaseResult(
        case=case,
        outcome=outcome,
        message=message,
        proposed=turn.proposed,
        planner=turn.answered_by,
        model=turn.model,
        usage=dict(turn.usage),
        seconds=time.monotonic() - started,
        steps=turn.steps,
        repeats=list(turn.repeats),
    )


def judged(case: Case, turn: EvalTurn, planner: str) -> tuple[str, str]:
    """The case's outcome and why: every problem fails it, a repeated call only warns."""
    proposed = turn.proposed
    operations = {call.operation for call in proposed}
    problems = []
    if planner == "llm" and turn.answered_by != "llm":
        problems.append(f"answered by {turn.answered_by or 'no planner'}, not the language model")
    missing = [e["operation"] for e in case.expect if not _found(e, proposed)]
    if missing:
        problems.append(f"expected {', '.join(missing)} was not proposed as described")
    forbidden = sorted(operations & set(case.forbid))
    if forbidden:
        problems.append(f"proposed forbidden {', '.join(forbidden)}")
    allowed = {e["operation"] for e in case.expect} | set(case.allow) | set(case.forbid)
    unexpected = sorted(operations - allowed)
    if unexpected:
        problems.append(f"proposed unexpected {', '.join(unexpected)}")
    if problems:
        return Finding.FAIL, "; ".join(problems)
    repeated = _repeated(proposed) + turn.repeats
    if repeated:
        return Finding.WARN, f"as expected, but repeated an identical call: {', '.join(repeated)}"
    return Finding.PASS, "as expected"


def _repeated(proposed: list[Proposed]) -> list[str]:
    """The operations of calls proposed again with the same arguments (each repeat once)."""
    seen: set[str] = set()
    repeats = []
    for call in proposed:
        key = call_key(call.operation, call.entities)
        if key in seen:
            repeats.append(call.operation)
        seen.add(key)
    return repeats


def _plan(case: Case, planner: str | None, site: ToolRegistry) -> EvalTurn:
    user = _sender(case)
    conversation = Conversation.objects.create(user=user, title=f"evaluation: {case.name}"[:80])
    message = Message.objects.create(
        conversation=conversation, role=Message.Role.USER, text=case.message
    )
    turn = EvalTurn(
        user=user,
        conversation=conversation,
        user_message=message,
        source="eval",
        site=site,
        results=case.results,
    )
    async_to_sync(get_planner(planner).run)(turn)
    return turn


def _sender(case: Case) -> Any:
    User = get_user_model()
    if case.user:
        user = User._default_manager.filter(**{User.USERNAME_FIELD: case.user}).first()
        if user is None:
            raise EvalError(f"no user named {case.user!r}")
        return user
    if case.role == "superuser":
        member = User._default_manager.create(**{User.USERNAME_FIELD: "__eval_superuser"})
        member.is_superuser = True
        member.save(update_fields=["is_superuser"])
        return User._default_manager.get(pk=member.pk)
    group = Group.objects.filter(name=case.role).first()
    if group is None:
        raise EvalError(f"no role (group) named {case.role!r}")
    member = User._default_manager.create(**{User.USERNAME_FIELD: f"__eval_{case.role}"[:150]})
    member.groups.add(group)
    return User._default_manager.get(pk=member.pk)


def run_cases(
    cases: list[Case], *, planner: str | None = None, model: str | None = None
) -> list[CaseResult]:
    """Judge each case written for ``planner`` (the configured one by default), on ``model``
    instead of the configured one when given."""
    chosen = planner or assistant_settings.PLANNER
    results = []
    with on_model(model):
        for case in cases:
            if not case.written_for(chosen):
                continue
            try:
                results.append(run_case(case, planner=planner))
            except EvalError as exc:
                results.append(CaseResult(case=case, outcome=Finding.FAIL, message=exc.message))
    return results


@contextlib.contextmanager
def on_model(model: str | None) -> Iterator[None]:
    """``ASSISTANT["LLM"]["MODEL"]`` set to ``model`` meanwhile (nothing changes for None)."""
    if not model:
        yield
        return
    configured = getattr(settings, "ASSISTANT", {})
    llm = {**configured.get("LLM", {}), "MODEL": model}
    with override_settings(ASSISTANT={**configured, "LLM": llm}):
        yield


def store_run(golden: str, planner: str, model: str, results: list[CaseResult]) -> ValidationRun:
    """An evaluation's results as a run of its task (one per golden set, planner and model), for
    staff to browse in the admin and to run again."""
    options = {"golden": golden, "planner": planner, "model": model}
    name = f"Planner evals: {Path(golden).name}, {planner}" + (f", {model}" if model else "")
    rules = [{"name": "planner_eval", "options": options}]
    same = ValidationTask.objects.filter(name=name[:200]).order_by("pk")
    task = next((task for task in same if task.rules == rules), None)
    if task is None:
        task = ValidationTaskService.create_task(
            name=name[:200],
            target="assistant.Conversation",
            rules=rules,
        )
    return record_run(task, "planner_eval", [result.verdict() for result in results])


@validation_rule(
    name="planner_eval",
    description="The planner proposes the expected calls for golden conversations, and none forbidden",
    needs_target=False,
)
def planner_eval(target: Any, options: dict[str, Any], run: Any) -> list[Verdict]:
    """``options``: ``cases`` (a list) or ``golden`` (a JSON file), and optionally ``planner``
    and ``model``."""
    try:
        cases = load_cases(options.get("cases") if "cases" in options else options.get("golden"))
    except EvalError as exc:
        return [Verdict(outcome=Finding.FAIL, message=exc.message)]
    results = run_cases(cases, planner=options.get("planner"), model=options.get("model"))
    return [result.verdict() for result in results]
