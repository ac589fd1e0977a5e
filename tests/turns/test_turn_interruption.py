"""A turn whose server process died is closed as interrupted, never left dangling."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import DatabaseError
from django.test import override_settings
from django.utils import timezone
from rest_framework.test import APIClient

from assistant import liveness
from assistant.checks import check_turn_liveness
from assistant.liveness import areap_interrupted_turns, reap_interrupted_turns, reply_id
from assistant.models import AuditEntry, Conversation, Message, PendingAction, ServerProcess
from assistant.turns.messages import start_turn
from assistant.turns.turn import Turn
from tests.clients import API
from tests.conftest import REDIS_URL
from tests.live_sockets import session_cookie, ws_connect, ws_send
from tests.openai_peer import LONGEST_STALL, Peer, Reply, call, tool_calls
from tests.openai_peer import openai_peer as openai_peer  # the fixture
from tests.processes import ROOT, database_url, free_port, wait_until_listening
from tests.sockets import kind, kinds, receive, request_cancel_order
from tests.sockets import send as socket_send
from tests.testapp.models import Order
from tests.uvicorn_servers import forget_event_logs

STALE_AFTER = 2.0  # the servers' TURN_STALE_AFTER (heartbeats every 0.5 s)
INTERRUPTED_RUN = [
    *["TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END"],
    "RUN_ERROR",
]


# -- the reaper, on rows as server processes leave them ------------------------------------------


def process(name: str, *, silent_for: float) -> ServerProcess:
    """A server process's row, its last heartbeat ``silent_for`` seconds ago."""
    beat_at = timezone.now() - timedelta(seconds=silent_for)
    return ServerProcess.objects.create(name=name, host="web-1", pid=4242, beat_at=beat_at)


def left_running(
    user: Any, by: ServerProcess | None, text: str = "ping", **options: Any
) -> Message:
    """A user's message whose turn ``by`` was running (stored as ``start_turn`` stores it)."""
    _, message = start_turn(user, text, **options)
    if by is not None:
        Message.objects.filter(pk=message.pk).update(process=by.name)
        message.refresh_from_db()
    return message


def replies_to(message: Message) -> list[Message]:
    return list(Message.objects.filter(conversation=message.conversation, role="assistant"))


@pytest.mark.django_db
def test_only_the_turns_of_a_process_that_stopped_beating_are_closed(plain_user):
    dead, live = process("dead", silent_for=600), process("live", silent_for=1)
    orphan = left_running(plain_user, dead)
    running = left_running(plain_user, live)
    untracked = left_running(plain_user, None)  # (a process that tracks no turns)

    closed = reap_interrupted_turns()

    assert [turn.message.pk for turn in closed] == [orphan.pk]
    [reply] = replies_to(orphan)
    assert (str(reply.pk), reply.status) == (reply_id(orphan.pk), "interrupted")
    assert reply.text.startswith("Sorry, this answer was interrupted")
    assert replies_to(running) == replies_to(untracked) == []
    assert list(ServerProcess.objects.values_list("name", flat=True)) == ["live"]  # dead: forgotten
    assert reap_interrupted_turns() == []  # once


@pytest.mark.django_db
def test_a_reply_stored_after_all_is_left_alone(plain_user):
    dead = process("dead", silent_for=600)
    answered = left_running(plain_user, dead)
    Message.objects.create(
        id=reply_id(answered.pk), conversation=answered.conversation, role="assistant", text="pong"
    )

    assert reap_interrupted_turns() == []
    assert [m.text for m in replies_to(answered)] == ["pong"]


