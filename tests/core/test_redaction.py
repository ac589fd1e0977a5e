"""Sensitive means sensitive everywhere: once the planner found a secret, no surface shows it."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection
from django.test import Client
from django.utils import timezone

from assistant import ToolCall, ToolResult, assistant_tool
from assistant.core.registry import ToolRegistry
from assistant.dispatch.confirmation import cancel_action, confirm_action
from assistant.dispatch.door import dispatch
from assistant.exceptions import ActionExpired
from assistant.models import AuditEntry, Conversation, Job, Message, PendingAction
from assistant.stream.eventlog import RedisEventLog, event_log
from assistant.turns.runs import run_turn
from tests.clients import API, client_for
from tests.conftest import REDIS_URL
from tests.openai_peer import call, closed_port_url, text, tool_calls
from tests.openai_peer import openai_peer as openai_peer  # the fixture
from tests.sockets import WAIT, connect, turns_ended
from tests.testapp.assistant_tools import ROTATED

SECRET = "Hunter2xq9"
ASK = f"rotate secret label=wifi secret={SECRET}"


def leaks(value: Any) -> bool:
    if isinstance(value, bytes):
        return SECRET.encode() in value
    if not isinstance(value, str):
        value = json.dumps(value, cls=DjangoJSONEncoder, default=str)
    return SECRET in value


def rows_with_the_secret() -> dict[str, list[dict[str, Any]]]:
    """Every stored row holding the secret (a waiting pending action holds it sealed)."""
    tables = {
        "conversation": Conversation.objects.values(),
        "message": Message.objects.values(),
        "pending action": PendingAction.objects.values(),
        "audit": AuditEntry.objects.values(),
        "job": Job.objects.values(),
    }
    found = {name: [row for row in rows if leaks(row)] for name, rows in tables.items()}
    return {name: rows for name, rows in found.items() if rows}


def staff_pages(conversation: Conversation) -> dict[str, bytes]:
    """What the staff surfaces render for this conversation: admin pages, exports, staff API."""
    pages = [
        "/admin/assistant/conversation/",
        f"/admin/assistant/conversation/?q={conversation.pk}",
        f"/admin/assistant/conversation/{conversation.pk}/change/",
        "/admin/assistant/pendingaction/",
        "/admin/assistant/auditentry/",
        "/admin/assistant/auditentry/export/csv/",
        "/admin/assistant/auditentry/export/jsonl/",
        f"{API}/admin/conversations/",
        f"{API}/admin/conversations/{conversation.pk}/history/",
        f"{API}/admin/audit/",
    ]
    pages += [f"/admin/assistant/pendingaction/{pk}/change/" for pk in _pks(PendingAction)]
    pages += [f"/admin/assistant/auditentry/{pk}/change/" for pk in _pks(AuditEntry)]
    return {page: _rendered(page) for page in pages}


def _pks(model: Any) -> list[Any]:
    return list(model.objects.values_list("pk", flat=True))


def _rendered(page: str) -> bytes:
    from django.contrib.auth import get_user_model

    staff = get_user_model().objects.get(username="root")
    client = Client()
    client.force_login(staff)
    response = client.get(page)
    assert response.status_code == 200, page
    if response.streaming:
        return b"".join(response.streaming_content)
    return response.content


def leaking_records(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        f"{record.name}: {record.getMessage()}"
        for record in caplog.records
        if leaks(record.getMessage()) or leaks(str(record.args)) or leaks(record.exc_text or "")
    ]


# -- REST ------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_secret_sent_over_rest_is_nowhere_in_clear(keeper, superuser, caplog):
    caplog.set_level(logging.DEBUG)

    response = client_for(keeper).post(f"{API}/messages/", {"message": ASK}, format="json")

    assert response.status_code == 201
    body = response.json()
    assert body["pending_actions"], body  # the tool waits for confirmation, with the secret
    assert not leaks(response.content)
    conversation = Conversation.objects.get(pk=body["conversation"])
    assert "[redacted]" in conversation.title
    assert rows_with_the_secret() == {}
    assert not leaks(body_of(client_for(keeper).get(f"{API}/conversations/")))
    assert not leaks(body_of(client_for(keeper).get(f"{API}/conversations/{conversation.pk}/")))
    replay = async_since(str(conversation.pk))
    assert replay, "the turn's frames were kept for replay"
    assert [frame for frame in replay if leaks(frame)] == []
    assert {page for page, html in staff_pages(conversation).items() if leaks(html)} == set()
    assert leaking_records(caplog) == []


def body_of(response: Any) -> bytes:
    assert response.status_code == 200
    return bytes(response.content)


def async_since(thread_id: str) -> list[dict[str, Any]]:
    from asgiref.sync import async_to_sync

    return async_to_sync(event_log().since)(thread_id, 0).frames


# -- decided pending actions keep only redacted entities -------------------------------------


def _ask(user: Any) -> PendingAction:
    response = client_for(user).post(f"{API}/messages/", {"message": ASK}, format="json")
    assert response.status_code == 201
    (action,) = response.json()["pending_actions"]
    stored = PendingAction.objects.get(pk=action["id"])
    assert stored.entities == {"label": "wifi", "secret": "[redacted]"}
    assert stored.sealed  # the secret, encrypted until it runs
    return stored


def raw_pending_actions() -> list[tuple[Any, ...]]:
    """Every pending action row as the database holds it, read past the ORM."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM assistant_pendingaction")
        return list(cursor.fetchall())


