"""Production wiring: the Redis channel layer, the Redis event log, and two server processes."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model

from assistant.models import AuditEntry, Conversation, Message
from assistant.stream.broadcast import same_server
from assistant.stream.eventlog import MemoryEventLog, RedisEventLog, event_log
from tests.channel_layers import redis_channel_layer as redis_channel_layer_config
from tests.conftest import REDIS_URL, perm
from tests.live_sockets import seqs, session_cookie, ws_connect, ws_receive, ws_receive_run, ws_send
from tests.sockets import (
    PING_RUN,
    WAIT,
    count_group_sends,
    kind,
    kinds,
    receive,
    receive_run,
    receive_until,
    send,
    stored,
)
from tests.uvicorn_servers import forget_event_logs, servers

pytestmark = pytest.mark.redis


@pytest.fixture
def redis_event_log(settings: Any) -> Iterator[None]:
    """``ASSISTANT["EVENT_LOG"]`` on the local Redis, as every server process of a site shares it."""
    settings.ASSISTANT = {**settings.ASSISTANT, "EVENT_LOG": REDIS_URL, "EVENT_LOG_TTL": 300}
    yield
    forget_event_logs()


def restart_event_log(settings: Any) -> None:
    """What a new server process has: a fresh event log object, nothing kept in memory."""
    settings.ASSISTANT = dict(settings.ASSISTANT)


# -- one process, the Redis channel layer ------------------------------------------------------


@pytest.mark.parametrize("event_log", ["memory", "redis"])
@pytest.mark.django_db(transaction=True)
async def test_a_message_streams_the_same_run_over_the_redis_channel_layer(
    request, redis_channel_layer, open_socket, plain_user, event_log
):
    if event_log == "redis":
        request.getfixturevalue("redis_event_log")
    socket = await open_socket(plain_user)

    await send(socket, type="message", text="ping")
    first = await receive_run(socket)
    await send(socket, type="message", text="ping", conversation=first[0]["threadId"])
    second = await receive_run(socket)

    assert kinds(first) == kinds(second) == PING_RUN
    start = first[0]["seq"]
    assert seqs(first + second) == list(range(start, start + len(first + second)))
    assert {frame["threadId"] for frame in first + second} == {first[0]["threadId"]}
    assert len({frame["runId"] for frame in first + second}) == 2
    messages = await sync_to_async(stored)(first[0]["threadId"])
    assert [(m.role, m.text, m.status) for m in messages] == [
        ("user", "ping", "complete"),
        ("assistant", "pong for plain", "complete"),
    ] * 2


@pytest.mark.django_db(transaction=True)
async def test_on_the_pub_sub_layer_the_event_log_publishes_each_burst_in_the_same_round_trip(
    request, redis_channel_layer, redis_event_log, settings, open_socket, plain_user, monkeypatch
):
    """The log's script numbers, keeps and publishes a burst: the layer sends none of it."""
    pubsub = redis_channel_layer["BACKEND"].endswith("RedisPubSubChannelLayer")
    settings.ASSISTANT = {**settings.ASSISTANT, "BURST_WINDOW": 60}  # a run is one burst
    carried = count_group_sends(monkeypatch)
    socket = await open_socket(plain_user)
    other = await open_socket(plain_user, subprotocols=["assistant.bursts"])

    await send(socket, type="message", text="ping")
    first = await receive_run(socket)
    await send(other, type="resume", conversation=first[0]["threadId"], after=first[-1]["seq"])
    assert kind(json.loads(await other.receive_from(WAIT))) == "CUSTOM assistant.resumed"
    await send(socket, type="message", text="ping", conversation=first[0]["threadId"])
    second = await receive_run(socket)

    assert kinds(second) == PING_RUN
    assert seqs(first + second) == list(range(first[0]["seq"], first[0]["seq"] + 2 * len(first)))
    assert json.loads(await other.receive_from(WAIT)) == second  # one burst, the same frames
    replayed = await event_log().since(first[0]["threadId"], first[0]["seq"] - 1)
    assert replayed.frames == first + second
    assert carried == ([] if pubsub else [len(PING_RUN)] * 2)


