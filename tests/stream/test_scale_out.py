"""Scale-out: three server processes on one Redis layer and one database, and connection use."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connection

from assistant.models import AuditEntry, Message
from tests.live_sockets import seqs, session_cookie, ws_connect, ws_receive, ws_receive_run, ws_send
from tests.sockets import PING_RUN, kind, kinds, stored
from tests.uvicorn_servers import servers

pytestmark = [pytest.mark.redis, pytest.mark.postgres]


@pytest.fixture
def three_servers(tmp_path: Path, redis_channel_layer: dict[str, Any]) -> Any:
    """Three server processes of the test project on the test database, Redis between them."""
    with servers(3, tmp_path, redis_channel_layer) as urls:
        yield urls


async def watch(ws: Any, thread_id: str, after: int = 0) -> list[dict[str, Any]]:
    """Subscribe a socket to a conversation; the frames it replays, up to the resumed marker."""
    await ws_send(ws, type="resume", conversation=thread_id, after=after)
    frames = [await ws_receive(ws)]
    while kind(frames[-1]) != "CUSTOM assistant.resumed":
        frames.append(await ws_receive(ws))
    return frames


# -- three server processes --------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_every_turn_sent_through_three_server_processes_is_answered_exactly_once(
    three_servers, make_user
):
    users = [f"user-{index}" for index in range(6)]  # two on each process
    for username in users:
        make_user(username)
    cookies = [session_cookie(username) for username in users]

    async def chat(url: str, cookie: str) -> list[list[dict[str, Any]]]:
        runs = []
        async with ws_connect(url, cookie) as ws:
            conversation = None
            for _ in range(3):
                frame = {"type": "message", "text": "ping"}
                if conversation:
                    frame["conversation"] = conversation
                await ws_send(ws, **frame)
                runs.append(await ws_receive_run(ws))
                conversation = runs[-1][0]["threadId"]
        return runs

    async def everyone() -> list[list[list[dict[str, Any]]]]:
        return await asyncio.gather(
            *(chat(three_servers[index % 3], cookie) for index, cookie in enumerate(cookies))
        )

    chats = asyncio.run(everyone())

    assert [[kinds(run) for run in runs] for runs in chats] == [[PING_RUN] * 3] * 6
    run_ids = [run[0]["runId"] for runs in chats for run in runs]
    assert len(set(run_ids)) == 18
    for runs in chats:
        thread_id = runs[0][0]["threadId"]
        assert {run[0]["threadId"] for run in runs} == {thread_id}
        numbers = seqs([frame for run in runs for frame in run])
        assert numbers == list(range(numbers[0], numbers[0] + len(numbers)))  # none lost or twice
        assert [(m.role, m.status) for m in stored(thread_id)] == [
            ("user", "complete"),
            ("assistant", "complete"),
        ] * 3
    assert Message.objects.filter(role="user").count() == 18
    assert Message.objects.filter(role="assistant").count() == 18
    assert AuditEntry.objects.filter(operation="ping", decision="executed").count() == 18


@pytest.mark.django_db(transaction=True)
def test_each_run_reaches_the_conversations_sockets_on_all_three_server_processes(
    three_servers, make_user
):
    make_user("walker")
    cookie = session_cookie("walker")

    async def talk() -> list[list[list[dict[str, Any]]]]:
        async with (
            ws_connect(three_servers[0], cookie) as a,
            ws_connect(three_servers[1], cookie) as b,
            ws_connect(three_servers[2], cookie) as c,
        ):
            await ws_send(a, type="message", text="ping")
            first = await ws_receive_run(a)
            thread_id = first[0]["threadId"]
            await watch(b, thread_id, after=first[-1]["seq"])
            await watch(c, thread_id, after=first[-1]["seq"])
            seen = []
            for sender in (a, b, c):  # each process in turn runs the turn; all three watch
                await ws_send(sender, type="message", text="ping", conversation=thread_id)
                seen.append([await ws_receive_run(ws) for ws in (a, b, c)])
            return seen

    seen = asyncio.run(talk())

    for on_a, on_b, on_c in seen:
        assert kinds(on_a) == PING_RUN
        assert on_a == on_b == on_c
    assert len({run[0]["runId"] for run, _, _ in seen}) == 3
    (thread_id,) = {run[0]["threadId"] for run, _, _ in seen}
    assert [m.role for m in stored(thread_id)] == ["user", "assistant"] * 4


@pytest.mark.django_db(transaction=True)
def test_a_stop_sent_through_one_process_stops_the_turn_another_runs_for_every_watcher(
    three_servers, make_user
):
    make_user("walker")
    cookie = session_cookie("walker")

    async def talk() -> tuple[list[dict[str, Any]], ...]:
        async with (
            ws_connect(three_servers[0], cookie) as runner,
            ws_connect(three_servers[1], cookie) as watcher,
            ws_connect(three_servers[2], cookie) as stopper,
        ):
            await ws_send(runner, type="message", text="slow seconds=30")
            thread_id = (await ws_receive(runner))["threadId"]
            for ws in (watcher, stopper):
                frames = await watch(ws, thread_id)
                while not any(frame["type"] == "TOOL_CALL_END" for frame in frames):
                    frames.append(await ws_receive(ws))

            await ws_send(stopper, type="cancel", conversation=thread_id)
            return tuple([await ws_receive_run(ws) for ws in (runner, watcher, stopper)])

    ended = asyncio.run(talk())

    for frames in ended:
        assert frames[-1]["type"] == "RUN_FINISHED"
        assert frames[-1]["outcome"] == {"type": "cancelled"}
    assert AuditEntry.objects.get(operation="slow").decision == "cancelled"
    assert Message.objects.get(role="assistant").status == "cancelled"


# -- database connections ----------------------------------------------------------------------

CONCURRENT = 6
ROUNDS = 3
# Besides its lanes a process keeps one connection for its sockets' own queries (the
# thread-sensitive thread: sessions, conversation lookups), and maybe one more in passing.
BESIDES_LANES = 2


def server_connections(application_name: str) -> int:
    """Django's PostgreSQL sessions in the server processes (libpq names them after PGAPPNAME).

    Not the test project's SQL inspector's: each chat session's own, as a read-only role.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE application_name = %s AND usename = current_user",
            [application_name],
        )
        return int(cursor.fetchone()[0])


