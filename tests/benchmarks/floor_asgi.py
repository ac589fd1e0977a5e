"""The example project's ASGI application, plus the floor consumer at ``/ws/floor/``."""

from typing import Any

from config.asgi import application as project  # first: it sets Django up

# isort: split
from channels.auth import AuthMiddlewareStack
from channels.security.websocket import AllowedHostsOriginValidator

from tests.benchmarks.floor import FloorConsumer

FLOOR_PATH = "/ws/floor/"
floor = AllowedHostsOriginValidator(AuthMiddlewareStack(FloorConsumer.as_asgi()))


async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The floor's socket at ``FLOOR_PATH``; everything else as the example project serves it."""
    if scope["type"] == "websocket" and scope["path"] == FLOOR_PATH:
        await floor(scope, receive, send)
    else:
        await project(scope, receive, send)