@pytest.mark.django_db(transaction=True)
async def test_a_burst_the_log_script_refuses_still_reaches_the_sockets_through_the_layer(
    redis_channel_layer, redis_event_log, settings, open_socket, plain_user, monkeypatch
):
    """Redis answering the script with an error published nothing: the layer sends the burst,
    unnumbered, as when the log cannot keep it."""
    settings.ASSISTANT = {**settings.ASSISTANT, "BURST_WINDOW": 60}
    conversation = await Conversation.objects.acreate(user=plain_user, title="broken log")
    seq_key, _ = RedisEventLog._keys(str(conversation.pk))
    client = redis.Redis.from_url(REDIS_URL)
    client.rpush(seq_key, "not a counter")  # INCRBY answers WRONGTYPE
    carried = count_group_sends(monkeypatch)
    try:
        socket = await open_socket(plain_user)
        await send(socket, type="message", text="ping", conversation=str(conversation.pk))
        frames = await receive_run(socket)
    finally:
        client.delete(seq_key)
        client.close()

    assert kinds(frames) == PING_RUN
    assert seqs(frames) == [0] * len(PING_RUN)
    assert carried == [len(PING_RUN)]


@pytest.mark.django_db(transaction=True)
async def test_a_lost_answer_to_the_publishing_script_sends_nothing_twice(
    redis_event_log, settings, open_socket, plain_user, monkeypatch, caplog
):
    """The script may have published before its answer was lost: nothing is sent again; the
    turn is stored, and a resume brings it."""
    import uuid

    from channels.layers import channel_layers

    settings.CHANNEL_LAYERS = {
        "default": redis_channel_layer_config("pubsub", REDIS_URL, f"test-{uuid.uuid4().hex[:8]}")
    }
    channel_layers.backends.clear()
    settings.ASSISTANT = {**settings.ASSISTANT, "BURST_WINDOW": 60}

    async def lost(*args: Any, **kwargs: Any) -> int:
        raise redis.exceptions.TimeoutError("Timeout reading from socket")

    try:
        carried = count_group_sends(monkeypatch)
        monkeypatch.setattr(RedisEventLog, "_append_burst", lost)
        socket = await open_socket(plain_user)
        await send(socket, type="message", text="ping")
        assert await socket.receive_nothing(timeout=1.0)
        conversation = await Conversation.objects.aget(user=plain_user)
        monkeypatch.undo()
        await send(socket, type="resume", conversation=str(conversation.pk), after=0)
        snapshot = await receive(socket)
    finally:
        channel_layers.backends.clear()

    assert carried == []
    assert [m["content"] for m in snapshot["messages"]] == ["ping", "pong for plain"]
    assert "Keeping events for replay failed" in caplog.text


@pytest.mark.django_db(transaction=True)
async def test_a_burst_that_found_no_redis_connection_free_reaches_the_sockets_through_the_layer(
    redis_event_log, settings, open_socket, plain_user, monkeypatch
):
    """A script never sent (no connection free in time) published nothing: the layer sends the
    burst, unnumbered (it was lost, when a turn's bursts outnumbered the log's connections)."""
    from channels.layers import channel_layers

    settings.CHANNEL_LAYERS = {
        "default": redis_channel_layer_config("pubsub", REDIS_URL, f"test-{uuid.uuid4().hex[:8]}")
    }
    channel_layers.backends.clear()
    settings.ASSISTANT = {**settings.ASSISTANT, "BURST_WINDOW": 60}

    async def no_connection(*args: Any, **kwargs: Any) -> int:
        raise redis.exceptions.MaxConnectionsError("Too many connections")

    try:
        carried = count_group_sends(monkeypatch)
        monkeypatch.setattr(RedisEventLog, "_append_burst", no_connection)
        socket = await open_socket(plain_user)
        await send(socket, type="message", text="ping")
        frames = await receive_run(socket)
    finally:
        channel_layers.backends.clear()

    assert kinds(frames) == PING_RUN
    assert seqs(frames) == [0] * len(PING_RUN)
    assert carried == [len(PING_RUN)]


@pytest.mark.django_db(transaction=True)
async def test_an_encrypted_pub_sub_layer_gets_its_bursts_from_the_layer_not_the_log(
    settings, redis_event_log, open_socket, plain_user, monkeypatch
):
    """The script cannot encrypt: with ``symmetric_encryption_keys`` the layer sends each burst."""
    import uuid

    from channels.layers import channel_layers

    layer = redis_channel_layer_config("pubsub", REDIS_URL, f"test-{uuid.uuid4().hex[:8]}")
    layer["CONFIG"]["symmetric_encryption_keys"] = ["a secret of this test"]
    settings.CHANNEL_LAYERS = {"default": layer}
    channel_layers.backends.clear()
    settings.ASSISTANT = {**settings.ASSISTANT, "BURST_WINDOW": 60}
    try:
        carried = count_group_sends(monkeypatch)
        socket = await open_socket(plain_user)
        await send(socket, type="message", text="ping")
        frames = await receive_run(socket)
    finally:
        channel_layers.backends.clear()

    assert kinds(frames) == PING_RUN
    assert carried == [len(PING_RUN)]
    assert all(frame["seq"] > 0 for frame in frames)


