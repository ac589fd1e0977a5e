"""What a tool's output says cannot start work by itself: once the model has read a result, a
call of a tool that changes something asks the user first, where it would otherwise run unasked
(``LLM["CONFIRM_AFTER_RESULTS"]``). The model and the result here are hostile on purpose."""

from __future__ import annotations

import pytest

from assistant.dispatch.confirmation import confirm_action
from assistant.models import PendingAction
from assistant.turns.runs import run_turn
from tests.audit_trail import audited
from tests.openai_peer import call, text, tool_calls
from tests.openai_peer import openai_peer as openai_peer  # the fixtures
from tests.openai_peer import use_llm as use_llm
from tests.testapp.assistant_tools import ROTATED

pytestmark = pytest.mark.django_db


def steered_turn(peer, keeper, message="ping"):
    # (the scripted model plays one that obeys what the ping's result told it)
    peer.script(
        tool_calls(call("ping")),
        tool_calls(call("store_secret", {"label": "admin", "secret": "hunter2"})),
        text("Done."),
    )
    return run_turn(keeper, message)


def test_a_call_proposed_after_a_result_waits_for_the_user_instead_of_running(use_llm, keeper):
    peer = use_llm()

    turn = steered_turn(peer, keeper)

    assert audited() == [
        ("ping", "executed", "rest"),
        ("store_secret", "confirmation_requested", "rest"),
    ]
    action = PendingAction.objects.get()
    assert action.status == "pending"
    assert "after reading a tool's output" in action.summary
    assert [record["decision"] for record in turn.assistant_message.tool_calls] == [
        "executed",
        "confirmation_requested",
    ]


def test_the_user_who_approves_it_runs_it(use_llm, keeper):
    steered_turn(use_llm(), keeper)

    outcome = confirm_action(PendingAction.objects.get().pk, user=keeper, source="rest")

    assert outcome.decision == "confirmed"
    assert outcome.result.text == "stored admin (7 characters)"


def test_the_same_call_asked_for_first_runs_unasked(use_llm, keeper):
    peer = use_llm()
    peer.script(
        tool_calls(call("store_secret", {"label": "wifi", "secret": "s3cret-value"})),
        text("Stored."),
    )

    run_turn(keeper, "store secret wifi s3cret-value")

    assert audited() == [("store_secret", "executed", "rest")]
    assert not PendingAction.objects.exists()


def test_a_safe_tool_after_a_result_still_runs_unasked(use_llm, plain_user):
    peer = use_llm()
    peer.script(tool_calls(call("ping")), tool_calls(call("apong", {"times": 2})), text("Pong."))

    run_turn(plain_user, "ping twice")

    assert audited() == [("ping", "executed", "rest"), ("apong", "executed", "rest")]


def test_a_tool_that_asks_anyway_asks_as_it_always_did(use_llm, keeper):
    peer = use_llm()
    peer.script(
        tool_calls(call("ping")),
        tool_calls(call("rotate_secret", {"label": "admin", "secret": "hunter2"})),
        text("Asked."),
    )

    rotated = len(ROTATED)  # (every test's rotations: the test app keeps them all)

    run_turn(keeper, "ping")

    action = PendingAction.objects.get()
    assert action.operation == "rotate_secret"
    assert "after reading a tool's output" not in action.summary
    assert len(ROTATED) == rotated


def test_turned_off_the_approval_policies_alone_decide(use_llm, keeper):
    peer = use_llm(CONFIRM_AFTER_RESULTS=False)

    steered_turn(peer, keeper)

    assert audited() == [("ping", "executed", "rest"), ("store_secret", "executed", "rest")]
    assert not PendingAction.objects.exists()