@pytest.mark.django_db
def test_the_interrupted_reply_lists_the_turns_audited_calls_once_and_no_later_turns(plain_user):
    dead = process("dead", silent_for=600)
    orphan = left_running(plain_user, dead)
    conversation = orphan.conversation
    ran = AuditEntry.objects.create(
        user=plain_user, operation="ping", decision="executed", conversation=conversation
    )
    later = start_turn(plain_user, "ping again", conversation)[1]  # a turn of its own, answered
    after = AuditEntry.objects.create(
        user=plain_user, operation="ping", decision="executed", conversation=conversation
    )
    Message.objects.create(
        id=reply_id(later.pk),
        conversation=conversation,
        role="assistant",
        text="pong",
        tool_calls=[{"operation": "ping", "decision": "executed", "audit_id": after.pk}],
    )

    [closed] = reap_interrupted_turns()

    assert [(c["operation"], c["decision"], c["audit_id"]) for c in closed.reply.tool_calls] == [
        ("ping", "executed", ran.pk)
    ]
    assert AuditEntry.objects.count() == 2  # nothing written to the audit, nothing lost
    stored = list(conversation.messages.values_list("text", "status"))
    assert stored[:2] == [("ping", "complete"), (closed.reply.text, "interrupted")]  # in place


@pytest.mark.django_db
def test_a_dry_run_lists_the_turns_and_changes_nothing(plain_user):
    orphan = left_running(plain_user, process("dead", silent_for=600))
    out = StringIO()

    call_command("assistant_reap_turns", "--dry-run", stdout=out)

    assert out.getvalue().splitlines() == [
        f"Would close: message {orphan.pk} in conversation {orphan.conversation_id} "
        "(process web-1:4242)",
        "1 interrupted turn",
    ]
    assert replies_to(orphan) == []
    assert ServerProcess.objects.filter(name="dead").exists()


@pytest.mark.django_db
def test_the_command_closes_them_and_counts(plain_user):
    orphan = left_running(plain_user, process("dead", silent_for=90))
    out = StringIO()

    call_command("assistant_reap_turns", "--stale-after", "120", stdout=out)
    assert out.getvalue().splitlines() == ["0 interrupted turns"]  # not silent for long enough
    call_command("assistant_reap_turns", "--stale-after", "60", stdout=out)

    assert [m.status for m in replies_to(orphan)] == ["interrupted"]
    assert out.getvalue().splitlines()[-1] == "1 interrupted turn"


@pytest.mark.django_db
def test_the_command_refuses_a_silence_that_is_not_positive():
    with pytest.raises(CommandError, match="--stale-after must be a positive number"):
        call_command("assistant_reap_turns", "--stale-after", "0")


@pytest.mark.django_db
def test_a_run_with_no_message_of_its_own_named_in_the_last_beat_is_closed_too(plain_user):
    # answering an action: the run stores no message when it starts, only its reply at the end
    conversation = Conversation.objects.create(user=plain_user, title="orders")
    started = timezone.now()
    confirmed = AuditEntry.objects.create(
        user=plain_user, operation="cancel_order", decision="confirmed", conversation=conversation
    )
    run = {"conversation": str(conversation.pk), "run": "run-7", "reply": str(uuid.uuid4())}
    dead = process("dead", silent_for=600)
    ServerProcess.objects.filter(pk=dead.pk).update(runs=[{**run, "started_at": started}])
    out = StringIO()

    call_command("assistant_reap_turns", stdout=out)

    [reply] = Message.objects.filter(conversation=conversation)
    assert (str(reply.pk), reply.role, reply.status) == (run["reply"], "assistant", "interrupted")
    assert [(c["operation"], c["audit_id"]) for c in reply.tool_calls] == [
        ("cancel_order", confirmed.pk)
    ]
    assert out.getvalue().splitlines()[0] == (
        f"Closed as interrupted: run run-7 in conversation {conversation.pk} (process web-1:4242)"
    )
    assert reap_interrupted_turns() == []


class Noted(dict):
    """A beater's registry that remembers everything ever put in it."""

    def __init__(self) -> None:
        super().__init__()
        self.noted: list[Any] = []

    def __setitem__(self, key: Any, value: Any) -> None:
        self.noted.append(value)
        super().__setitem__(key, value)