@pytest.mark.parametrize(
    ("first", "second", "same"),
    [
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/15", True),
        ("redis://:pw@127.0.0.1:6379", "redis://:other@127.0.0.1/2", True),
        ("redis://app:pw@127.0.0.1:6379", "redis://log:pw@127.0.0.1:6379", False),
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6380/0", False),
        ("redis://10.0.0.1:6379/0", "redis://10.0.0.2:6379/0", False),
        ("unix:///run/redis.sock?db=1", "unix:///run/redis.sock", True),
        ("unix:///run/redis.sock", "redis://127.0.0.1:6379", False),
    ],
)
def test_the_log_publishes_only_to_the_redis_server_it_writes_to(first, second, same):
    assert same_server(first, second) is same


@pytest.mark.django_db(transaction=True)
async def test_every_socket_on_the_conversation_gets_the_run_over_redis(
    redis_channel_layer, open_socket, plain_user
):
    first = await open_socket(plain_user)
    await send(first, type="message", text="ping")
    earlier = await receive_run(first)
    second = await open_socket(plain_user)
    await send(second, type="resume", conversation=earlier[0]["threadId"], after=earlier[-1]["seq"])
    assert kind(await receive(second)) == "CUSTOM assistant.resumed"

    await send(first, type="message", text="ping", conversation=earlier[0]["threadId"])

    seen_by_first = await receive_run(first)
    assert await receive_run(second) == seen_by_first
    assert kinds(seen_by_first) == PING_RUN


@pytest.mark.django_db(transaction=True)
async def test_a_cancel_reaches_the_running_turn_over_the_redis_channel_layer(
    redis_channel_layer, open_socket, plain_user
):
    runner = await open_socket(plain_user)
    await send(runner, type="message", text="slow seconds=30")
    thread_id = (await receive_until(runner, "TOOL_CALL_END"))[0]["threadId"]
    other_tab = await open_socket(plain_user)

    sent_at = time.monotonic()
    await send(other_tab, type="cancel", conversation=thread_id)
    finished = (await receive_until(runner, "RUN_FINISHED"))[-1]

    assert time.monotonic() - sent_at < 1.0
    assert finished["outcome"] == {"type": "cancelled"}
    assert (await AuditEntry.objects.aget(operation="slow")).decision == "cancelled"


# -- the Redis event log -----------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_replay_comes_from_the_redis_event_log_not_from_process_memory(
    settings, redis_event_log, open_socket, plain_user
):
    first = await open_socket(plain_user)
    await send(first, type="message", text="ping")
    original = await receive_run(first)
    restart_event_log(settings)

    second = await open_socket(plain_user)
    await send(
        second, type="resume", conversation=original[0]["threadId"], after=original[4]["seq"]
    )

    replayed = [await receive(second) for _ in original[5:]]
    assert replayed == original[5:]
    marker = await receive(second)
    assert kind(marker) == "CUSTOM assistant.resumed"
    assert marker["value"] == {"last": original[-1]["seq"]}


@pytest.mark.django_db(transaction=True)
async def test_numbering_continues_in_redis_after_a_restart(
    settings, redis_event_log, open_socket, plain_user
):
    socket = await open_socket(plain_user)
    await send(socket, type="message", text="ping")
    before = await receive_run(socket)
    restart_event_log(settings)

    await send(socket, type="message", text="ping", conversation=before[0]["threadId"])
    after = await receive_run(socket)

    assert seqs(after) == list(range(before[-1]["seq"] + 1, before[-1]["seq"] + 1 + len(after)))


@pytest.mark.django_db(transaction=True)
async def test_a_fresh_load_from_the_redis_event_log_gets_the_snapshot_and_the_last_seq(
    settings, redis_event_log, open_socket, plain_user
):
    first = await open_socket(plain_user)
    await send(first, type="message", text="ping")
    finished = await receive_run(first)
    restart_event_log(settings)

    second = await open_socket(plain_user)
    await send(second, type="resume", conversation=finished[0]["threadId"], after=0)

    snapshot = await receive(second)
    assert snapshot["type"] == "MESSAGES_SNAPSHOT"
    assert [m["content"] for m in snapshot["messages"]] == ["ping", "pong for plain"]
    marker = await receive(second)  # the finished run is in the snapshot, not replayed
    assert kind(marker) == "CUSTOM assistant.resumed"
    assert marker["value"] == {"last": finished[-1]["seq"]}


