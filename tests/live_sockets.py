"""The chat websocket of a server process a test started: a session cookie to sign in with, and
AG-UI frames sent and read with a deadline."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.test import Client
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed
from websockets.typing import Origin

# Seconds a frame from a server process of the test's own may take: on a loaded 2-core machine a
# fresh process's first turns (imports, its channel layer's first connections) took over 5 s once.
# A frame that is lost still fails the test, later.
WAIT = 15.0


def session_cookie(username: str) -> str:
    client = Client()
    assert client.login(username=username, password="pw")
    name = django_settings.SESSION_COOKIE_NAME
    return f"{name}={client.cookies[name].value}"


def ws_connect(url: str, cookie: str, open_timeout: float = WAIT) -> connect:
    return connect(
        url,
        origin=Origin("http://127.0.0.1"),
        additional_headers={"Cookie": cookie},
        open_timeout=open_timeout,
        proxy=None,
    )


async def ws_send(ws: ClientConnection, **content: Any) -> None:
    await ws.send(json.dumps(content))


async def ws_receive(ws: ClientConnection) -> dict[str, Any]:
    try:
        return json.loads(await asyncio.wait_for(ws.recv(), WAIT))
    except (TimeoutError, ConnectionClosed) as exc:
        # A plain report: Python 3.13.0 has crashed rendering these tracebacks' frame locals.
        pytest.fail(f"{ws.remote_address}: no frame within {WAIT} s ({exc!r})", pytrace=False)


async def ws_receive_run(ws: ClientConnection) -> list[dict[str, Any]]:
    frames = [await ws_receive(ws)]
    while frames[-1]["type"] not in ("RUN_FINISHED", "RUN_ERROR"):
        frames.append(await ws_receive(ws))
    return frames


def seqs(frames: list[dict[str, Any]]) -> list[int]:
    return [frame["seq"] for frame in frames]