@pytest.fixture
def rotated() -> Any:
    """What rotate_secret's handler was given."""
    ROTATED.clear()
    yield ROTATED
    ROTATED.clear()


# -- a waiting action holds its secrets sealed -----------------------------------------------


@pytest.mark.django_db
def test_a_waiting_actions_row_holds_no_secret_in_clear(keeper):
    action = _ask(keeper)

    rows = raw_pending_actions()

    assert len(rows) == 1
    assert not leaks([str(column) for column in rows[0]])
    assert action.sealed in [str(column) for column in rows[0]]


@pytest.mark.django_db
def test_confirming_runs_the_handler_with_the_real_secret_and_drops_the_sealed_one(keeper, rotated):
    action = _ask(keeper)

    response = client_for(keeper).post(f"{API}/actions/{action.pk}/confirm/")

    assert (response.status_code, response.json()["decision"]) == (200, "confirmed")
    assert rotated == [SECRET]
    action.refresh_from_db()
    assert (action.status, action.sealed) == ("confirmed", "")
    assert not leaks([str(column) for row in raw_pending_actions() for column in row])


@pytest.mark.django_db
def test_a_sealed_secret_is_read_after_a_key_rotation_through_the_fallbacks(
    keeper, rotated, settings
):
    action = _ask(keeper)
    settings.SECRET_KEY_FALLBACKS = [settings.SECRET_KEY]
    settings.SECRET_KEY = "a-new-key-" + "x" * 50

    outcome = confirm_action(action.pk, user=keeper)

    assert outcome.decision == "confirmed"
    assert rotated == [SECRET]


@pytest.mark.django_db
def test_a_sealed_secret_no_key_can_read_expires_the_action_with_a_stable_code(
    keeper, rotated, settings
):
    action = _ask(keeper)
    settings.SECRET_KEY = "a-new-key-" + "x" * 50  # rotated without a fallback
    settings.SECRET_KEY_FALLBACKS = []

    response = client_for(keeper).post(f"{API}/actions/{action.pk}/confirm/")

    assert (response.status_code, response.json()["code"]) == (410, "secret_unreadable")
    assert rotated == []
    action.refresh_from_db()
    assert (action.status, action.sealed) == ("expired", "")
    entry = AuditEntry.objects.filter(operation="rotate_secret").latest("id")
    assert (entry.decision, entry.entities) == (
        "expired",
        {"label": "wifi", "secret": "[redacted]"},
    )
    assert entry.error.startswith("The secret")
    again = client_for(keeper).post(f"{API}/actions/{action.pk}/confirm/")
    assert (again.status_code, again.json()["code"]) == (410, "expired")  # as any expired one