async def ping_then_lose_the_log(
    request: Any, settings: Any, open_socket: Any, user: Any, log: str
) -> tuple[Any, list[dict[str, Any]]]:
    """A socket that ran one turn (and its frames), then the log's counter is gone: it expired
    (EVENT_LOG_TTL), Redis lost it, or this is a new server process (the memory log)."""
    if log == "redis":
        request.getfixturevalue("redis_event_log")
    socket = await open_socket(user)
    await send(socket, type="message", text="ping")
    frames = await receive_run(socket)
    if log == "redis":
        await sync_to_async(forget_event_logs)()
    else:
        restart_event_log(settings)
    return socket, frames


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("log", ["memory", "redis"])
async def test_a_log_that_lost_its_counter_numbers_above_what_an_open_tab_last_saw(
    request, settings, open_socket, plain_user, log
):
    socket, first = await ping_then_lose_the_log(request, settings, open_socket, plain_user, log)

    await send(socket, type="message", text="ping", conversation=first[0]["threadId"])
    second = await receive_run(socket)

    # a tab drops every frame numbered at or below the last it saw, as already shown
    assert kinds(second) == PING_RUN
    assert min(seqs(second)) > max(seqs(first))
    assert seqs(second) == list(range(second[0]["seq"], second[0]["seq"] + len(second)))


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("log", ["memory", "redis"])
async def test_a_resume_after_a_number_the_log_never_reached_gets_the_stored_messages(
    request, settings, open_socket, plain_user, log
):
    _, finished = await ping_then_lose_the_log(request, settings, open_socket, plain_user, log)

    second = await open_socket(plain_user)
    thread_id = finished[0]["threadId"]
    await send(second, type="resume", conversation=thread_id, after=finished[-1]["seq"])

    snapshot = await receive(second)
    assert snapshot["type"] == "MESSAGES_SNAPSHOT"
    assert [m["content"] for m in snapshot["messages"]] == ["ping", "pong for plain"]
    marker = await receive(second)
    assert kind(marker) == "CUSTOM assistant.resumed"
    assert marker["value"] == {"last": 0}  # the tab counts from the log's numbering again


