"""One turn: the user's message is stored first, the reply after, whatever happens between."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.db import DatabaseError

from assistant import ToolCall, ToolResult, assistant_tool
from assistant.core.registry import ToolRegistry, registry
from assistant.exceptions import ConversationNotFound, InvalidMessage, InvalidTitle
from assistant.models import AuditEntry, Conversation, Message
from assistant.turns.conversations import check_title
from assistant.turns.messages import start_turn
from assistant.turns.planners.keywords import reply_text
from assistant.turns.records import short_title
from assistant.turns.runs import run_started_turn, run_turn
from assistant.turns.turn import TURN_FAILED, Turn
from tests.testapp.models import Order
from tests.turns.reading import stored

pytestmark = pytest.mark.django_db


def test_a_turn_stores_the_question_then_the_answer(reader):
    Order.objects.create(reference="ORD-1")

    turn = run_turn(reader, "  list orders  ")

    assert stored(turn.conversation) == [
        ("user", "list orders", "complete"),
        ("assistant", "ORD-1", "complete"),
    ]
    assert turn.user_message.created_at <= turn.assistant_message.created_at
    (call,) = turn.assistant_message.tool_calls
    assert (call["operation"], call["decision"], call["text"]) == (
        "list_orders",
        "executed",
        "ORD-1",
    )
    assert call["audit_id"] == AuditEntry.objects.get().pk
    assert AuditEntry.objects.get().conversation == turn.conversation


def test_the_users_message_is_stored_before_any_tool_runs(plain_user):
    site = ToolRegistry("chat")
    seen: list[list[tuple[str, str]]] = []

    @assistant_tool(
        operation="look_back",
        domain="diagnostics",
        description="Report what the conversation holds",
        risk_level="safe",
        public=True,
        keywords=["look back"],
        site=site,
    )
    def look_back(call: ToolCall) -> ToolResult:
        seen.append(list(call.conversation.messages.values_list("role", "text")))
        return ToolResult(text="looked")

    run_turn(plain_user, "look back please", site=site)

    assert seen == [[("user", "look back please")]]


def test_a_tools_data_goes_with_its_call_unless_too_big_to_send(plain_user):
    site = ToolRegistry("chat")

    @assistant_tool(
        operation="rows",
        domain="diagnostics",
        description="Return rows",
        risk_level="safe",
        public=True,
        keywords=["rows"],
        site=site,
    )
    def rows(call: ToolCall, count: int) -> ToolResult:
        return ToolResult(
            text=f"{count} rows", data=[{"n": n, "pad": "x" * 100} for n in range(count)]
        )

    small = run_turn(plain_user, "rows count=2", site=site)
    big = run_turn(plain_user, "rows count=3000", site=site)

    (call,) = small.assistant_message.tool_calls
    assert call["data"] == [{"n": 0, "pad": "x" * 100}, {"n": 1, "pad": "x" * 100}]
    assert "data_omitted" not in call
    (call,) = big.assistant_message.tool_calls
    assert (call["data"], call["data_omitted"], call["text"]) == (None, True, "3000 rows")
    (outcome,) = [f["value"] for f in big.frames if f.get("name") == "assistant.outcome"]
    assert (outcome["data"], outcome["data_omitted"]) == (None, True)
    assert len(big.outcomes[0].result.data) == 3000


def test_a_new_conversation_is_titled_from_the_message(plain_user):
    text = "ping " + "and more words " * 10

    turn = run_turn(plain_user, text)

    assert turn.conversation.user == plain_user
    assert turn.conversation.title == "ping and more words and more"
    assert Conversation.objects.get(user=plain_user).title == "ping and more words and more"


@pytest.mark.parametrize(
    ("message", "title"),
    [
        ("ping", "ping"),
        ("What can you do?", "What can you do"),
        ("Run the weekly report. Then mail it to ops.", "Run the weekly report"),
        ("Hi! Can you list the orders please", "Hi! Can you list the orders"),
        ("v1.2 is out; upgrade the staging servers", "v1.2 is out"),
        ("cancel order order_id=5", "cancel order order_id=5"),
        ("list the orders\nthen the reports", "list the orders"),
        ("  spaced\t out   words  ", "spaced out words"),
        ("list orders, reports, and...", "list orders, reports, and"),
        ("supercalifragilistic " * 2 + "x" * 30, "supercalifragilistic supercalifragilistic"),
        ("y" * 90, "y" * 60),
        ("???", "???"),
    ],
)
def test_a_short_title_is_the_first_sentence_in_six_words_and_60_characters(message, title):
    assert short_title(message) == title
    assert len(short_title(message)) <= 60


@pytest.mark.parametrize(
    ("title", "stored"), [("  Weekly \n checks ", "Weekly checks"), ("x" * 200, "x" * 200)]
)
def test_a_chosen_title_is_stored_with_its_spaces_collapsed(title, stored):
    assert check_title(title) == stored


@pytest.mark.parametrize("title", ["", "   ", None, 5, "x" * 201, "a NUL \x00", "half \ud800"])
def test_a_chosen_title_that_cannot_be_stored_is_refused(title):
    with pytest.raises(InvalidTitle):
        check_title(title)


def test_a_turn_continues_the_users_own_conversation(plain_user):
    first = run_turn(plain_user, "ping")

    second = run_turn(plain_user, "async ping", conversation_id=first.conversation.pk)

    assert second.conversation == first.conversation
    assert stored(first.conversation) == [
        ("user", "ping", "complete"),
        ("assistant", "pong for plain", "complete"),
        ("user", "async ping", "complete"),
        ("assistant", "pong", "complete"),
    ]
    assert Conversation.objects.count() == 1


def test_someone_elses_conversation_is_not_found(plain_user, reader):
    theirs = run_turn(reader, "ping").conversation

    with pytest.raises(ConversationNotFound) as refused:
        run_turn(plain_user, "ping", conversation_id=theirs.pk)

    assert refused.value.code == "not_found"
    assert refused.value.status == 404
    assert theirs.messages.count() == 2
    assert not Conversation.objects.filter(user=plain_user).exists()


@pytest.mark.parametrize("conversation_id", [uuid.uuid4(), "not-a-uuid"])
def test_a_conversation_that_does_not_exist_is_not_found(plain_user, conversation_id):
    with pytest.raises(ConversationNotFound):
        run_turn(plain_user, "ping", conversation_id=conversation_id)

    assert not Message.objects.exists()
    assert not AuditEntry.objects.exists()


@pytest.mark.parametrize("text", ["", "   \n\t ", None, 42])
def test_an_empty_message_is_refused_and_nothing_is_stored(plain_user, text):
    with pytest.raises(InvalidMessage) as refused:
        run_turn(plain_user, text)

    assert refused.value.code == "invalid_message"
    assert not Conversation.objects.exists()
    assert not Message.objects.exists()
    assert not AuditEntry.objects.exists()


def test_a_too_long_message_is_refused_and_nothing_is_stored(plain_user, settings):
    settings.ASSISTANT = {**settings.ASSISTANT, "MAX_MESSAGE_LENGTH": 20}
    conversation = run_turn(plain_user, "ping").conversation

    with pytest.raises(InvalidMessage):
        run_turn(plain_user, "ping " * 5, conversation_id=conversation.pk)

    assert conversation.messages.count() == 2
    assert Conversation.objects.count() == 1


def test_a_message_at_the_length_limit_is_accepted(plain_user, settings):
    settings.ASSISTANT = {**settings.ASSISTANT, "MAX_MESSAGE_LENGTH": 20}

    turn = run_turn(plain_user, "ping" + "!" * 16)

    assert turn.assistant_message.text == "pong for plain"


def test_a_planner_crash_leaves_a_failed_reply_and_keeps_the_question(plain_user, monkeypatch):
    def crash(*args, **kwargs):
        raise RuntimeError("planner down: secret stack detail")

    monkeypatch.setattr("assistant.turns.planners.keywords.plan", crash)

    turn = run_turn(plain_user, "ping")

    assert stored(turn.conversation) == [
        ("user", "ping", "complete"),
        ("assistant", TURN_FAILED, "failed"),
    ]
    assert "secret stack detail" not in turn.assistant_message.text
    assert turn.assistant_message.tool_calls == []


def test_a_failing_tool_is_answered_not_crashed(plain_user):
    turn = run_turn(plain_user, "explode")

    assert turn.assistant_message.status == "complete"
    (call,) = turn.assistant_message.tool_calls
    assert (call["decision"], call["code"]) == ("failed", "tool_failed")
    assert "boom" not in turn.assistant_message.text


def test_a_risky_request_in_chat_waits_for_confirmation(clerk):
    order = Order.objects.create(reference="ORD-7")

    turn = run_turn(clerk, f"approve order {order.pk}")

    (action,) = turn.pending_actions
    assert action.user == clerk
    assert action.entities == {"order_id": order.pk}
    assert action.conversation == turn.conversation
    (call,) = turn.assistant_message.tool_calls
    assert call["decision"] == "confirmation_requested"
    assert call["pending_action"] == str(action.pk)
    assert Order.objects.get(pk=order.pk).approvals == 0


# -- a reply stored in its last call's hop ----------------------------------------------------


def own_turn(user, text: str, site: ToolRegistry = registry) -> Turn:
    conversation, message = start_turn(user, text, None)
    return Turn(
        user=user, conversation=conversation, user_message=message, source="rest", site=site
    )


def test_a_keyword_turn_stores_its_reply_in_the_hop_that_runs_its_tool(plain_user, monkeypatch):
    # the call (run and audited) and the reply in one sync step: none of the turn's own for it
    steps: list[str] = []

    def counted(function, *args, **kwargs):
        steps.append(getattr(function, "__name__", repr(function)))
        return sync_to_async(function, *args, **kwargs)

    monkeypatch.setattr("assistant.turns.turn.sync_to_async", counted)

    turn = run_turn(plain_user, "ping")

    assert stored(turn.conversation) == [
        ("user", "ping", "complete"),
        ("assistant", "pong for plain", "complete"),
    ]
    assert not {"_store_last", "_correct"} & set(steps)
    reply = Message.objects.get(role="assistant")
    assert reply.pk == turn.assistant_message.pk
    assert [call["operation"] for call in reply.tool_calls] == ["ping"]
    assert reply.tool_calls[0]["audit_id"] == AuditEntry.objects.get(operation="ping").pk


def test_a_reply_said_otherwise_than_the_planner_foretold_is_stored_as_said(plain_user):
    turn = own_turn(plain_user, "ping")

    async def work(turn: Turn) -> None:
        await turn.call("ping", {}, reply=lambda outcomes: "what it meant to say")
        await turn.say("what it said")

    result = async_to_sync(run_started_turn)(turn, work)

    reply = Message.objects.get(role="assistant")
    assert (reply.text, reply.status) == ("what it said", "complete")
    assert result.assistant_message.text == "what it said"
    assert [call["text"] for call in reply.tool_calls] == ["pong for plain"]


def test_a_stop_after_the_last_call_leaves_its_reply_cancelled(plain_user):
    turn = own_turn(plain_user, "ping")

    async def work(turn: Turn) -> None:
        await turn.call("ping", {}, reply=reply_text)
        turn.cancel.cancel()  # the user's Stop, once the call's hop stored the reply
        await asyncio.sleep(5)
        await turn.say("never said")

    result = async_to_sync(run_started_turn)(turn, work)

    reply = Message.objects.get(role="assistant")
    assert (reply.text, reply.status) == ("", "cancelled")
    assert [call["operation"] for call in reply.tool_calls] == ["ping"]
    assert result.assistant_message.status == "cancelled"
    assert result.frames[-1]["type"] == "RUN_FINISHED"
    assert result.frames[-1]["result"]["status"] == "cancelled"


def test_a_reply_not_stored_with_its_call_is_stored_when_the_turn_ends(plain_user, monkeypatch):
    real_store = Turn._store
    refusals = iter([True])

    def refused_once(turn: Turn, fields):
        if next(refusals, False):
            raise DatabaseError("the database blinked")  # as the server would answer
        return real_store(turn, fields)

    monkeypatch.setattr(Turn, "_store", refused_once)

    turn = run_turn(plain_user, "ping")

    assert stored(turn.conversation) == [
        ("user", "ping", "complete"),
        ("assistant", "pong for plain", "complete"),
    ]
    assert [entry.operation for entry in AuditEntry.objects.all()] == ["ping"]


def napping_site() -> ToolRegistry:
    site = ToolRegistry("ahead")

    @assistant_tool(
        operation="nap",
        domain="diagnostics",
        description="Sleep a little, then say so",
        risk_level="safe",
        public=True,
        site=site,
    )
    def nap(call: ToolCall) -> ToolResult:
        time.sleep(0.3)
        return ToolResult(text="nap done \x00 here")  # (a NUL: stored as U+FFFD)

    return site


def test_a_corrected_reply_is_stored_as_storable_as_any(plain_user):
    turn = own_turn(plain_user, "nap", napping_site())

    async def work(turn: Turn) -> None:
        await turn.call("nap", {}, reply=reply_text)
        await turn.say("said otherwise \x00")

    async_to_sync(run_started_turn)(turn, work)

    reply = Message.objects.get(role="assistant")
    assert reply.text == "said otherwise \ufffd"
    assert reply.tool_calls[0]["text"] == "nap done \ufffd here"


def test_a_call_cancelled_twice_while_its_tool_runs_leaves_one_reply_cancelled(plain_user):
    # (as a shutdown cancels every task): the tool's thread runs on, its reply is still one
    turn = own_turn(plain_user, "nap", napping_site())

    async def work(turn: Turn) -> None:
        await turn.call("nap", {}, reply=reply_text)

    async def cancelled_twice() -> None:
        task = asyncio.ensure_future(run_started_turn(turn, work))
        for _ in range(2):
            await asyncio.sleep(0.1)
            task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    async_to_sync(cancelled_twice)()

    (reply,) = Message.objects.filter(role="assistant")
    assert reply.status == "cancelled"
    assert [call["operation"] for call in reply.tool_calls] == ["nap"]
    assert turn.frames[-1]["type"] == "RUN_FINISHED"
    assert [entry.operation for entry in AuditEntry.objects.all()] == ["nap"]
