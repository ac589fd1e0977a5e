"""A tool's prepare hook: resolved, checked and summarised before anyone is asked to approve."""

from __future__ import annotations

from typing import Any

import pytest

from assistant import Prepared, ToolCall, ToolResult, assistant_tool
from assistant.core.registry import ToolRegistry
from assistant.dispatch.confirmation import confirm_action
from assistant.dispatch.door import adispatch, dispatch
from assistant.exceptions import (
    InvalidEntities,
    PermissionDenied,
    PhraseMismatch,
    ToolDefinitionError,
)
from assistant.models import PendingAction, entities_digest
from tests.audit_trail import decisions

CRATES = {"red crate": 7, "blue crate": 8, "red box": 9}


class Site(ToolRegistry):
    """A fresh registry that remembers what its prepare hooks and handlers were given."""

    def __init__(self) -> None:
        super().__init__("prepare")
        self.prepared: list[dict[str, Any]] = []
        self.ran: list[dict[str, Any]] = []


def resolve(name: str) -> int | ToolResult:
    """A crate by (part of) its name: its id, or a question when several match."""
    matches = sorted(crate for crate in CRATES if name in crate)
    if not matches:
        raise InvalidEntities({"crate": f"no crate matches {name!r}"})
    if len(matches) > 1:
        return ToolResult(text=f"“{name}” matches {', '.join(matches)} — which one?")
    return CRATES[matches[0]]


@pytest.fixture
def site() -> Site:
    site = Site()

    def prepare_shipping(call: ToolCall, crate: str, to: str) -> Prepared | ToolResult:
        site.prepared.append({"crate": crate, "to": to})
        if to == "the moon":
            raise PermissionDenied("Nothing ships to the moon.")
        found = resolve(crate)
        if isinstance(found, ToolResult):
            return found
        return Prepared(
            summary=f"Ship crate #{found} to {to}",
            entities={"crate": str(found), "to": to},
            preview={
                "kind": "changes",
                "rows": [{"field": "place", "before": "depot", "after": to}],
            },
            confirm_phrase=f"crate {found}",
        )

    @assistant_tool(
        operation="ship_crate",
        domain="crates",
        description="Ship a crate somewhere",
        risk_level="dangerous",
        requires_confirmation=True,
        public=True,
        prepare=prepare_shipping,
        site=site,
    )
    def ship_crate(call: ToolCall, crate: str, to: str) -> ToolResult:
        site.ran.append({"crate": crate, "to": to})
        return ToolResult(text=f"shipped {crate} to {to}")

    async def prepare_weighing(call: ToolCall, crate: str) -> Prepared | ToolResult:
        found = resolve(crate)
        if isinstance(found, ToolResult):
            return found
        return Prepared(summary=f"Weigh crate #{found}", entities={"crate": str(found)})

    @assistant_tool(
        operation="weigh_crate",
        domain="crates",
        description="Weigh a crate",
        risk_level="safe",
        public=True,
        prepare=prepare_weighing,
        site=site,
    )
    def weigh_crate(call: ToolCall, crate: str) -> ToolResult:
        site.ran.append({"crate": crate})
        return ToolResult(text=f"crate {crate} weighs 3 kg")

    return site


@pytest.mark.django_db
def test_the_approver_is_asked_about_what_prepare_resolved(plain_user, site):
    outcome = dispatch("ship_crate", {"crate": "blue", "to": "Oslo"}, user=plain_user, site=site)

    assert outcome.decision == "confirmation_requested"
    action = outcome.pending_action
    assert action.summary == "Ship crate #8 to Oslo"
    assert outcome.text == "Ship crate #8 to Oslo"
    assert action.preview == {
        "kind": "changes",
        "rows": [{"field": "place", "before": "depot", "after": "Oslo"}],
    }
    assert action.confirm_phrase == "crate 8"
    # bound to the resolved arguments, not the words the user typed
    assert action.entities == {"crate": "8", "to": "Oslo"}
    assert action.entities_digest == entities_digest({"crate": "8", "to": "Oslo"})
    assert site.ran == []
    assert decisions("ship_crate") == ["confirmation_requested"]


@pytest.mark.django_db
def test_confirming_runs_the_handler_with_the_resolved_arguments_without_preparing_again(
    plain_user, site
):
    action = dispatch(
        "ship_crate", {"crate": "blue", "to": "Oslo"}, user=plain_user, site=site
    ).pending_action

    with pytest.raises(PhraseMismatch):  # a dangerous action's approver types what prepare named
        confirm_action(action.pk, user=plain_user, site=site)
    outcome = confirm_action(action.pk, user=plain_user, site=site, phrase="Crate 8 ")

    assert outcome.decision == "confirmed"
    assert site.ran == [{"crate": "8", "to": "Oslo"}]
    assert len(site.prepared) == 1
    assert decisions("ship_crate") == ["confirmation_requested", "confirmed"]