@pytest.mark.django_db(transaction=True)
async def test_two_identical_frames_of_one_burst_are_both_replayed_with_their_own_seq(
    redis_event_log, open_socket, plain_user
):
    first = await open_socket(plain_user)
    await send(first, type="message", text="ping")
    earlier = await receive_run(first)
    thread_id, last = earlier[0]["threadId"], earlier[-1]["seq"]
    # a reply that streams the same words twice: two equal frames, kept in one burst
    words = {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m-2", "delta": "ha "}
    words |= {"threadId": thread_id, "runId": "run-2"}
    await event_log().append_many(thread_id, [dict(words), dict(words)])

    second = await open_socket(plain_user)
    await send(second, type="resume", conversation=thread_id, after=last)

    assert [await receive(second), await receive(second)] == [
        {**words, "seq": last + 1},
        {**words, "seq": last + 2},
    ]
    marker = await receive(second)
    assert kind(marker) == "CUSTOM assistant.resumed"
    assert marker["value"] == {"last": last + 2}


@pytest.mark.django_db(transaction=True)
async def test_the_redis_event_log_expires(redis_event_log, open_socket, plain_user):
    socket = await open_socket(plain_user)
    await send(socket, type="message", text="ping")
    thread_id = (await receive_run(socket))[0]["threadId"]

    client = redis.asyncio.Redis.from_url(REDIS_URL)
    try:
        ttls = [await client.ttl(key) for key in RedisEventLog._keys(thread_id)]
    finally:
        await client.aclose()
    assert all(0 < ttl <= 300 for ttl in ttls), ttls


# -- two server processes ----------------------------------------------------------------------


@pytest.fixture
def two_servers(tmp_path: Path, redis_channel_layer: dict[str, Any]) -> Iterator[list[str]]:
    """Two server processes of the test project on the test database, Redis between them."""
    with servers(2, tmp_path, redis_channel_layer) as urls:
        yield urls


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_one_run_reaches_sockets_served_by_two_server_processes(two_servers, make_user):
    make_user("walker")
    cookie = session_cookie("walker")
    server_a, server_b = two_servers

    async def talk() -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
        async with ws_connect(server_a, cookie) as a, ws_connect(server_b, cookie) as b:
            await ws_send(a, type="message", text="ping")
            earlier = await ws_receive_run(a)
            thread_id = earlier[0]["threadId"]
            await ws_send(b, type="resume", conversation=thread_id, after=earlier[-1]["seq"])
            resumed = await ws_receive(b)
            assert kind(resumed) == "CUSTOM assistant.resumed"
            assert resumed["value"] == {"last": earlier[-1]["seq"]}

            await ws_send(a, type="message", text="ping", conversation=thread_id)
            return earlier, await ws_receive_run(a), await ws_receive_run(b)

    earlier, seen_on_a, seen_on_b = asyncio.run(talk())

    assert kinds(seen_on_a) == PING_RUN
    assert seen_on_b == seen_on_a
    assert seqs(seen_on_b) == list(
        range(earlier[-1]["seq"] + 1, earlier[-1]["seq"] + 1 + len(seen_on_b))
    )
    thread_id = earlier[0]["threadId"]
    assert [m.role for m in stored(thread_id)] == ["user", "assistant"] * 2
    assert Message.objects.filter(status="complete").count() == 4


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_cancel_sent_to_one_server_stops_the_turn_running_on_the_other(two_servers, make_user):
    make_user("walker")
    cookie = session_cookie("walker")
    server_a, server_b = two_servers

    async def talk() -> tuple[list[dict[str, Any]], float]:
        async with ws_connect(server_a, cookie) as a, ws_connect(server_b, cookie) as b:
            await ws_send(a, type="message", text="slow seconds=30")
            started = await ws_receive(a)
            await ws_send(b, type="resume", conversation=started["threadId"], after=0)
            frames = [await ws_receive(b)]
            while kind(frames[-1]) != "CUSTOM assistant.resumed":
                frames.append(await ws_receive(b))
            while not any(frame["type"] == "TOOL_CALL_END" for frame in frames):
                frames.append(await ws_receive(b))

            sent_at = time.monotonic()
            await ws_send(b, type="cancel", conversation=started["threadId"])
            finished = await ws_receive_run(a)
            return finished, time.monotonic() - sent_at

    finished, took = asyncio.run(talk())

    assert finished[-1]["type"] == "RUN_FINISHED"
    assert finished[-1]["outcome"] == {"type": "cancelled"}
    assert took < 1.0
    assert AuditEntry.objects.get(operation="slow").decision == "cancelled"
    assert Message.objects.get(role="assistant").status == "cancelled"


def outcome_of(run: list[dict[str, Any]]) -> tuple[str, str]:
    """The one tool a run used, with what was decided."""
    (outcome,) = [frame["value"] for frame in run if kind(frame) == "CUSTOM assistant.outcome"]
    return outcome["operation"], outcome["decision"]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_permission_revoked_in_another_process_is_gone_on_the_next_turn_of_open_chats(
    two_servers, make_user
):
    make_user("viewer", "testapp.view_order")
    cookie = session_cookie("viewer")
    server_a, server_b = two_servers

    def revoke() -> None:
        # as an admin would, from a process of its own: the servers hear it over Redis
        get_user_model().objects.get(username="viewer").user_permissions.remove(
            perm("testapp.view_order")
        )

    async def talk() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        async with ws_connect(server_a, cookie) as a, ws_connect(server_b, cookie) as b:
            await ws_send(a, type="message", text="list orders")
            await ws_send(b, type="message", text="list orders")
            before = [outcome_of(await ws_receive_run(a)), outcome_of(await ws_receive_run(b))]

            await sync_to_async(revoke)()
            await ws_send(a, type="message", text="list orders")
            await ws_send(b, type="message", text="list orders")
            after = [outcome_of(await ws_receive_run(a)), outcome_of(await ws_receive_run(b))]
            return before, after

    before, after = asyncio.run(talk())

    assert before == [("list_orders", "executed")] * 2
    assert after == [("show_capabilities", "executed")] * 2


def deactivate(username: str) -> None:
    """As an admin would, saving the user from a process of its own."""
    user = get_user_model().objects.get(username=username)
    user.is_active = False
    user.save()


def revoke_view_order(username: str) -> None:
    get_user_model().objects.get(username=username).user_permissions.remove(
        perm("testapp.view_order")
    )


# Changes made in another process to a user whose chat is open, and what their next turn gets.
CHANGES_ELSEWHERE = {
    "the permission revoked": (revoke_view_order, ("show_capabilities", "executed")),
    "the user deactivated": (deactivate, ("show_capabilities", "denied")),
}


@pytest.mark.parametrize("change", list(CHANGES_ELSEWHERE))
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_change_made_in_another_process_before_the_first_turn_is_seen_by_that_turn(
    two_servers, make_user, change
):
    make_user("viewer", "testapp.view_order")
    cookie = session_cookie("viewer")
    server_a, server_b = two_servers
    apply, seen = CHANGES_ELSEWHERE[change]

    async def talk() -> list[tuple[str, str]]:
        async with ws_connect(server_a, cookie) as a, ws_connect(server_b, cookie) as b:
            # connected, no turn run yet: the servers hold the user as it was read at connect
            await sync_to_async(apply)("viewer")
            await ws_send(a, type="message", text="list orders")
            await ws_send(b, type="message", text="list orders")
            return [outcome_of(await ws_receive_run(a)), outcome_of(await ws_receive_run(b))]

    first_turns = asyncio.run(talk())

    assert first_turns == [seen] * 2
    assert not AuditEntry.objects.filter(operation="list_orders").exists()


async def test_the_memory_log_forgets_a_conversation_its_ttl_after_its_last_event():
    log = MemoryEventLog(keep=10, ttl=0.5)
    first = await log.append_many("quiet", [{"type": "RUN_STARTED"}])
    await log.append_many("busy", [{"type": "RUN_STARTED"}])
    await asyncio.sleep(0.3)
    await log.append_many("busy", [{"type": "RUN_FINISHED"}])  # the busy one lives on
    await asyncio.sleep(0.3)

    await log.append_many("busy", [{"type": "RUN_STARTED"}])

    assert list(log._logs) == ["busy"]  # (a long-running process keeps no more than this)
    replay = await log.since("quiet", first)
    assert (replay.frames, replay.gap) == ([], True)  # as after a restart: the tab resumes
    assert [frame["type"] for frame in (await log.since("busy", 0)).frames] == [
        "RUN_STARTED",
        "RUN_FINISHED",
        "RUN_STARTED",
    ]
    again = await log.append_many("quiet", [{"type": "RUN_STARTED"}])
    assert again > first  # numbered above what an open tab last saw


async def test_more_bursts_at_once_than_the_log_has_redis_connections_all_wait_their_turn() -> None:
    log = RedisEventLog(REDIS_URL, keep=100, ttl=60)
    threads = [str(uuid.uuid4()) for _ in range(300)]  # 400 turns at once lost bursts this way
    try:
        numbers = await asyncio.gather(
            *(log.append_many(thread, [{"type": "RUN_STARTED"}]) for thread in threads)
        )
    finally:
        client = redis.asyncio.Redis.from_url(REDIS_URL)
        for thread in threads:
            await client.delete(*RedisEventLog._keys(thread))
        await client.aclose()

    assert len(numbers) == len(threads)  # (the default pool raised MaxConnectionsError past 100)
    assert all(number > 0 for number in numbers)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_session_signed_out_in_another_process_ends_its_open_sockets_on_every_server(
    two_servers, make_user
):
    from django.contrib.sessions.models import Session

    make_user("viewer", "testapp.view_order")
    cookie = session_cookie("viewer")
    server_a, server_b = two_servers

    async def talk() -> tuple[list[str], list[tuple[str, str]]]:
        async with ws_connect(server_a, cookie) as a, ws_connect(server_b, cookie) as b:
            await ws_send(a, type="message", text="list orders")
            await ws_send(b, type="message", text="list orders")
            # each server found the session holding: it asks the database no more until told
            ran = [(await ws_receive_run(a))[-1]["type"], (await ws_receive_run(b))[-1]["type"]]
            # signed out from a process of its own: the servers hear it over Redis
            await sync_to_async(lambda: Session.objects.all().delete())()
            await ws_send(a, type="message", text="list orders")
            await ws_send(b, type="message", text="list orders")
            refused = []
            for ws in (a, b):
                frame = await ws_receive(ws)
                refused.append((frame["name"], frame["value"]["code"]))
            return ran, refused

    ran, refused = asyncio.run(talk())

    assert ran == ["RUN_FINISHED"] * 2
    assert refused == [("assistant.error", "session_ended")] * 2
    assert AuditEntry.objects.filter(operation="list_orders", decision="executed").count() == 2