@pytest.mark.django_db
def test_a_sealed_secret_cannot_be_moved_to_another_action(keeper, rotated):
    first, second = _ask(keeper), _ask(keeper)
    PendingAction.objects.filter(pk=second.pk).update(sealed=first.sealed)

    response = client_for(keeper).post(f"{API}/actions/{second.pk}/confirm/")

    assert (response.status_code, response.json()["code"]) == (410, "secret_unreadable")
    assert rotated == []


@pytest.mark.django_db
def test_the_admin_shows_neither_the_secret_nor_its_ciphertext(keeper, superuser):
    action = _ask(keeper)

    page = _rendered(f"/admin/assistant/pendingaction/{action.pk}/change/")

    assert not leaks(page)
    assert action.sealed.encode() not in page


@pytest.mark.django_db
def test_a_confirmed_action_ran_with_the_secret_and_then_forgot_it(keeper, superuser):
    action = _ask(keeper)

    outcome = confirm_action(action.pk, user=keeper)

    assert outcome.decision == "confirmed"
    assert outcome.text == f"rotated wifi ({len(SECRET)} characters)"
    action.refresh_from_db()
    assert action.status == "confirmed"
    assert (action.entities, action.sealed) == ({"label": "wifi", "secret": "[redacted]"}, "")
    assert rows_with_the_secret() == {}
    assert {p for p, html in staff_pages(action.conversation).items() if leaks(html)} == set()


@pytest.mark.django_db
def test_a_rejected_action_forgets_the_secret(keeper):
    action = _ask(keeper)

    outcome = cancel_action(action.pk, user=keeper)

    assert outcome.decision == "cancelled"
    action.refresh_from_db()
    assert action.status == "cancelled"
    assert (action.entities, action.sealed) == ({"label": "wifi", "secret": "[redacted]"}, "")
    assert rows_with_the_secret() == {}


@pytest.mark.django_db
def test_an_expired_action_confirmed_too_late_forgets_the_secret(keeper):
    action = _ask(keeper)
    PendingAction.objects.filter(pk=action.pk).update(expires_at=timezone.now())

    outcome = confirm_action(action.pk, user=keeper)

    assert outcome.decision == "expired"
    action.refresh_from_db()
    assert action.status == "expired"
    assert (action.entities, action.sealed) == ({"label": "wifi", "secret": "[redacted]"}, "")
    assert rows_with_the_secret() == {}


@pytest.mark.django_db
def test_an_expired_action_rejected_too_late_forgets_the_secret(keeper):
    action = _ask(keeper)
    PendingAction.objects.filter(pk=action.pk).update(expires_at=timezone.now())

    with pytest.raises(ActionExpired):
        PendingAction.decide(action.pk, keeper, PendingAction.Status.CANCELLED)

    action.refresh_from_db()
    assert action.status == "expired"
    assert (action.entities, action.sealed) == ({"label": "wifi", "secret": "[redacted]"}, "")


@pytest.mark.django_db
def test_an_expired_action_nobody_answers_forgets_the_secret_at_the_next_sweep(keeper):
    action = _ask(keeper)
    PendingAction.objects.filter(pk=action.pk).update(expires_at=timezone.now())

    assert PendingAction.objects.expire_due() == 1

    action.refresh_from_db()
    assert action.status == "expired"
    assert (action.entities, action.sealed) == ({"label": "wifi", "secret": "[redacted]"}, "")
    assert rows_with_the_secret() == {}
    assert PendingAction.objects.expire_due() == 0


