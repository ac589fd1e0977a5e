"""A websocket connection is a chat session: its toolsets start on connect and end with it."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from channels.testing import WebsocketCommunicator

from assistant.turns.lanes import RUNNING
from tests.asgi import application
from tests.lifecycles import eventually
from tests.lifecycles import log as log  # a fixture
from tests.sockets import ORIGIN, WAIT, OpenSocket, Socket, outcomes

pytestmark = pytest.mark.django_db(transaction=True)


async def ask(socket: Socket, text: str) -> list[dict[str, Any]]:
    """Send a message and collect its run's frames, up to RUN_FINISHED or RUN_ERROR."""
    await socket.send_json_to({"type": "message", "text": text})
    frames = [await socket.receive_json_from(timeout=WAIT)]
    while frames[-1]["type"] not in ("RUN_FINISHED", "RUN_ERROR"):
        frames.append(await socket.receive_json_from(timeout=WAIT))
    if RUNNING:  # the turn stores its reply after the last frame: let it finish
        await asyncio.wait(set(RUNNING), timeout=WAIT)
    return frames


def probe_id(frames: list[dict[str, Any]]) -> int:
    """Which Probe instance answered a "probe state" run."""
    (outcome,) = outcomes(frames)
    assert outcome["operation"] == "probe_state"
    assert outcome["decision"] == "executed", outcome["text"]
    match = re.fullmatch(r"probe started id=(\d+)", outcome["text"])
    assert match is not None, outcome["text"]
    return int(match[1])


async def test_connecting_starts_the_sessions_toolsets(
    open_socket: OpenSocket, diagnostician: Any, log: list[str]
) -> None:
    await open_socket(diagnostician)

    assert await eventually(lambda: "probe:start" in log, within=WAIT)
    assert log == ["probe:start"]


async def test_an_unauthenticated_socket_starts_no_toolsets(log: list[str]) -> None:
    from django.contrib.auth.models import AnonymousUser

    socket = WebsocketCommunicator(application, "/ws/assistant/", headers=[ORIGIN])
    socket.scope["user"] = AnonymousUser()
    await socket.connect(timeout=WAIT)
    closed = await socket.receive_output(timeout=WAIT)

    assert closed == {"type": "websocket.close", "code": 4401}
    await asyncio.sleep(0.05)
    assert log == []
    await socket.disconnect(code=4401, timeout=WAIT)
    assert log == []  # nothing to cancel either


async def test_a_normal_close_stops_the_toolsets(
    open_socket: OpenSocket, diagnostician: Any, log: list[str]
) -> None:
    socket = await open_socket(diagnostician)
    assert await eventually(lambda: "probe:start" in log, within=WAIT)

    await socket.disconnect(code=1000, timeout=WAIT)

    assert await eventually(lambda: "probe:background-exit" in log, within=WAIT)
    assert log[:2] == ["probe:start", "probe:stop"]
    assert "probe:cancel" not in log


async def test_going_away_is_a_normal_close(
    open_socket: OpenSocket, diagnostician: Any, log: list[str]
) -> None:
    socket = await open_socket(diagnostician)
    assert await eventually(lambda: "probe:start" in log, within=WAIT)

    await socket.disconnect(code=1001, timeout=WAIT)

    assert await eventually(lambda: "probe:stop" in log, within=WAIT)
    assert "probe:cancel" not in log


@pytest.mark.parametrize("code", [1006, 1011, 4000])
async def test_an_abnormal_close_cancels_the_toolsets(
    open_socket: OpenSocket, diagnostician: Any, log: list[str], code: int
) -> None:
    socket = await open_socket(diagnostician)
    assert await eventually(lambda: "probe:start" in log, within=WAIT)

    await socket.disconnect(code=code, timeout=WAIT)

    assert await eventually(lambda: "probe:background-exit" in log, within=WAIT)
    assert log[:3] == ["probe:start", "probe:cancel", "probe:stop"]


async def test_a_turn_uses_the_sessions_toolset(
    open_socket: OpenSocket, diagnostician: Any, log: list[str]
) -> None:
    socket = await open_socket(diagnostician)
    assert await eventually(lambda: "probe:start" in log, within=WAIT)

    first = await ask(socket, "probe state")
    second = await ask(socket, "probe state")

    assert probe_id(first) == probe_id(second)  # one instance serves the whole session
    assert log.count("probe:start") == 1
    assert "probe:stop" not in log  # a turn does not end the session's toolsets


async def test_each_connection_has_its_own_toolset_instances(
    open_socket: OpenSocket, diagnostician: Any, log: list[str]
) -> None:
    one, two = await open_socket(diagnostician), await open_socket(diagnostician)
    assert await eventually(lambda: log.count("probe:start") == 2, within=WAIT)

    assert probe_id(await ask(one, "probe state")) != probe_id(await ask(two, "probe state"))


async def test_the_users_cancel_frame_cancels_the_toolsets(
    open_socket: OpenSocket, diagnostician: Any, log: list[str]
) -> None:
    socket = await open_socket(diagnostician)
    frames = await ask(socket, "probe state")
    before = probe_id(frames)

    await socket.send_json_to({"type": "cancel", "conversation": frames[0]["threadId"]})

    assert await eventually(lambda: "probe:background-exit" in log, within=WAIT)
    assert log[:3] == ["probe:start", "probe:cancel", "probe:stop"]
    after = probe_id(await ask(socket, "probe state"))  # restarted on next use
    assert after != before
    assert log.count("probe:start") == 2


async def test_asking_for_a_broken_toolsets_tool_gets_the_capabilities_instead(
    open_socket: OpenSocket, diagnostician: Any, log: list[str]
) -> None:
    socket = await open_socket(diagnostician)
    assert await eventually(lambda: "probe:start" in log, within=WAIT)

    frames = await ask(socket, "broken tool")

    (outcome,) = outcomes(frames)
    assert outcome["operation"] == "show_capabilities"
    assert outcome["decision"] == "executed"


async def test_the_capabilities_leave_out_a_broken_toolsets_tools(
    open_socket: OpenSocket, diagnostician: Any, log: list[str]
) -> None:
    socket = await open_socket(diagnostician)
    assert await eventually(lambda: "probe:start" in log, within=WAIT)

    (outcome,) = outcomes(await ask(socket, "what can you do"))

    assert outcome["operation"] == "show_capabilities"
    assert "Probe state" in outcome["text"]  # (named by its title)
    assert "Broken tool" not in outcome["text"]
