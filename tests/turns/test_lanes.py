"""Turn threads and slots: a turn holds a thread and a database connection only for its sync steps."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import openai
import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.core.cache import cache
from django.db import connection

from assistant.access.rates import TurnRate
from assistant.conf import assistant_settings
from assistant.core.llm_client import shared_async_client
from assistant.exceptions import Throttled
from assistant.models import Message
from assistant.stream.broadcast import group_name
from assistant.turns.chat import NewMessage, Run, launch
from assistant.turns.threads import TurnThreads
from tests.openai_peer import Reply
from tests.openai_peer import openai_peer as openai_peer  # the fixtures
from tests.openai_peer import use_llm as use_llm

IN_FLIGHT = 40  # more than the 32 turns a process ran at once when a turn held its thread
MODEL_SECONDS = 6
THREADS = 4


def test_a_burst_of_steps_never_starts_more_threads_than_the_pool_has() -> None:
    pool = TurnThreads(2)
    started = threading.Barrier(2, timeout=5)
    names: list[str] = []

    def step() -> None:
        names.append(threading.current_thread().name)
        if len(names) <= 2:
            started.wait()  # the first two hold both threads at once
        time.sleep(0.01)

    futures = [pool.submit(step) for _ in range(8)]
    for future in futures:
        future.result(timeout=5)
    pool.shutdown()

    assert len(names) == 8
    assert len(set(names)) == 2


def test_a_steady_load_keeps_reusing_the_thread_idle_the_shortest_time() -> None:
    pool = TurnThreads(4)
    first = [pool.submit(time.sleep, 0.05) for _ in range(4)]  # a burst wakes all four
    for future in first:
        future.result(timeout=5)
    names = {pool.submit(lambda: threading.current_thread().name).result(5) for _ in range(20)}
    pool.shutdown()

    assert len(names) == 1  # the three others stay idle, and would close their connections


def test_a_step_that_raises_gives_its_error_to_its_caller_and_the_thread_goes_on() -> None:
    pool = TurnThreads(1)

    def fail() -> None:
        raise ValueError("no")

    with pytest.raises(ValueError, match="no"):
        pool.submit(fail).result(timeout=5)
    assert pool.submit(lambda: 42).result(timeout=5) == 42
    pool.shutdown()


def held_connections() -> int:
    """Connections to this test database other than this thread's own."""
    if connection.vendor != "postgresql":
        return 0
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return int(cursor.fetchone()[0])


@pytest.mark.django_db(transaction=True)
async def test_forty_turns_await_their_model_at_once_on_four_threads_holding_no_connection(
    settings: Any, use_llm: Any, plain_user: Any
) -> None:
    settings.ASSISTANT = {**settings.ASSISTANT, "TURN_THREADS": THREADS, "LANE_IDLE_CLOSE": 0}
    peer = use_llm(TIMEOUT=MODEL_SECONDS * 2, STREAM_TIMEOUT=MODEL_SECONDS * 2)
    peer.script(
        *[Reply(stall_before=MODEL_SECONDS, deltas=("answered",)) for _ in range(IN_FLIGHT)]
    )

    before = await sync_to_async(held_connections)()  # (the test's own: its main thread's)
    launched = [
        launch(plain_user, NewMessage(text=f"question {n}"), source="websocket")
        for n in range(IN_FLIGHT)
    ]
    for turn in launched:
        turn.go()
    # all of them before the first could have had its answer
    arrived = await asyncio.to_thread(peer.wait_for_requests, IN_FLIGHT, MODEL_SECONDS - 2)
    assert arrived, f"only {len(peer.requests)} of {IN_FLIGHT} turns reached the model at once"
    # Every turn now awaits its model: no step runs, so (once idle threads close theirs) no
    # database connection is held by any of them.
    held = await sync_to_async(held_connections)()
    for _ in range(40):  # (a thread that just went idle closes its connection a moment later)
        if held <= before:
            break
        await asyncio.sleep(0.05)
        held = await sync_to_async(held_connections)()
    assert held == before
    results = await asyncio.gather(*(turn.task for turn in launched if turn.task))

    assert all(result is not None for result in results)
    replies = await sync_to_async(list)(Message.objects.filter(role="assistant"))
    assert len(replies) == IN_FLIGHT
    assert {(reply.text, reply.status) for reply in replies} == {("answered", "complete")}