@pytest.mark.django_db
def test_asking_again_sweeps_the_users_expired_actions(keeper):
    old = _ask(keeper)
    PendingAction.objects.filter(pk=old.pk).update(expires_at=timezone.now() - timedelta(1))

    _ask(keeper)

    old.refresh_from_db()
    assert old.status == "expired"
    assert (old.entities, old.sealed) == ({"label": "wifi", "secret": "[redacted]"}, "")


# -- websocket -------------------------------------------------------------------------------


async def _frames_until(socket: WebsocketCommunicator, last: Callable[[dict[str, Any]], bool]):
    frames = [await socket.receive_json_from(timeout=WAIT)]
    while not last(frames[-1]):
        frames.append(await socket.receive_json_from(timeout=WAIT))
    return frames


def _run_ended(frame: dict[str, Any]) -> bool:
    return frame.get("type") in ("RUN_FINISHED", "RUN_ERROR")


def _resumed(frame: dict[str, Any]) -> bool:
    return frame.get("type") == "CUSTOM" and frame.get("name") == "assistant.resumed"


async def _websocket_turn(keeper: Any) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]]:
    """Send the secret over a socket, then resume the conversation on a second socket."""

    socket = await connect(keeper)
    try:
        await socket.send_json_to({"type": "message", "text": ASK})
        frames = await _frames_until(socket, _run_ended)
        await turns_ended(WAIT)
        # the socket's own pending-action list comes first; the turn's frames after it
        thread_id = next(frame["threadId"] for frame in frames if "threadId" in frame)
        second = await connect(keeper)
        try:
            await second.send_json_to({"type": "resume", "conversation": thread_id, "after": 0})
            resumed = await _frames_until(second, _resumed)
            await second.send_json_to({"type": "resume", "conversation": thread_id, "after": 1})
            resumed += await _frames_until(second, _resumed)
        finally:
            await second.disconnect(timeout=WAIT)
    finally:
        await socket.disconnect(timeout=WAIT)
    return thread_id, frames, resumed


def _check_websocket_turn(thread_id: str, frames: list[dict[str, Any]], resumed: list[Any]):
    echoed = [f for f in frames if f.get("type") == "TEXT_MESSAGE_CONTENT"]
    assert any("[redacted]" in f["delta"] for f in echoed), "the user's message is echoed"
    assert [frame for frame in frames if leaks(frame)] == []
    assert "MESSAGES_SNAPSHOT" in [frame["type"] for frame in resumed]
    assert [frame for frame in resumed if leaks(frame)] == []
    conversation = Conversation.objects.get(pk=thread_id)
    assert "[redacted]" in conversation.title
    assert rows_with_the_secret() == {}
    return conversation


@pytest.mark.django_db(transaction=True)
async def test_a_secret_sent_over_the_websocket_is_nowhere_in_clear(keeper, superuser, caplog):
    caplog.set_level(logging.DEBUG)

    thread_id, frames, resumed = await _websocket_turn(keeper)

    conversation = await sync_to_async(_check_websocket_turn)(thread_id, frames, resumed)
    logged = (await event_log().since(thread_id, 0)).frames
    assert logged, "the turn's frames were kept for replay"
    assert [frame for frame in logged if leaks(frame)] == []
    pages = await sync_to_async(staff_pages)(conversation)
    assert {page for page, html in pages.items() if leaks(html)} == set()
    assert leaking_records(caplog) == []


