"""Tool calls a model writes as text, and identical calls a model makes again in one turn: what the
LLM planner runs, what the user sees and what the audit keeps, against the replay server."""

from __future__ import annotations

import json
import uuid

import pytest

from assistant.core.registry import AssistantTool
from assistant.exceptions import ToolDefinitionError
from assistant.models import AuditEntry, PendingAction
from assistant.turns.planners.repeats import STUCK_NOTICE
from assistant.turns.planners.text_calls import calls_in_text
from assistant.turns.runs import run_turn
from tests.openai_peer import call, text, tool_calls
from tests.openai_peer import openai_peer as openai_peer  # the fixtures
from tests.openai_peer import use_llm as use_llm
from tests.testapp.models import Order
from tests.turns.reading import read_told

pytestmark = pytest.mark.django_db

OFFERED = {"ping", "apong"}


def said(turn):
    reply = str(turn.assistant_message.pk)
    return "".join(
        f["delta"]
        for f in turn.frames
        if f["type"] == "TEXT_MESSAGE_CONTENT" and f["messageId"] == reply
    )


def audited():
    return list(AuditEntry.objects.order_by("id").values_list("operation", "decision", "arrival"))


def tool_results(request):
    return [read_told(m["content"]) for m in request["messages"] if m["role"] == "tool"]


# What counts as a written call


@pytest.mark.parametrize(
    "reply",
    [
        '{"name": "apong", "arguments": {"times": 2}}',
        '```json\n{"name": "apong", "arguments": {"times": 2}}\n```',
        '```\n{"tool": "apong", "parameters": {"times": 2}}\n```',
        '  {"tool_name": "apong", "args": {"times": 2}}  ',
        '{"function": {"name": "apong", "arguments": "{\\"times\\": 2}"}}',
        '<tool_call>\n{"name": "apong", "arguments": {"times": 2}}\n</tool_call>',
        '{{"name": "apong", "arguments": {"times": 2}}}',  # Qwen2.5-Coder 1.5B on llama.cpp
    ],
)
def test_the_shapes_small_models_write_are_read_as_one_call(reply):
    (found,) = calls_in_text(reply, OFFERED)

    assert (found.name, json.loads(found.arguments)) == ("apong", {"times": 2})


@pytest.mark.parametrize(
    "reply",
    [
        'I will call {"name": "apong", "arguments": {}} now.',  # words around it
        '{"name": "apong", "arguments": {}} and {"name": "ping", "arguments": {}}',
        '{"name": "rm_rf", "arguments": {}}',  # not a tool this user was offered
        '["apong"]',
        '{"arguments": {"times": 2}}',
        '```json\n{"name": "apong",\n```',  # unfinished
        '<tool_call>{"name": "apong"}</tool_call> then words',
    ],
)
def test_anything_else_stays_words(reply):
    assert calls_in_text(reply, OFFERED) == []


# Through the planner


def test_a_written_call_runs_through_dispatch_is_audited_as_text_and_never_shown(
    use_llm, plain_user
):
    peer = use_llm()
    peer.script(text('```json\n{"name": "apong", "arguments": {"times": 2}}\n```'), text("Done."))

    turn = run_turn(plain_user, "pong twice")

    assert audited() == [("apong", "executed", "text")]
    assert said(turn) == "Done."
    assert turn.assistant_message.text == "Done."
    (sent,) = [m for m in peer.requests[1]["messages"] if m["role"] == "assistant"]
    assert sent["tool_calls"][0]["function"]["name"] == "apong"
    assert tool_results(peer.requests[1])[0]["decision"] == "executed"


def test_a_written_call_of_a_hidden_tool_is_answered_as_an_unknown_one(use_llm, plain_user):
    # plain may not list orders: the reply is words, exactly as for a tool that does not exist
    use_llm().script(
        text('{"name": "list_orders", "arguments": {}}'),
        text('{"name": "no_such_tool", "arguments": {}}'),
    )

    hidden = run_turn(plain_user, "list orders")
    missing = run_turn(plain_user, "do something")

    assert said(hidden) == '{"name": "list_orders", "arguments": {}}'
    assert said(missing) == '{"name": "no_such_tool", "arguments": {}}'
    assert hidden.assistant_message.status == missing.assistant_message.status == "complete"
    assert audited() == []
    assert not Order.objects.filter(status="approved").exists()