@pytest.mark.django_db
def test_a_call_prepare_refuses_is_refused_before_anyone_is_asked(plain_user, site):
    outcome = dispatch(
        "ship_crate", {"crate": "blue", "to": "the moon"}, user=plain_user, site=site
    )

    assert (outcome.decision, outcome.status, outcome.code) == ("denied", 403, "permission_denied")
    assert outcome.text == "Nothing ships to the moon."
    assert not PendingAction.objects.exists()
    assert site.ran == []
    assert decisions("ship_crate") == ["denied"]


@pytest.mark.django_db
def test_a_reference_that_matches_nothing_is_invalid_before_anyone_is_asked(plain_user, site):
    outcome = dispatch("ship_crate", {"crate": "green", "to": "Oslo"}, user=plain_user, site=site)

    assert (outcome.decision, outcome.code) == ("invalid", "invalid_entities")
    assert "no crate matches 'green'" in outcome.text
    assert not PendingAction.objects.exists()
    assert decisions("ship_crate") == ["invalid"]


@pytest.mark.django_db
def test_an_ambiguous_reference_is_asked_about_instead_of_asking_for_approval(plain_user, site):
    outcome = dispatch("ship_crate", {"crate": "red", "to": "Oslo"}, user=plain_user, site=site)

    assert (outcome.decision, outcome.status, outcome.ok) == ("clarify", 200, False)
    assert outcome.text == "“red” matches red box, red crate — which one?"
    assert outcome.pending_action is None
    assert not PendingAction.objects.exists()
    assert site.ran == []
    assert decisions("ship_crate") == ["clarify"]


@pytest.mark.django_db
def test_a_tool_without_a_gate_runs_on_what_prepare_resolved(plain_user, site):
    outcome = dispatch("weigh_crate", {"crate": "blue"}, user=plain_user, site=site)

    assert outcome.decision == "executed"
    assert outcome.text == "crate 8 weighs 3 kg"
    assert site.ran == [{"crate": "8"}]


@pytest.mark.django_db(transaction=True)
async def test_an_async_prepare_is_awaited_on_the_async_door(plain_user, site):
    asked = await adispatch("weigh_crate", {"crate": "red"}, user=plain_user, site=site)
    ran = await adispatch("weigh_crate", {"crate": "blue"}, user=plain_user, site=site)

    assert (asked.decision, asked.text) == (
        "clarify",
        "“red” matches red box, red crate — which one?",
    )
    assert (ran.decision, ran.text) == ("executed", "crate 8 weighs 3 kg")


@pytest.mark.django_db
@pytest.mark.parametrize(
    "made",
    [
        pytest.param(lambda: {"summary": "not a Prepared"}, id="not-a-prepared"),
        pytest.param(lambda: Prepared(summary="x", entities={"crate": 8}), id="resolved-badly"),
        pytest.param(lambda: Prepared(summary="x", preview={"kind": "poem"}), id="unknown-preview"),
        pytest.param(lambda: Prepared(summary="x", preview=["a list"]), id="preview-not-a-dict"),
        pytest.param(lambda: Prepared(summary="x", confirm_phrase="x" * 201), id="phrase-too-long"),
        pytest.param(
            lambda: Prepared(summary="x", confirm_phrase="\u200b\u00ad"), id="phrase-invisible"
        ),
        pytest.param(lambda: Prepared(summary=7), id="summary-not-text"),
    ],
)
def test_a_broken_prepare_fails_the_call_and_asks_nobody(plain_user, made):
    site = ToolRegistry("broken")

    @assistant_tool(
        operation="ship_it",
        domain="crates",
        description="Ship it",
        risk_level="guarded",
        requires_confirmation=True,
        public=True,
        prepare=lambda call, crate: made(),
        site=site,
    )
    def ship_it(call: ToolCall, crate: str) -> ToolResult:
        raise AssertionError("never runs")

    outcome = dispatch("ship_it", {"crate": "x"}, user=plain_user, site=site)

    assert (outcome.decision, outcome.code) == ("failed", "tool_failed")
    assert outcome.text == "ship_it failed unexpectedly; the error has been logged."
    assert not PendingAction.objects.exists()
    assert decisions("ship_it") == ["failed"]


def test_prepare_must_be_callable():
    with pytest.raises(ToolDefinitionError, match="prepare must be a callable"):

        @assistant_tool(
            operation="ship_nothing",
            domain="crates",
            description="Ship nothing",
            risk_level="safe",
            public=True,
            prepare="not callable",  # type: ignore[arg-type]
            site=ToolRegistry("bad"),
        )
        def ship_nothing(call: ToolCall) -> ToolResult:
            return ToolResult(text="")
