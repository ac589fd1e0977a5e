"""The example project's ASGI application, plus the floor consumer at ``/ws/floor/``.

For benchmarks only: it also counts the process's database queries and commits (each commit is
a transaction's BEGIN and COMMIT round trips), served as JSON at ``/bench/db/``.
"""

import json
import threading
from typing import Any

from config.asgi import application as project  # first: it sets Django up

# isort: split
from channels.auth import AuthMiddlewareStack
from channels.security.websocket import AllowedHostsOriginValidator
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.signals import connection_created

from tests.benchmarks.floor import FloorConsumer

FLOOR_PATH = "/ws/floor/"
COUNTS_PATH = "/bench/db/"
floor = AllowedHostsOriginValidator(AuthMiddlewareStack(FloorConsumer.as_asgi()))
counts = {"queries": 0, "commits": 0}
_lock = threading.Lock()


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
    """The floor's socket at ``FLOOR_PATH``; everything else as the example project serves it."""
    if scope["type"] == "websocket" and scope["path"] == FLOOR_PATH:
        await floor(scope, receive, send)
    elif scope["type"] == "http" and scope["path"] == COUNTS_PATH:
        body = json.dumps(counts).encode()
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})
    else:
        await project(scope, receive, send)