@pytest.mark.django_db(transaction=True)
async def test_a_secret_sent_over_the_websocket_is_never_written_in_clear_even_for_a_moment(
    keeper, monkeypatch
):
    # The keyword planner finds the secret before the message is stored: the message and the
    # new conversation's title go to the database redacted (no clear row for a crash to keep).
    from django.db.backends.utils import CursorWrapper

    written: list[str] = []
    execute = CursorWrapper._execute

    def recording(self: Any, sql: str, params: Any, *args: Any) -> Any:
        if sql.lstrip().upper().startswith(("INSERT", "UPDATE")):
            written.append(f"{sql} {params!r}")
        return execute(self, sql, params, *args)

    monkeypatch.setattr(CursorWrapper, "_execute", recording)

    thread_id, frames, resumed = await _websocket_turn(keeper)

    stored = [statement for statement in written if "assistant_message" in statement]
    assert any("[redacted]" in statement for statement in stored), stored
    assert [statement for statement in written if leaks(statement)] == []
    await sync_to_async(_check_websocket_turn)(thread_id, frames, resumed)


@pytest.mark.django_db(transaction=True)
async def test_a_secret_confirmed_over_the_websocket_ran_and_was_forgotten(keeper):

    socket = await connect(keeper)
    try:
        await socket.send_json_to({"type": "message", "text": ASK})
        asked = await _frames_until(socket, _run_ended)
        (interrupt,) = asked[-1]["outcome"]["interrupts"]
        await turns_ended(WAIT)
        await socket.send_json_to({"type": "confirm", "action": interrupt["id"]})
        confirmed = await _frames_until(socket, _run_ended)
        await turns_ended(WAIT)
    finally:
        await socket.disconnect(timeout=WAIT)

    action = await PendingAction.objects.aget(pk=interrupt["id"])
    assert action.status == "confirmed"
    assert (action.entities, action.sealed) == ({"label": "wifi", "secret": "[redacted]"}, "")
    results = [f["content"] for f in confirmed if f["type"] == "TOOL_CALL_RESULT"]
    assert results == [f"rotated wifi ({len(SECRET)} characters)"]
    assert [frame for frame in asked + confirmed if leaks(frame)] == []
    assert await sync_to_async(rows_with_the_secret)() == {}


@pytest.mark.django_db(transaction=True)
async def test_a_secret_no_key_can_read_is_told_with_its_code_over_the_websocket(
    keeper, rotated, settings
):
    socket = await connect(keeper)
    try:
        await socket.send_json_to({"type": "message", "text": ASK})
        asked = await _frames_until(socket, _run_ended)
        (interrupt,) = asked[-1]["outcome"]["interrupts"]
        await turns_ended(WAIT)
        settings.SECRET_KEY = "a-new-key-" + "x" * 50  # rotated without a fallback
        settings.SECRET_KEY_FALLBACKS = []
        await socket.send_json_to({"type": "confirm", "action": interrupt["id"]})
        confirmed = await _frames_until(socket, _run_ended)
        await turns_ended(WAIT)
    finally:
        await socket.disconnect(timeout=WAIT)

    (told,) = [f["value"] for f in confirmed if f.get("name") == "assistant.outcome"]
    assert (told["decision"], told["code"]) == ("expired", "secret_unreadable")
    assert confirmed[-1]["type"] == "RUN_FINISHED"
    assert rotated == []
    action = await PendingAction.objects.aget(pk=interrupt["id"])
    assert (action.status, action.sealed) == ("expired", "")
    decisions = AuditEntry.objects.filter(operation="rotate_secret").order_by("id")
    assert [d async for d in decisions.values_list("decision", flat=True)] == [
        "confirmation_requested",
        "expired",
    ]


@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
async def test_the_redis_event_log_never_holds_the_secret(keeper, settings):
    settings.ASSISTANT = {**settings.ASSISTANT, "EVENT_LOG": REDIS_URL}
    log = event_log()
    assert isinstance(log, RedisEventLog)

    thread_id, frames, resumed = await _websocket_turn(keeper)

    await sync_to_async(_check_websocket_turn)(thread_id, frames, resumed)
    import redis.asyncio as redis

    client = redis.Redis.from_url(REDIS_URL)
    try:
        seq_key, frames_key = RedisEventLog._keys(thread_id)
        members = await client.zrange(frames_key, 0, -1)
        assert members, "the turn's frames were kept in Redis"
        assert [member for member in members if leaks(member)] == []
        await client.delete(seq_key, frames_key)
    finally:
        await client.aclose()


