"""A turn is never lost: sockets that vanish, Redis that cannot be reached, PostgreSQL that goes."""

from __future__ import annotations

import asyncio
import contextlib
import socket as sockets
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from asgiref.sync import sync_to_async
from channels.layers import channel_layers
from django.db import connection
from rest_framework.test import APIClient
from websockets.exceptions import ConnectionClosed

from assistant.exceptions import TurnInProgress
from assistant.models import AuditEntry, Message
from assistant.turns.messages import start_turn
from tests.channel_layers import REDIS_CHANNEL_LAYERS, redis_channel_layer
from tests.clients import API
from tests.live_sockets import session_cookie, ws_connect, ws_receive, ws_send
from tests.sockets import kind, receive, receive_until, send

FINAL = {"complete", "cancelled", "failed"}


def answered(expected: int, within: float) -> list[Message]:
    """The stored replies, once ``expected`` of them are there (or ``within`` seconds passed)."""
    deadline = time.monotonic() + within
    while Message.objects.filter(role="assistant").count() < expected:
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
    return list(Message.objects.filter(role="assistant"))


# -- sockets that close right after sending -----------------------------------------------------


SOCKETS = 150


# PostgreSQL: in-memory SQLite refuses a write while another thread reads or writes the table
@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_every_message_of_a_socket_closed_right_after_sending_is_answered(
    redis_channel_layer, asgi_live_server, make_user, settings
):
    # few lanes, few PostgreSQL sessions: the turns queue for them after their sockets closed
    settings.ASSISTANT = {**settings.ASSISTANT, "MAX_CONCURRENT_TURNS": 4}
    make_user("walker")
    cookie = session_cookie("walker")
    url = asgi_live_server.replace("http://", "ws://") + "/ws/assistant/"
    at_once = asyncio.Semaphore(50)

    async def send_and_close() -> None:
        # What is tested is the turns after the sockets closed: each socket's connect (its
        # session and waiting-actions queries, in the one sync thread, beside four lanes of
        # turns) may wait its turn longer than one frame's WAIT when 50 open at once.
        async with at_once, ws_connect(url, cookie, open_timeout=30) as ws:
            await ws_send(ws, type="message", text="ping")

    async def send_all() -> None:
        await asyncio.wait_for(
            asyncio.gather(*(send_and_close() for _ in range(SOCKETS))), timeout=60
        )

    asyncio.run(send_all())
    replies = answered(SOCKETS, within=60)

    assert Message.objects.filter(role="user").count() == SOCKETS
    assert len(replies) == SOCKETS
    assert {reply.status for reply in replies} <= FINAL
    assert {reply.text for reply in replies} == {"pong for walker"}
    assert AuditEntry.objects.filter(operation="ping", decision="executed").count() == SOCKETS


# -- Redis that cannot be reached ----------------------------------------------------------------


def closed_port_url() -> str:
    """A Redis URL nobody listens on: the port was free a moment ago and is left unbound."""
    with sockets.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"redis://127.0.0.1:{port}/0"


@pytest.fixture(params=sorted(REDIS_CHANNEL_LAYERS))
def unreachable_redis(request: pytest.FixtureRequest, settings: Any) -> Iterator[str]:
    """Channel layer ("core", then "pubsub") and event log on a Redis that is not there."""
    url = closed_port_url()
    settings.CHANNEL_LAYERS = {"default": redis_channel_layer(request.param, url, "down")}
    settings.ASSISTANT = {**settings.ASSISTANT, "EVENT_LOG": url}
    channel_layers.backends.clear()
    yield url
    channel_layers.backends.clear()


@pytest.mark.django_db
def test_a_rest_turn_is_answered_and_stored_while_redis_is_unreachable(
    unreachable_redis, plain_user
):
    client = APIClient()
    client.force_login(plain_user)

    response = client.post(f"{API}/messages/", {"message": "ping"}, format="json")

    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["assistant_message"]["text"] == "pong for plain"
    assert [(m.role, m.status) for m in Message.objects.all()] == [
        ("user", "complete"),
        ("assistant", "complete"),
    ]


@pytest.mark.django_db(transaction=True)
def test_a_socket_whose_channel_layer_is_unreachable_is_told_and_closed_with_1013(
    unreachable_redis, asgi_live_server, make_user
):
    make_user("walker")
    cookie = session_cookie("walker")
    url = asgi_live_server.replace("http://", "ws://") + "/ws/assistant/"

    async def connect() -> tuple[dict[str, Any], int | None]:
        async with ws_connect(url, cookie) as ws:
            error = await ws_receive(ws)
            with pytest.raises(ConnectionClosed):
                await asyncio.wait_for(ws.recv(), 10)
            return error, ws.close_code

    error, close_code = asyncio.run(connect())

    assert kind(error) == "CUSTOM assistant.error"
    assert error["value"]["code"] == "channel_layer_unavailable"
    assert close_code == 1013


