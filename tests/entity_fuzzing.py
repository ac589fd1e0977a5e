"""Entities for every tool, fuzzed through ``dispatch``: the strategies and the checks that the app's
and the example project's fuzz tests share."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import jsonschema
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from assistant.core.entities import INT64_MAX, INT64_MIN, MAX_TEXT_LENGTH
from assistant.core.registry import AssistantTool, ToolRegistry, ToolResult
from assistant.core.storable import unstorable
from assistant.dispatch.door import dispatch
from assistant.exceptions import InvalidEntities
from assistant.models import AuditEntry

UNSTORABLE = ["\x00", "\ud800", "\udc80", "\udfff"]
NASTY = [
    "\x00",
    "\ud800",
    "\udc80",
    "a\x00b",
    "x\udfff",
    "",
    " ",
    "²",
    "\u0661\u0662",
    "\uff11\uff12",
    "😀",
]
NASTY_NUMBERS = [2**63, -(2**63) - 1, 2**63 - 1, 10**400, 1e308, -0.0, float("inf"), float("nan")]
EXAMPLES = 60  # per tool: ~2,600 cases over 43 tools, ~15 s of CPU on SQLite
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


text = st.one_of(st.sampled_from(NASTY), st.text(st.characters(exclude_categories=()), max_size=12))
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from(NASTY_NUMBERS),
    st.floats(allow_nan=True, allow_infinity=True),
    text,
)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(text, children, max_size=3),
    max_leaves=8,
)


def spiked(low: int, high: int) -> st.SearchStrategy[str]:
    """Text of a fitting length with a NUL or a lone surrogate somewhere in it."""
    parts = st.tuples(st.text(max_size=high), st.sampled_from(UNSTORABLE), st.text(max_size=high))
    return parts.map(lambda p: (p[0] + p[1] + p[2])[: max(high, 1)]).filter(
        lambda value: len(value) >= low and unstorable(value) is not None
    )


def fitting(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values the entity's schema describes (what a well-behaved caller sends)."""
    kinds = schema.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    options = []
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    for kind in kinds:
        if kind == "integer":
            low, high = schema.get("minimum", INT64_MIN), schema.get("maximum", INT64_MAX)
            options.append(st.integers(int(low), int(high)))
        elif kind == "number":
            low, high = schema.get("minimum"), schema.get("maximum")
            options.append(st.floats(low, high, allow_nan=False, allow_infinity=False))
        elif kind == "boolean":
            options.append(st.booleans())
        elif kind == "null":
            options.append(st.none())
        elif kind == "object":
            keys = st.one_of(st.text(max_size=5), spiked(0, 5))
            options.append(st.dictionaries(keys, json_values, max_size=3))
        elif kind == "array":
            options.append(st.lists(fitting(schema["items"]), max_size=3))
        elif schema.get("format") == "date":
            options.append(st.dates().map(lambda day: day.isoformat()))
        elif schema.get("format") == "uuid":
            options.append(st.uuids().map(str))
        elif schema.get("format") == "date-time":
            options.append(st.datetimes().map(lambda moment: moment.isoformat()))
        else:
            low, high = (
                schema.get("minLength", 0),
                min(schema.get("maxLength", MAX_TEXT_LENGTH), 30),
            )
            options.append(st.one_of(st.text(min_size=low, max_size=high), spiked(low, high)))
    return st.one_of(options) if options else json_values


@st.composite
def entities_for(draw: st.DrawFn, tool: AssistantTool) -> dict[Any, Any]:
    """Mostly-fitting entities, some replaced by anything; sometimes unknown keys too."""
    values: dict[Any, Any] = {}
    for entity in tool.entities:
        if entity.required or draw(st.booleans()):
            broken = draw(st.integers(0, 3)) == 0
            values[entity.name] = draw(json_values if broken else fitting(entity.schema))
    if draw(st.integers(0, 4)) == 0:
        values.update(draw(st.dictionaries(text, json_values, min_size=1, max_size=2)))
    return values


def recorder(ran: list[dict[str, Any]]) -> Any:
    def handler(call: Any, **values: Any) -> ToolResult:
        ran.append(values)
        return ToolResult(text=repr(values), actions=[{"type": "ran", "values": values}])

    return handler


def recording(tool: AssistantTool, ran: list[dict[str, Any]]) -> ToolRegistry:
    """A registry with this one tool, its handler replaced by a recorder (same validation)."""
    site = ToolRegistry(f"fuzz-{tool.operation}")
    site.register(
        dataclasses.replace(
            tool, handler=recorder(ran), is_async=False, toolset=None, timeout=None, method=False
        )
    )
    return site


def refused(tool: AssistantTool, entities: dict[Any, Any]) -> bool:
    try:
        tool.validate(entities)
    except InvalidEntities:
        return True
    return False


def dispatched_and_audited(site: ToolRegistry, operation: str, user: Any, entities: Any) -> Any:
    """Dispatch once; exactly one audit entry says what was decided, and it is storable."""
    before = AuditEntry.objects.count()

    outcome = dispatch(operation, entities, user=user, source="cli", site=site)

    assert AuditEntry.objects.count() == before + 1, "exactly one audit entry per call"
    entry = AuditEntry.objects.get(pk=outcome.audit_id)
    assert entry.decision == (outcome.audit_decision or outcome.decision)
    json.dumps(entry.entities, ensure_ascii=False, allow_nan=False).encode("utf-8")
    return outcome


def fuzz_recorded(tool: AssistantTool, user: Any) -> int:
    """Every input: refused ``invalid_entities`` without running, or accepted, run once, audited."""
    operation = tool.operation
    ran: list[dict[str, Any]] = []
    site = recording(tool, ran)
    cases = 0

    @FUZZ
    @given(entities=entities_for(tool))
    def check(entities: dict[Any, Any]) -> None:
        nonlocal cases
        cases += 1
        runs = len(ran)
        outcome = dispatched_and_audited(site, operation, user, entities)
        if refused(tool, entities):
            assert (outcome.decision, outcome.code) == ("invalid", "invalid_entities")
        else:
            # What validation accepts, the schema the LLM sees describes too.
            jsonschema.validate(entities, tool.parameters)
            assert unstorable(tool.validate(entities)) is None, "only storable values pass"
            assert outcome.decision in ("executed", "confirmation_requested", "invalid")
        assert len(ran) == runs + (outcome.decision == "executed"), "only an accepted call runs"

    check()
    return cases


def fuzz_real_handler(tool: AssistantTool, site: ToolRegistry, user: Any) -> None:
    """Every input to the real handler: refused ``invalid_entities``, or run without failing."""
    operation = tool.operation

    @FUZZ
    @given(entities=entities_for(tool))
    def check(entities: dict[Any, Any]) -> None:
        outcome = dispatched_and_audited(site, operation, user, entities)
        if refused(tool, entities):
            assert (outcome.decision, outcome.code) == ("invalid", "invalid_entities")
        else:
            assert outcome.decision in ("executed", "invalid"), outcome.error_summary

    check()