# -- the LLM planner -------------------------------------------------------------------------


@pytest.fixture
def use_llm(settings, openai_peer):
    settings.ASSISTANT = {
        **settings.ASSISTANT,
        "PLANNER": "llm",
        "LLM": {"BASE_URL": openai_peer.url, "MODEL": "test-model", "TIMEOUT": 5},
    }
    return openai_peer


@pytest.mark.django_db(transaction=True)
def test_the_model_never_sees_the_secret_again_on_a_later_turn(use_llm, keeper):
    asked = {"label": "wifi", "secret": SECRET}
    use_llm.script(tool_calls(call("store_secret", asked)), text("Stored."), text("Hello."))

    first = run_turn(keeper, f"store secret wifi {SECRET}")
    run_turn(keeper, "hello again", conversation_id=first.conversation.pk)

    later = use_llm.requests[-1]["messages"]
    assert [m["content"] for m in later if m["role"] == "user"] == [
        "store secret wifi [redacted]",
        "hello again",
    ]
    assert not leaks(later)
    assert rows_with_the_secret() == {}
    assert first.conversation.title == "store secret wifi [redacted]"


@pytest.mark.django_db(transaction=True)
def test_a_model_that_speaks_before_its_call_leaves_no_secret_kept(use_llm, keeper):
    asked = {"label": "wifi", "secret": SECRET}
    use_llm.script(
        tool_calls(call("store_secret", asked), said=(f"Storing {SECRET} now. ",)),
        text(f"Stored {SECRET}."),
    )

    turn = run_turn(keeper, f"store secret wifi {SECRET}")

    assert turn.user_message.text == "store secret wifi [redacted]"
    assert rows_with_the_secret() == {}
    # the words streamed before the call was known went out live; nothing kept holds them
    assert [frame for frame in async_since(str(turn.conversation.pk)) if leaks(frame)] == []
    assert [frame for frame in turn.frames if leaks(frame)] == []


# -- a handler's own error -------------------------------------------------------------------


@pytest.mark.django_db
def test_a_handler_error_quoting_the_secret_is_audited_redacted(keeper):
    site = ToolRegistry("sensitive")

    @assistant_tool(
        operation="check_pin",
        domain="vault",
        description="Check a PIN",
        risk_level="safe",
        public=True,
        sensitive_entities=["pin"],
        site=site,
    )
    def check_pin(call: ToolCall, pin: str) -> ToolResult:
        raise ValueError(f"pin {pin} is not a number")

    outcome = dispatch("check_pin", {"pin": SECRET}, user=keeper, site=site)

    assert outcome.decision == "failed"
    entry = AuditEntry.objects.get(pk=outcome.audit_id)
    assert entry.error == "ValueError: pin [redacted] is not a number"
    assert rows_with_the_secret() == {}


@pytest.mark.django_db(transaction=True)
def test_a_model_repeating_the_secret_in_pieces_streams_it_redacted(use_llm, keeper):
    asked = {"label": "wifi", "secret": SECRET}
    pieces = ("Stored ", SECRET[:3], SECRET[3:7], SECRET[7:] + " for", " you.")
    use_llm.script(tool_calls(call("store_secret", asked)), text(*pieces))

    turn = run_turn(keeper, f"store secret wifi {SECRET}")

    reply = str(turn.assistant_message.pk)
    streamed = "".join(
        f["delta"]
        for f in turn.frames
        if f["type"] == "TEXT_MESSAGE_CONTENT" and f["messageId"] == reply
    )
    assert streamed.endswith("Stored [redacted] for you.")
    assert turn.assistant_message.text == streamed
    assert rows_with_the_secret() == {}


