"""What one chat turn costs the server before any socket is involved: CPU, queries, Redis calls.

Run: ``.venv/bin/python tests/benchmarks/turn_bench.py [--turns 500] [--repeat 3]``
It needs PostgreSQL (127.0.0.1:5432) and Redis (127.0.0.1:6379): it creates a scratch database,
migrates the example project (config.settings) into it with the Redis event log and the pub/sub
channel layer, and runs ``--turns`` keyword-planner turns of one user on one conversation (the
same turn ws_load sends: "who am i", a safe tool), in process, one after another, as a
websocket's lane would. It prints the CPU time per turn (every thread of the process), the
database queries and Redis commands per turn, and, for scale, what the turn's building blocks
cost alone: a model insert, a thread hop to a lane and back, one Redis round trip. ws_load's
server CPU per turn minus this figure is what the websocket transport costs; turn_cost.py sets
the whole websocket turn beside a bare Channels consumer doing the same writes (the floor).
Measured 2026-12-01 (300 x 3, a loaded 2-core box): 6.9 ms per turn and 7.6 Redis round trips
before issue #18's levers, 5.3 ms and 2.2 after; 5 queries both. 2026-12-02, with the event
log's script publishing each burst itself: 1.0 round trip a turn (5.7-9.4 ms on a slow spell
of the machine, where the same turn took 3.9 ms the day before on a quiet one).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
ADMIN_URL = "postgres://postgres@127.0.0.1:5432/postgres"
BENCH_DB = "assistant_turn_bench"
REDIS_URL = "redis://127.0.0.1:6379/14"


def recreate_database() -> None:
    import psycopg

    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {BENCH_DB}")


def drop_database() -> None:
    import psycopg

    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")


def setup() -> Any:
    os.environ.update(
        DJANGO_SETTINGS_MODULE="config.settings",
        DATABASE_URL=f"postgres://postgres@127.0.0.1:5432/{BENCH_DB}",
        REDIS_URL=REDIS_URL,
        ASSISTANT_CHANNEL_LAYER="pubsub",
        DJANGO_DEBUG="0",
        DJANGO_SECRET_KEY="benchmark-only-secret-key",  # DEBUG off refuses the repository key
    )
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return get_user_model().objects.create(username="turn-bench")


def redis_calls() -> dict[str, int]:
    """Calls so far per Redis command (commands a script runs are counted under their names)."""
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    try:
        stats = client.info("commandstats")
    finally:
        client.close()
    return {name.removeprefix("cmdstat_"): int(value["calls"]) for name, value in stats.items()}


async def turns(user: Any, count: int, repeat: int) -> None:
    from assistant.core.lifecycle import new_session
    from assistant.turns.runs import arun_turn

    session = new_session()
    first = await arun_turn(user, "who am i", session=session)
    conversation = first.conversation
    for _ in range(50):  # warm up: caches, connections, the script in Redis
        await arun_turn(user, "who am i", conversation_id=conversation, session=session)

    cpu: list[float] = []
    bursts = publishes = 0
    for _ in range(repeat):
        before_redis = redis_calls()
        started = time.process_time()
        for _ in range(count):
            result = await arun_turn(
                user, "who am i", conversation_id=conversation, session=session
            )
        cpu.append((time.process_time() - started) / count)
        after_redis = redis_calls()
        bursts = after_redis.get("evalsha", 0) - before_redis.get("evalsha", 0)
        publishes = after_redis.get("publish", 0) - before_redis.get("publish", 0)
        assert result.assistant_message.status == "complete"
    queries = await count_queries(user, conversation, session)
    from channels.layers import get_channel_layer

    from assistant.stream.broadcast import group_name, published_by
    from assistant.stream.eventlog import event_log

    # the event log's script, then the layer's PUBLISH; or the script alone, publishing itself
    # (Redis counts a PUBLISH made by a script among its commands too)
    itself = published_by(event_log(), get_channel_layer(), group_name(conversation.pk))
    if itself:
        publishes -= bursts
    trips = bursts + publishes
    await session.stop()
    print(f"[turn_bench: {count} turns x {repeat}, in process, PostgreSQL + Redis]")
    print(
        f"  CPU per turn:        {statistics.median(cpu) * 1000:.2f} ms median "
        f"({', '.join(f'{c * 1000:.2f}' for c in cpu)})"
    )
    print(f"  queries per turn:    {queries}")
    print(
        f"  Redis round trips:   {trips / count:.1f} per turn "
        f"({bursts / count:.1f} event-log bursts{', each publishing itself' if itself else ''}, "
        f"{publishes / count:.1f} publishes)"
    )
    print(f"  frames per turn:     {len(result.frames)}")


async def count_queries(user: Any, conversation: Any, session: Any) -> int:
    """Queries of one turn (its sync steps all run on the process's one sync thread here)."""
    from asgiref.sync import sync_to_async
    from django.db import connections

    from assistant.turns.runs import arun_turn

    seen: list[str] = []

    def counting(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        seen.append(sql)
        return execute(sql, params, many, context)

    wrappers = await sync_to_async(lambda: connections["default"].execute_wrappers)()
    wrappers.append(counting)
    try:
        await arun_turn(user, "who am i", conversation_id=conversation, session=session)
    finally:
        wrappers.remove(counting)
    return len(seen)


def building_blocks(user: Any) -> None:
    """CPU of the pieces a turn is made of, each alone."""
    from concurrent.futures import ThreadPoolExecutor

    from asgiref.sync import ThreadSensitiveContext, sync_to_async

    from assistant.models import Conversation, Message

    conversation = Conversation.objects.create(user=user, title="blocks")

    def per_call(function: Any, count: int) -> float:
        started = time.process_time()
        for _ in range(count):
            function()
        return (time.process_time() - started) / count * 1e6

    insert = per_call(
        lambda: Message.objects.create(conversation=conversation, role="user", text="x"), 500
    )

    async def hops_and_redis() -> tuple[float, float]:
        import redis.asyncio as redis

        executor = ThreadPoolExecutor(max_workers=1)
        async with ThreadSensitiveContext(executor=executor):
            noop = sync_to_async(lambda: None)
            started = time.process_time()
            for _ in range(2000):
                await noop()
            hop = (time.process_time() - started) / 2000 * 1e6
        client = redis.Redis.from_url(REDIS_URL)
        started = time.process_time()
        for _ in range(2000):
            await client.publish("assistant:turn-bench", b"x" * 300)
        round_trip = (time.process_time() - started) / 2000 * 1e6
        await client.aclose()
        executor.shutdown()
        return hop, round_trip

    hop, round_trip = asyncio.run(hops_and_redis())
    print("  building blocks (CPU each):")
    print(f"    a model insert (Message.objects.create): {insert:.0f} us")
    print(f"    a thread hop to a lane and back:         {hop:.0f} us")
    print(f"    a Redis round trip (PUBLISH):            {round_trip:.0f} us")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    recreate_database()
    try:
        user = setup()
        asyncio.run(turns(user, args.turns, args.repeat))
        building_blocks(user)
    finally:
        from django.db import connections

        connections.close_all()
        drop_database()


if __name__ == "__main__":
    main()