@pytest.fixture
def beater(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """This process's heartbeat on, as a beater whose thread is never started (the test beats)."""
    settings.ASSISTANT = {**settings.ASSISTANT, "TURN_HEARTBEAT": 5.0}
    fake = liveness._Beater()
    fake.turns, fake.runs = Noted(), Noted()
    monkeypatch.setattr(liveness, "_beater", fake)
    monkeypatch.setattr(liveness, "_beating", lambda wait: fake)
    return fake


@pytest.mark.django_db(transaction=True)
async def test_a_process_names_each_turn_while_it_runs_and_forgets_it_after(
    open_socket, clerk, beater
):
    order = await Order.objects.acreate(reference="ORD-1")
    socket = await open_socket(clerk)
    asked = await request_cancel_order(socket, order)  # a turn of a message
    action = await PendingAction.objects.aget()
    await socket_send(socket, type="confirm", action=str(action.pk))  # a run of none
    while (await receive(socket))["type"] != "RUN_FINISHED":
        pass

    message = await Message.objects.aget(role="user")
    replies = [m async for m in Message.objects.filter(role="assistant").order_by("created_at")]
    assert message.process == beater.name  # in its own INSERT
    assert beater.turns.noted == [message.created_at]
    assert str(replies[0].pk) == reply_id(message.pk)
    [run] = beater.runs.noted
    assert (run["conversation"], run["reply"]) == (asked[0]["threadId"], str(replies[1].pk))
    assert beater.turns == beater.runs == {}  # both ended


@pytest.mark.django_db(transaction=True)
async def test_a_turn_whose_reply_could_not_be_stored_is_closed_as_interrupted_by_the_next_beat(
    open_socket, plain_user, beater, monkeypatch
):
    """The database went away as the turn ended (RUN_ERROR reply_not_stored): the process is
    alive, so no reaper comes; once the database answers, its next beat stores the interrupted
    reply and tells the sockets, once, and the user's message no longer waits for ever."""
    real_store = Turn._store

    def outage(turn: Turn, fields: Any) -> Any:
        raise DatabaseError("the database is down")  # as the server would answer

    monkeypatch.setattr(Turn, "_store", outage)
    socket = await open_socket(plain_user)
    await socket_send(socket, type="message", text="ping")
    frames = [await receive(socket)]
    while frames[-1]["type"] != "RUN_ERROR":
        frames.append(await receive(socket))
    assert frames[-1]["code"] == "reply_not_stored"
    message = await Message.objects.aget(role="user")
    assert not await Message.objects.filter(role="assistant").aexists()

    monkeypatch.setattr(Turn, "_store", real_store)  # the database is back
    for _ in range(2):  # (in its own thread, as it runs; the second beat finds nothing owed)
        await asyncio.to_thread(beater.beat)

    [reply] = [m async for m in Message.objects.filter(role="assistant")]
    assert (str(reply.pk), reply.status) == (reply_id(message.pk), "interrupted")
    assert [call["operation"] for call in reply.tool_calls] == ["ping"]  # as the audit holds it
    told = [await receive(socket) for _ in range(4)]
    assert kinds(told)[-1] == "RUN_ERROR"
    assert told[-1]["code"] == "turn_interrupted"
    assert told[-1]["runId"] == frames[0]["runId"]
    assert await socket.receive_nothing(timeout=0.5)
    assert beater.owed == {}


@pytest.mark.django_db(transaction=True)
def test_a_beat_stores_the_turns_running_in_one_row_per_process(beater):
    stored = timezone.now() - timedelta(seconds=40)
    beater.turns[uuid.uuid4()] = stored
    beater.runs["run-7"] = {"conversation": "c", "run": "run-7", "reply": "r", "started_at": "t"}

    for _ in range(2):  # (in a thread of its own, as it runs)
        thread = threading.Thread(target=beater.beat)
        thread.start()
        thread.join()

    row = ServerProcess.objects.get()
    assert (row.name, row.pid, row.oldest_turn_at) == (beater.name, os.getpid(), stored)
    assert row.runs == [beater.runs["run-7"]]
    assert timezone.now() - row.beat_at < timedelta(seconds=5)


@pytest.mark.parametrize(
    ("configured", "expected"),
    [
        ({}, []),  # 5 s and 30 s
        ({"TURN_HEARTBEAT": None}, []),  # nothing tracked
        ({"TURN_HEARTBEAT": 5, "TURN_STALE_AFTER": 11}, []),
        ({"TURN_HEARTBEAT": 5, "TURN_STALE_AFTER": 10}, ["assistant.E017"]),
        ({"TURN_HEARTBEAT": 60}, ["assistant.E017"]),
        ({"TURN_HEARTBEAT": "5"}, []),  # (E002's)
    ],
)
def test_e017_a_live_process_is_never_taken_for_dead_between_two_heartbeats(configured, expected):
    with override_settings(ASSISTANT=configured):
        assert [message.id for message in check_turn_liveness()] == expected


@pytest.mark.django_db
def test_a_rest_retry_with_the_same_key_gets_the_interrupted_reply_not_a_409_for_ever(plain_user):
    client = APIClient()
    client.force_login(plain_user)
    left_running(plain_user, process("dead", silent_for=600), idempotency_key="order-42")
    post = {"path": f"{API}/messages/", "data": {"message": "ping"}, "format": "json"}
    assert client.post(**post, headers={"Idempotency-Key": "order-42"}).status_code == 409

    reap_interrupted_turns()
    retried = client.post(**post, headers={"Idempotency-Key": "order-42"})
    again = client.post(**post, headers={"Idempotency-Key": "order-43"})  # the user tries again

    assert retried.status_code == 201, retried.json()
    assert retried.json()["assistant_message"]["status"] == "interrupted"
    assert again.status_code == 201
    assert again.json()["assistant_message"]["text"] == "pong for plain"


@pytest.mark.django_db(transaction=True)
async def test_the_conversations_open_sockets_are_told_the_run_ended_interrupted(
    open_socket, plain_user
):
    dead = await sync_to_async(process)("dead", silent_for=600)
    orphan = await sync_to_async(left_running)(plain_user, dead)
    socket = await open_socket(plain_user)
    await socket_send(socket, type="resume", conversation=str(orphan.conversation_id), after=0)
    while kind(await receive(socket)) != "CUSTOM assistant.resumed":
        pass

    await areap_interrupted_turns()
    frames = [await receive(socket) for _ in INTERRUPTED_RUN]

    assert kinds(frames) == [
        "TEXT_MESSAGE_START assistant",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "RUN_ERROR",
    ]
    reply = await Message.objects.aget(role="assistant")
    assert frames[0]["messageId"] == str(reply.pk)
    assert frames[1]["delta"] == reply.text
    assert (frames[-1]["code"], frames[-1]["message"]) == ("turn_interrupted", reply.text)


@pytest.fixture
def server_env(openai_peer: Peer) -> Iterator[dict[str, str]]:
    """What the test's server processes run with: the test database, Redis, the LLM peer."""
    yield {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.crash_settings",
        "DATABASE_URL": database_url(),
        "REDIS_URL": REDIS_URL or "redis://127.0.0.1:6379/0",
        "ASSISTANT_CHANNEL_LAYER": "pubsub",
        "ASSISTANT_CHANNEL_PREFIX": f"test-{uuid.uuid4().hex[:8]}",
        "ASSISTANT_TEST_LLM_URL": openai_peer.url,
        "ASSISTANT_TURN_STALE_AFTER": str(STALE_AFTER),
    }
    forget_event_logs()


@contextlib.contextmanager
def daphne(tmp_path: Path, env: dict[str, str]) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The test project under a real daphne process; yields its websocket URL and the process."""
    port = free_port()
    log = tmp_path / f"daphne-{port}.log"
    command = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port)]
    with log.open("wb") as output:
        process = subprocess.Popen(
            [*command, "tests.asgi:application"],
            cwd=ROOT,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until_listening(port, process, log)
        yield f"ws://127.0.0.1:{port}/ws/assistant/", process
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


async def frames_until(ws: Any, done: Any, within: float) -> list[dict[str, Any]]:
    """The frames a socket gets until ``done(frame)`` holds (or ``within`` seconds pass)."""
    frames: list[dict[str, Any]] = []
    deadline = time.monotonic() + within
    while not frames or not done(frames[-1]):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        try:
            frames.append(json.loads(await asyncio.wait_for(ws.recv(), left)))
        except TimeoutError:
            break
    return frames


def is_outcome(frame: dict[str, Any]) -> bool:
    return frame["type"] == "CUSTOM" and frame.get("name") == "assistant.outcome"


def ends_run(frame: dict[str, Any]) -> bool:
    return frame["type"] in ("RUN_FINISHED", "RUN_ERROR")


def slow_second_step() -> tuple[Reply, ...]:
    """The model calls ``ping`` (run and audited), then thinks for a long time."""
    return (tool_calls(call("ping", {})), Reply(stall_before=LONGEST_STALL, deltas=("late",)))


# -- a server killed mid-turn --------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_a_turn_whose_server_was_killed_is_closed_as_interrupted_once_a_server_runs_again(
    tmp_path, server_env, openai_peer, make_user
):
    make_user("walker")
    cookie = session_cookie("walker")
    openai_peer.script(*slow_second_step())

    async def send(url: str) -> list[dict[str, Any]]:
        async with ws_connect(url, cookie) as ws:
            await ws_send(ws, type="message", text="ping, then think it over")
            return await frames_until(ws, is_outcome, within=20)

    with daphne(tmp_path, server_env) as (first, process):
        before = asyncio.run(send(first))
        assert is_outcome(before[-1]), before
        assert openai_peer.wait_for_requests(2, timeout=20)  # the model thinks: kill the server
        process.kill()
        process.wait(timeout=10)
    thread_id, run_id = before[0]["threadId"], before[0]["runId"]
    assert not Message.objects.filter(role="assistant").exists()  # (the finding: none, ever)

    async def reconnect(url: str) -> list[dict[str, Any]]:
        async with ws_connect(url, cookie) as ws:  # the user's tab, once a server runs again
            await ws_send(ws, type="resume", conversation=thread_id, after=before[-1]["seq"])
            return await frames_until(ws, ends_run, within=STALE_AFTER + 15)

    with daphne(tmp_path, server_env) as (second, _):
        after = asyncio.run(reconnect(second))

    assert ends_run(after[-1]), after
    error = after[-1]
    assert (error["type"], error["code"], error["runId"]) == (
        "RUN_ERROR",
        "turn_interrupted",
        run_id,
    )
    assert "interrupted" in error["message"]
    user_message, reply = Message.objects.filter(conversation_id=thread_id).order_by("created_at")
    assert (user_message.role, reply.role, reply.status) == ("user", "assistant", "interrupted")
    assert "interrupted" in reply.text
    ping = AuditEntry.objects.get(operation="ping")  # the call that ran stands once in the audit
    assert ping.decision == "executed"
    assert [(c["operation"], c["decision"], c["audit_id"]) for c in reply.tool_calls] == [
        ("ping", "executed", ping.pk)
    ]
    shown = [
        f for f in after if f["type"] == "TEXT_MESSAGE_CONTENT" and f["messageId"] == str(reply.pk)
    ]
    assert [f["delta"] for f in shown] == [reply.text]  # the tab shows the stored reply as it is


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_a_server_never_closes_the_turns_of_another_that_still_beats(
    tmp_path, server_env, openai_peer, make_user
):
    make_user("walker")
    cookie = session_cookie("walker")
    # the model thinks for three times the silence that counts as dead, then answers
    thinking = Reply(stall_before=3 * STALE_AFTER, deltas=("All ", "done."))
    openai_peer.script(tool_calls(call("ping", {})), thinking)

    async def talk(runs_it: str, reaps: str) -> list[dict[str, Any]]:
        async with ws_connect(reaps, cookie), ws_connect(runs_it, cookie) as ws:
            await ws_send(ws, type="message", text="ping, then think it over")
            return await frames_until(ws, ends_run, within=6 * STALE_AFTER + 15)

    with daphne(tmp_path, server_env) as (first, _), daphne(tmp_path, server_env) as (second, _):
        frames = asyncio.run(talk(first, second))

    assert frames[-1]["type"] == "RUN_FINISHED", frames[-1]
    [reply] = Message.objects.filter(role="assistant")
    assert (reply.text, reply.status) == ("All done.", "complete")
    assert AuditEntry.objects.filter(operation="ping").count() == 1