# -- retrying a REST turn ------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_retry_with_the_same_idempotency_key_returns_the_first_turn(plain_user):
    client = APIClient()
    client.force_login(plain_user)
    post = {"path": f"{API}/messages/", "data": {"message": "ping"}, "format": "json"}

    first = client.post(**post, headers={"Idempotency-Key": "order-42"})
    retried = client.post(**post, headers={"Idempotency-Key": "order-42"})
    other = client.post(**post, headers={"Idempotency-Key": "order-43"})

    assert first.status_code == retried.status_code == other.status_code == 201
    assert retried.json() == first.json()
    assert other.json()["conversation"] != first.json()["conversation"]
    assert Message.objects.count() == 4
    assert AuditEntry.objects.filter(operation="ping").count() == 2


@pytest.mark.django_db
def test_idempotency_keys_are_per_user(plain_user, make_user):
    mine, theirs = APIClient(), APIClient()
    mine.force_login(plain_user)
    theirs.force_login(make_user("other"))
    headers = {"Idempotency-Key": "same"}

    first = mine.post(f"{API}/messages/", {"message": "ping"}, format="json", headers=headers)
    second = theirs.post(f"{API}/messages/", {"message": "ping"}, format="json", headers=headers)

    assert first.status_code == second.status_code == 201
    assert second.json()["conversation"] != first.json()["conversation"]
    assert second.json()["assistant_message"]["text"] == "pong for other"


@pytest.mark.django_db
def test_a_retry_while_the_first_turn_has_no_answer_yet_is_a_409(plain_user):
    client = APIClient()
    client.force_login(plain_user)
    # the first request's message is stored, its turn still running
    start_turn(plain_user, "ping", idempotency_key="order-42")

    response = client.post(
        f"{API}/messages/",
        {"message": "ping"},
        format="json",
        headers={"Idempotency-Key": "order-42"},
    )

    assert response.status_code == 409
    assert response.json()["code"] == "idempotency_key_in_use"
    assert Message.objects.count() == 1


@pytest.mark.django_db
def test_the_same_key_sent_twice_at_once_stores_one_message(plain_user):
    start_turn(plain_user, "ping", idempotency_key="order-42")
    # the second request got past the look-up before the first one stored its message
    with pytest.raises(TurnInProgress):
        start_turn(plain_user, "ping", idempotency_key="order-42")

    assert Message.objects.count() == 1


@pytest.mark.parametrize("key", ["", "x" * 201, "naïve", "tab\there"])
@pytest.mark.django_db
def test_a_malformed_idempotency_key_is_refused_before_anything_is_stored(plain_user, key):
    client = APIClient()
    client.force_login(plain_user)

    response = client.post(
        f"{API}/messages/", {"message": "ping"}, format="json", headers={"Idempotency-Key": key}
    )

    assert response.status_code == 400
    assert response.json()["code"] == "invalid_idempotency_key"
    assert not Message.objects.exists()


# -- PostgreSQL lost mid-turn ----------------------------------------------------------------------


def admin_connection() -> psycopg.Connection[Any]:
    """A PostgreSQL session of its own on the test database, outside Django."""
    db = connection.settings_dict
    return psycopg.connect(
        host=db["HOST"],
        port=db["PORT"] or 5432,
        user=db["USER"],
        dbname=db["NAME"],
        autocommit=True,
    )


def sessions(admin: psycopg.Connection[Any] | None = None) -> set[int]:
    """The other backends on the test database (the test's own, and whatever has connected)."""
    with contextlib.nullcontext(admin) if admin else admin_connection() as session:
        rows = session.execute(
            "select pid from pg_stat_activity"
            " where datname = current_database() and pid <> pg_backend_pid()"
        ).fetchall()
    return {row[0] for row in rows}


def terminate_sessions_but(kept: set[int]) -> int:
    """End every session on the test database opened since ``kept`` was taken."""
    with admin_connection() as admin:
        ended = [
            pid
            for pid in sessions(admin) - kept
            if admin.execute("select pg_terminate_backend(%s)", [pid]).fetchone() == (True,)
        ]
    return len(ended)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
async def test_a_run_whose_reply_cannot_be_stored_still_ends_with_run_error(
    open_socket, plain_user
):
    socket = await open_socket(plain_user)
    before = await sync_to_async(sessions)()
    await send(socket, type="message", text="slow seconds=1")
    frames = await receive_until(socket, "TOOL_CALL_END")
    # the turn's lane opened a session: it goes while the tool runs, what it writes next fails
    # (the job relay's poll may have opened one meanwhile too: it goes as well, and reconnects)
    assert await sync_to_async(terminate_sessions_but)(before) >= 1

    frames += await receive_until(socket, "RUN_ERROR")

    assert frames[-1]["code"] == "reply_not_stored"
    assert frames[-1]["runId"] == frames[0]["runId"]
    thread_id = frames[0]["threadId"]
    other_tab = await open_socket(plain_user)
    await send(other_tab, type="resume", conversation=thread_id, after=frames[0]["seq"])
    replayed = [await receive(other_tab) for _ in frames[1:]]
    assert replayed == frames[1:]
    assert kind(await receive(other_tab)) == "CUSTOM assistant.resumed"
    assert await Message.objects.filter(role="user").acount() == 1
    assert not await Message.objects.filter(role="assistant").aexists()