def test_a_written_call_that_needs_confirmation_waits_at_the_gate(use_llm, clerk):
    order = Order.objects.create(reference="ORD-1")
    use_llm().script(
        text(json.dumps({"tool": "approve_order", "parameters": {"order_id": order.pk}}))
    )

    turn = run_turn(clerk, "approve the order")

    assert audited() == [("approve_order", "confirmation_requested", "text")]
    assert PendingAction.objects.filter(operation="approve_order").count() == 1
    assert Order.objects.get(pk=order.pk).status != "approved"
    assert turn.assistant_message.text == ""


def test_written_calls_can_be_turned_off(use_llm, plain_user):
    use_llm(TEXT_TOOL_CALLS=False).script(text('{"name": "apong", "arguments": {"times": 2}}'))

    turn = run_turn(plain_user, "pong twice")

    assert audited() == []
    assert said(turn) == '{"name": "apong", "arguments": {"times": 2}}'


def test_words_that_only_open_like_json_are_all_shown(use_llm, plain_user):
    use_llm().script(text("{", "curly} braces ", "are fine"))

    turn = run_turn(plain_user, "hello")

    assert said(turn) == "{curly} braces are fine"
    assert audited() == []


# No identical call twice in a turn


def test_an_identical_call_is_answered_with_its_earlier_result_not_run_again(use_llm, plain_user):
    peer = use_llm()
    peer.script(
        tool_calls(call("apong", {"times": 2})),
        text('{"tool": "apong", "parameters": {"times": 2}}'),  # the small model's loop, written
        text("Pong, twice."),
    )

    turn = run_turn(plain_user, "pong twice")

    assert audited() == [("apong", "executed", "native")]
    repeat = tool_results(peer.requests[2])[1]
    assert repeat["decision"] == "repeated"
    assert repeat["earlier"] == tool_results(peer.requests[1])[0]
    assert "Do not call it again" in repeat["note"]
    assert said(turn) == "Pong, twice."


def test_a_model_that_only_repeats_twice_in_a_row_is_not_asked_again(use_llm, plain_user):
    peer = use_llm()
    peer.script(
        tool_calls(call("apong", {"times": 2})),
        tool_calls(call("apong", {"times": 2})),
        tool_calls(call("apong", {"times": 2})),
        text("never asked for"),
    )

    turn = run_turn(plain_user, "pong twice")

    assert audited() == [("apong", "executed", "native")]
    assert peer.unplayed == 1
    assert said(turn) == STUCK_NOTICE
    assert turn.assistant_message.status == "complete"


def test_different_arguments_are_a_different_call(use_llm, plain_user):
    use_llm().script(
        tool_calls(call("apong", {"times": 2})),
        tool_calls(call("apong", {"times": 3})),
        text("Done."),
    )

    run_turn(plain_user, "pong")

    assert audited() == [("apong", "executed", "native")] * 2


def test_a_repeatable_tool_runs_each_time(use_llm, plain_user):
    task_id = str(uuid.uuid4())  # a job's status changes between calls: get_task_status repeats
    use_llm().script(
        tool_calls(call("get_task_status", {"task_id": task_id})),
        tool_calls(call("get_task_status", {"task_id": task_id})),
        text("Still unknown."),
    )

    run_turn(plain_user, "status?")

    assert audited() == [("get_task_status", "executed", "native")] * 2


def test_a_confirmed_tool_cannot_be_declared_repeatable():
    def handler(call):
        return None

    with pytest.raises(ToolDefinitionError, match="repeatable"):
        AssistantTool.declare(
            handler,
            operation="wipe",
            domain="d",
            description="Wipe",
            risk_level="guarded",
            requires_confirmation=True,
            public=True,
            repeatable=True,
        )


def test_a_repeatable_tool_called_identically_in_a_loop_is_stopped_too(use_llm, plain_user):
    task_id = str(uuid.uuid4())  # it runs each time, and a model polling forever still stops
    peer = use_llm()
    peer.script(*[tool_calls(call("get_task_status", {"task_id": task_id})) for _ in range(4)])

    turn = run_turn(plain_user, "status?")

    assert audited() == [("get_task_status", "executed", "native")] * 3
    assert peer.unplayed == 1
    assert said(turn) == STUCK_NOTICE
