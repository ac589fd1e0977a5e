"""Evaluations of the planner on golden conversations: what it proposes, judged, never run.

A case is a message, who sends it (an existing ``user`` or a ``role``, a group given to a
throwaway member), the calls expected (operation and entities, each exact or by a predicate)
and the operations that must not be proposed. The configured planner plans it inside a
transaction that is rolled back; its calls are judged as dispatch would judge them (unknown,
invalid, denied, needs confirmation) but no handler runs and nothing is audited.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction

from ..core.registry import ToolRegistry, ToolResult, registry
from ..dispatch.calls import CallContext, Outcome
from ..dispatch.door import preview
from ..exceptions import AssistantError, EvalError
from ..models import AuditEntry, Conversation, Message
from ..stream import events
from ..validation import Outcome as Finding
from ..validation import Verdict, validation_rule
from .planners import get_planner
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
        forbid = raw.get("forbid", [])
        if not isinstance(forbid, list) or not all(isinstance(op, str) for op in forbid):
            raise EvalError(f"case {position}: 'forbid' is a list of operation names")
        return cls(
            name=str(raw.get("name") or raw["message"]),
            message=raw["message"],
            user=str(raw.get("user") or ""),
            role=str(raw.get("role") or ""),
            expect=tuple(expect),
            forbid=tuple(forbid),
        )


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

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.proposed: list[Proposed] = []

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
    ) -> Outcome:
        outcome = await sync_to_async(judge)(operation, entities, self.user, self.site)
        self.outcomes.append(outcome)
        if refusal and outcome.decision == Decision.DENIED:
            return outcome  # the planner saying no, as it means to: not a call it proposes
        self.proposed.append(
            Proposed(operation=operation, entities=outcome.entities, decision=outcome.decision)
        )
        return outcome


def judge(operation: str, entities: Any, user: Any, site: ToolRegistry) -> Outcome:
    """What dispatch would decide for this call, short of running it (nothing is audited).

    Dispatch's own steps: lookup, validation, the tool and the object permission checks.
    """
    outcome = preview(operation, entities, CallContext(user=user, source="eval", site=site))
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

    def verdict(self) -> Verdict:
        details = {
            "case": self.case.name,
            "message": self.case.message,
            "proposed": [vars(call) for call in self.proposed],
        }
        return Verdict(
            outcome=self.outcome, message=f"{self.case.name}: {self.message}", details=details
        )


def run_case(
    case: Case, *, planner: str | None = None, site: ToolRegistry = registry
) -> CaseResult:
    """Plan one golden case and judge it; every row it wrote is rolled back."""
    try:
        with transaction.atomic():
            proposed = _plan(case, planner, site)
            transaction.set_rollback(True)
    except AssistantError as exc:
        return CaseResult(
            case=case, outcome=Finding.FAIL, message=f"the planner failed: {exc.message}"
        )
    missing = [e["operation"] for e in case.expect if not _found(e, proposed)]
    forbidden = sorted({call.operation for call in proposed} & set(case.forbid))
    if missing or forbidden:
        problems = []
        if missing:
            problems.append(f"expected {', '.join(missing)} was not proposed as described")
        if forbidden:
            problems.append(f"proposed forbidden {', '.join(forbidden)}")
        return CaseResult(
            case=case, outcome=Finding.FAIL, message="; ".join(problems), proposed=proposed
        )
    expected = {e["operation"] for e in case.expect}
    extra = sorted({call.operation for call in proposed} - expected)
    if extra and expected:  # a case naming only forbidden calls does not mind the rest
        return CaseResult(
            case=case,
            outcome=Finding.WARN,
            message=f"as expected, and also proposed {', '.join(extra)}",
            proposed=proposed,
        )
    return CaseResult(case=case, outcome=Finding.PASS, message="as expected", proposed=proposed)


def _plan(case: Case, planner: str | None, site: ToolRegistry) -> list[Proposed]:
    user = _sender(case)
    conversation = Conversation.objects.create(user=user, title=f"evaluation: {case.name}"[:80])
    message = Message.objects.create(
        conversation=conversation, role=Message.Role.USER, text=case.message
    )
    turn = EvalTurn(
        user=user, conversation=conversation, user_message=message, source="eval", site=site
    )
    async_to_sync(get_planner(planner).run)(turn)
    return turn.proposed


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


def run_cases(cases: list[Case], *, planner: str | None = None) -> list[CaseResult]:
    results = []
    for case in cases:
        try:
            results.append(run_case(case, planner=planner))
        except EvalError as exc:
            results.append(CaseResult(case=case, outcome=Finding.FAIL, message=exc.message))
    return results


@validation_rule(
    name="planner_eval",
    description="The planner proposes the expected calls for golden conversations, and none forbidden",
    needs_target=False,
)
def planner_eval(target: Any, options: dict[str, Any], run: Any) -> list[Verdict]:
    """``options``: ``cases`` (a list) or ``golden`` (a JSON file), and optionally ``planner``."""
    try:
        cases = load_cases(options.get("cases") if "cases" in options else options.get("golden"))
    except EvalError as exc:
        return [Verdict(outcome=Finding.FAIL, message=exc.message)]
    return [result.verdict() for result in run_cases(cases, planner=options.get("planner"))]
