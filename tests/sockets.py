"""Chat websocket helpers: connect to the test ASGI app, read AG-UI frames, wait for turns."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator

from assistant.models import Message
from assistant.turns.lanes import RUNNING
from tests.asgi import application
from tests.testapp.models import Order

WAIT = 5.0  # seconds any single frame may take to arrive
ORIGIN = (b"origin", b"http://127.0.0.1")
PATH = "/ws/assistant/"

Socket = WebsocketCommunicator
OpenSocket = Callable[..., Awaitable[Socket]]


async def connect(
    user: Any = None, *, cookie: str | None = None, subprotocols: list[str] | None = None
) -> Socket:
    """A connected socket, signed in as ``user`` (in its scope) or through a session ``cookie``;
    the server's choice among ``subprotocols`` is ``socket.subprotocol``."""
    headers = [ORIGIN]
    if cookie is not None:
        headers.append((b"cookie", cookie.encode()))
    socket = WebsocketCommunicator(application, PATH, headers=headers, subprotocols=subprotocols)
    if user is not None:
        socket.scope["user"] = user
    connected, socket.subprotocol = await socket.connect(timeout=WAIT)
    assert connected
    return socket


async def turns_ended(within: float) -> bool:
    """Wait until every launched turn has returned; False if some still run after ``within`` s."""
    running = set(RUNNING)
    if not running:
        return True
    _, still_running = await asyncio.wait(running, timeout=within)
    return not still_running


def kind(frame: dict[str, Any]) -> str:
    """A frame's type, with what tells same-typed frames apart (role, tool, custom name)."""
    detail = frame.get("role") if frame["type"] == "TEXT_MESSAGE_START" else None
    detail = frame.get("toolCallName") if frame["type"] == "TOOL_CALL_START" else detail
    detail = frame.get("name") if frame["type"] == "CUSTOM" else detail
    return f"{frame['type']} {detail}" if detail else frame["type"]


def kinds(frames: list[dict[str, Any]]) -> list[str]:
    return [kind(frame) for frame in frames]


def only(frames: list[dict[str, Any]], wanted: str) -> dict[str, Any]:
    """The one frame of this kind in a run."""
    (found,) = [frame for frame in frames if kind(frame) == wanted]
    return found


async def receive(socket: Socket) -> dict[str, Any]:
    return await socket.receive_json_from(timeout=WAIT)


async def receive_run(socket: Socket) -> list[dict[str, Any]]:
    """Frames up to and including the one that ends a run (RUN_FINISHED or RUN_ERROR).

    Then lets the turn finish tidying up: in-memory SQLite (a shared cache) refuses a write
    while another thread still reads the same table, so the test's next message waits for it.
    """
    frames = [await receive(socket)]
    while frames[-1]["type"] not in ("RUN_FINISHED", "RUN_ERROR"):
        frames.append(await receive(socket))
    await turns_ended(WAIT)
    return frames


async def receive_until(socket: Socket, frame_type: str) -> list[dict[str, Any]]:
    frames = [await receive(socket)]
    while frames[-1]["type"] != frame_type:
        frames.append(await receive(socket))
    return frames


async def send(socket: Socket, **content: Any) -> None:
    await socket.send_json_to(content)


def count_group_sends(monkeypatch: Any) -> list[int]:
    """How many frames each burst the layer's ``group_send`` carried (from now on)."""
    layer = get_channel_layer()
    carried: list[int] = []
    group_send = layer.group_send

    async def counted(group: str, message: dict[str, Any]) -> None:
        if message["type"] == "assistant.events":
            carried.append(len(message["texts"]))
        await group_send(group, message)

    monkeypatch.setattr(layer, "group_send", counted)
    return carried


# One turn that runs a safe tool, as a client sees it.
PING_RUN = [
    "RUN_STARTED",
    "TEXT_MESSAGE_START user",
    "TEXT_MESSAGE_CONTENT",
    "TEXT_MESSAGE_END",
    "TOOL_CALL_START ping",
    "TOOL_CALL_ARGS",
    "TOOL_CALL_END",
    "TOOL_CALL_RESULT",
    "CUSTOM assistant.outcome",
    "TEXT_MESSAGE_START assistant",
    "TEXT_MESSAGE_CONTENT",
    "TEXT_MESSAGE_END",
    "RUN_FINISHED",
]


def stored(conversation_id: str) -> list[Message]:
    return list(
        Message.objects.filter(conversation_id=conversation_id).order_by("created_at", "id")
    )


async def request_cancel_order(socket: Socket, order: Order) -> list[dict[str, Any]]:
    await send(socket, type="message", text=f"cancel order {order.pk}")
    return await receive_run(socket)


def outcomes(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The recorded outcome of each tool call in a run."""
    return [
        frame["value"]
        for frame in frames
        if frame["type"] == "CUSTOM" and frame["name"] == "assistant.outcome"
    ]