async def test_turns_on_one_event_loop_share_one_model_client(use_llm: Any) -> None:
    use_llm()
    made: list[Any] = []
    original = openai.AsyncOpenAI.__init__

    def counted(self: Any, *args: Any, **kwargs: Any) -> None:
        made.append(self)
        original(self, *args, **kwargs)

    openai.AsyncOpenAI.__init__ = counted  # type: ignore[method-assign]
    try:
        first = shared_async_client()
        again = shared_async_client()
        other = shared_async_client({**assistant_settings.llm, "MODEL": "another-model"})
    finally:
        openai.AsyncOpenAI.__init__ = original  # type: ignore[method-assign]

    assert first is again
    assert other is first  # (the same endpoint, key and timeout: the model is per request)
    assert len(made) == 1


@pytest.mark.django_db(transaction=True)
async def test_an_llm_turn_is_seen_started_before_its_model_says_anything(
    settings: Any, use_llm: Any, plain_user: Any
) -> None:
    # A window longer than the model's silence: the first burst would wait for its words.
    settings.ASSISTANT = {**settings.ASSISTANT, "BURST_WINDOW": 10.0}
    use_llm(TIMEOUT=10).script(Reply(stall_before=3, deltas=("hi",)))
    layer = get_channel_layer()
    channel = await layer.new_channel()

    launched = launch(plain_user, NewMessage(text="hello"), source="websocket")
    async with launched.start() as conversation:
        await layer.group_add(group_name(conversation.pk), channel)
    burst = await asyncio.wait_for(layer.receive(channel), 2)

    assert json.loads(burst["texts"][0])["type"] == "RUN_STARTED"
    assert launched.task is not None
    assert not launched.task.done()  # the model has not answered yet
    await launched.task


async def ran(user: Any, run: Run) -> None:
    """Launch "ping" with ``run`` and wait until its turn ends (or raise why it was refused)."""
    launched = launch(user, NewMessage(text="ping"), source="websocket", run=run)
    async with launched.start():
        pass
    await launched.task


@pytest.mark.django_db(transaction=True)
async def test_a_launch_past_its_transports_turn_rate_is_refused_as_throttled_storing_nothing(
    settings: Any, plain_user: Any
) -> None:
    settings.ASSISTANT = {**settings.ASSISTANT, "THROTTLE_RATE": "1/min"}
    await sync_to_async(cache.clear)()
    websocket = Run(throttle=TurnRate(scope="assistant_websocket"))
    try:
        await ran(plain_user, websocket)
        with pytest.raises(Throttled) as refused:
            await ran(plain_user, websocket)
        await ran(plain_user, Run(throttle=TurnRate(scope="elsewhere")))  # counted apart
    finally:
        await sync_to_async(cache.clear)()

    assert 0 < (refused.value.retry_after or 0) <= 60
    assert await Message.objects.acount() == 4  # two turns, none for the refused one


@pytest.mark.django_db(transaction=True)
async def test_frames_the_channel_layer_cannot_carry_reach_the_inbox_the_transport_gave(
    monkeypatch: pytest.MonkeyPatch, plain_user: Any
) -> None:
    async def redis_down(*args: Any, **kwargs: Any) -> None:
        raise ConnectionError("the channel layer cannot be reached")

    monkeypatch.setattr(get_channel_layer(), "group_send", redis_down)
    inbox: asyncio.Queue[list[str]] = asyncio.Queue()

    await ran(plain_user, Run(undelivered=inbox))

    delivered = [
        json.loads(text)["type"] for _ in range(inbox.qsize()) for text in inbox.get_nowait()
    ]
    assert delivered[0] == "RUN_STARTED"
    assert delivered[-1] == "RUN_FINISHED"