def pin_keeper(answer: Callable[[str], ToolResult]) -> ToolRegistry:
    """A registry with one tool, ``keep_pin``, whose ``pin`` is sensitive and answered by ``answer``."""
    site = ToolRegistry("sensitive")

    @assistant_tool(
        operation="keep_pin",
        domain="vault",
        description="Keep a PIN",
        risk_level="safe",
        public=True,
        sensitive_entities=["pin"],
        keywords=["keep pin"],
        site=site,
    )
    def keep_pin(call: ToolCall, pin: str) -> ToolResult:
        return answer(pin)

    return site


@pytest.mark.django_db
def test_a_handler_repeating_the_secret_is_redacted_in_the_turn(keeper):
    site = pin_keeper(lambda pin: ToolResult(text=f"kept {pin}"))

    turn = run_turn(keeper, f"keep pin pin={SECRET}", site=site)

    (outcome,) = turn.outcomes
    assert outcome.text == "kept [redacted]"
    assert turn.assistant_message.text == "kept [redacted]"
    assert [frame for frame in turn.frames if leaks(frame)] == []
    assert rows_with_the_secret() == {}


@pytest.mark.django_db
def test_a_handler_returning_the_secret_in_its_data_shows_and_stores_it_redacted(keeper):
    def rows(pin: str) -> list[dict[str, str]]:
        return [{"pin": pin, "note": f"was {pin}"}]

    site = pin_keeper(lambda pin: ToolResult(text="kept", data={"rows": rows(pin)}))

    turn = run_turn(keeper, f"keep pin pin={SECRET}", site=site)

    (outcome,) = turn.outcomes
    shown = {"rows": rows("[redacted]")}
    assert outcome.result.data == shown
    assert turn.assistant_message.tool_calls[0]["data"] == shown
    (sent,) = [f for f in turn.frames if f.get("name") == "assistant.outcome"]
    assert sent["value"]["data"] == shown
    assert [frame for frame in turn.frames if leaks(frame)] == []
    assert rows_with_the_secret() == {}


@pytest.mark.django_db(transaction=True)
async def test_falling_back_to_keywords_still_echoes_the_message_redacted(settings, keeper):

    settings.ASSISTANT = {
        **settings.ASSISTANT,
        "PLANNER": "llm",
        "LLM": {"BASE_URL": closed_port_url(), "TIMEOUT": 2, "FALLBACK_TO_KEYWORDS": True},
    }
    socket = await connect(keeper)
    try:
        await socket.send_json_to({"type": "message", "text": f"store secret x secret={SECRET}"})
        frames = await _frames_until(socket, _run_ended)
        await turns_ended(WAIT)
    finally:
        await socket.disconnect(timeout=WAIT)

    assert "assistant.notice" in [frame.get("name") for frame in frames]
    assert [frame for frame in frames if leaks(frame)] == []
    assert await sync_to_async(rows_with_the_secret)() == {}


@pytest.mark.django_db
def test_a_confirmed_action_keeps_what_it_came_to_redacted(keeper):
    site = ToolRegistry("sensitive")

    @assistant_tool(
        operation="set_pin",
        domain="vault",
        description="Set a PIN (asks first)",
        risk_level="guarded",
        requires_confirmation=True,
        public=True,
        sensitive_entities=["pin"],
        site=site,
    )
    def set_pin(call: ToolCall, pin: str) -> ToolResult:
        return ToolResult(text=f"set to {pin}", data={"rows": [{"pin": pin}]})

    asked = dispatch("set_pin", {"pin": SECRET}, user=keeper, site=site)
    outcome = confirm_action(asked.pending_action.pk, user=keeper, site=site)

    assert (asked.decision, outcome.decision) == ("confirmation_requested", "confirmed")
    kept = PendingAction.objects.get(pk=asked.pending_action.pk).result
    assert kept["text"] == "set to [redacted]"
    assert kept["data"] == {"rows": [{"pin": "[redacted]"}]}
    assert rows_with_the_secret() == {}