def connections_settle(application_name: str, at_most: int, within: float = 30.0) -> int:
    """Wait until the servers hold at most ``at_most`` connections; the count then (or last)."""
    deadline = time.monotonic() + within
    while (count := server_connections(application_name)) > at_most:
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)
    return count


@pytest.mark.django_db(transaction=True)
def test_a_server_holds_connections_for_the_turns_it_runs_at_once_not_for_every_lane(
    tmp_path, redis_channel_layer, make_user
):
    # As a deployment runs: connections kept between turns (CONN_MAX_AGE), 32 lanes.
    application_name = f"assistant-test-{uuid.uuid4().hex[:8]}"
    env = {
        "PGAPPNAME": application_name,
        "ASSISTANT_TEST_CONN_MAX_AGE": "60",
        "ASSISTANT_LANE_IDLE_CLOSE": "2",
    }
    users = [f"user-{index}" for index in range(CONCURRENT)]
    for username in users:
        make_user(username)
    cookies = [session_cookie(username) for username in users]

    with servers(1, tmp_path, redis_channel_layer, env) as (url,):

        async def rounds() -> list[int]:
            counts = []
            sockets = [ws_connect(url, cookie) for cookie in cookies]
            opened = [await socket.__aenter__() for socket in sockets]
            try:
                for _ in range(ROUNDS):  # the same number at once, again and again
                    for ws in opened:
                        await ws_send(ws, type="message", text="slow seconds=0.5")
                    for ws in opened:  # every turn is on its lane, running its tool
                        while (await ws_receive(ws))["type"] != "TOOL_CALL_END":
                            pass
                    counts.append(await sync_to_async(server_connections)(application_name))
                    for ws in opened:
                        assert (await ws_receive_run(ws))[-1]["type"] == "RUN_FINISHED"
            finally:
                for socket in sockets:
                    await socket.__aexit__(None, None, None)
            return counts

        while_running = asyncio.run(rounds())
        after_idle = connections_settle(application_name, at_most=BESIDES_LANES)

    assert max(while_running) <= CONCURRENT + BESIDES_LANES, while_running
    assert after_idle <= BESIDES_LANES, (while_running, after_idle)
    assert Message.objects.filter(role="assistant", status="complete").count() == (
        CONCURRENT * ROUNDS
    )
