"""The example project's ASGI application, plus the floor consumers at ``/ws/floor/`` and
``/ws/llm-floor/`` (llm_floor.py: the LLM turn's).

For benchmarks only: it also counts the process's database queries and commits (each commit is
a transaction's BEGIN and COMMIT round trips), and with ``BENCH_COUNT_LOOP=1`` its event-loop
callbacks and thread hops, served as JSON at ``/bench/db/``.
"""

import asyncio
import collections
import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from config.asgi import application as project  # first: it sets Django up

# isort: split
from channels.auth import AuthMiddlewareStack
from channels.security.websocket import AllowedHostsOriginValidator
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.signals import connection_created

from tests.benchmarks.floor import FloorConsumer
from tests.benchmarks.llm_floor import LLMFloorConsumer

FLOOR_PATH = "/ws/floor/"
COUNTS_PATH = "/bench/db/"
floor = AllowedHostsOriginValidator(AuthMiddlewareStack(FloorConsumer.as_asgi()))
LLM_FLOOR_PATH = "/ws/llm-floor/"
llm_floor = AllowedHostsOriginValidator(AuthMiddlewareStack(LLMFloorConsumer.as_asgi()))
counts = {"queries": 0, "commits": 0}
_lock = threading.Lock()
# With BENCH_COUNT_LOOP=1: the event loop's callbacks (a task's step is one) and the thread hops
# (executor submissions), by kind too; counting slows every callback a little.
COUNT_LOOP = os.environ.get("BENCH_COUNT_LOOP") == "1"
kinds: collections.Counter[str] = collections.Counter()


def _kind(handle: Any) -> str:
    task = getattr(handle._callback, "__self__", None)
    if task is not None and hasattr(task, "get_coro"):
        return "task " + getattr(task.get_coro(), "__qualname__", "?")
    return getattr(handle._callback, "__qualname__", type(handle._callback).__name__)


def _count_loop() -> None:
    run, submit = asyncio.events.Handle._run, ThreadPoolExecutor.submit

    def counted_run(self: Any) -> None:
        kinds[_kind(self)] += 1
        run(self)

    def counted_submit(self: Any, *args: Any, **kwargs: Any) -> Any:
        kinds["(thread hop)"] += 1
        return submit(self, *args, **kwargs)

    asyncio.events.Handle._run = counted_run  # type: ignore[method-assign]
    ThreadPoolExecutor.submit = counted_submit  # type: ignore[method-assign]
    from assistant.turns.threads import TurnThreads  # the turns' own threads hop too

    turn_submit = TurnThreads.submit

    def counted_turn_submit(self: Any, *args: Any, **kwargs: Any) -> Any:
        kinds["(thread hop)"] += 1
        return turn_submit(self, *args, **kwargs)

    TurnThreads.submit = counted_turn_submit  # type: ignore[method-assign]


if COUNT_LOOP:
    _count_loop()


def _count(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
    with _lock:
        counts["queries"] += 1
    return execute(sql, params, many, context)


def _counting(sender: Any, connection: Any, **kwargs: Any) -> None:
    if _count not in connection.execute_wrappers:
        connection.execute_wrappers.append(_count)


connection_created.connect(_counting)
_commit = BaseDatabaseWrapper._commit


def _counted_commit(self: Any) -> Any:
    with _lock:
        counts["commits"] += 1
    return _commit(self)


BaseDatabaseWrapper._commit = _counted_commit  # type: ignore[method-assign]


async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The floors' sockets at ``FLOOR_PATH`` and ``LLM_FLOOR_PATH``; everything else as the example project serves it."""
    if scope["type"] == "websocket" and scope["path"] == FLOOR_PATH:
        await floor(scope, receive, send)
    elif scope["type"] == "websocket" and scope["path"] == LLM_FLOOR_PATH:
        await llm_floor(scope, receive, send)
    elif scope["type"] == "http" and scope["path"] == COUNTS_PATH:
        body = json.dumps({**counts, "kinds": dict(kinds)}).encode()
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})
    else:
        await project(scope, receive, send)
