"""What one websocket may cost the server: bounded output, bounded snapshots, throttled turns."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.layers import channel_layers
from channels.testing import WebsocketCommunicator
from django.core.cache import cache
from django.test import Client
from django.utils import timezone
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed
from websockets.typing import Origin

from assistant.checks import check_settings
from assistant.models import Conversation, Message
from tests import browsing, sockets
from tests.asgi import application
from tests.live_sockets import session_cookie
from tests.processes import ROOT, database_url, free_port, wait_until_listening
from tests.sockets import ORIGIN, WAIT, kind, kinds, receive, receive_run, send

CAP = 256 * 1024  # the daphne server's SOCKET_MAX_PENDING_BYTES
BIG = "x" * 8000  # one stored message: 40 of them make a ~330 KB snapshot


def rss(pid: int) -> int:
    """A process's resident memory, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.fixture
def daphne_server(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes], Path]]:
    """The test project under a real daphne process on the test database."""
    port = free_port()
    log = tmp_path / "daphne.log"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.daphne_settings",
        "DATABASE_URL": database_url(),
        "ASSISTANT_SOCKET_MAX_PENDING_BYTES": str(CAP),
    }
    command = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port)]
    # daphne's keepalive drops a client that answers no ping within 30 s: on a loaded machine a
    # hoarder (which reads nothing) could be dropped that way (1006) before it is closed with 4008
    command += ["--ping-interval", "60", "--ping-timeout", "120"]
    with log.open("wb") as output:
        process = subprocess.Popen(
            [*command, "tests.asgi:application"],
            cwd=ROOT,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until_listening(port, process, log)
        yield f"ws://127.0.0.1:{port}/ws/assistant/", process, log
    finally:
        process.terminate()
        process.wait(timeout=10)


def big_conversation(make_user: Callable[..., Any], text: str = BIG) -> tuple[str, str]:
    user = make_user("hoarder")
    conversation = Conversation.objects.create(user=user, title="big")
    Message.objects.bulk_create(
        Message(conversation=conversation, role=Message.Role.USER, text=text) for _ in range(40)
    )
    return str(conversation.pk), session_cookie("hoarder")


def ws_connect(url: str, cookie: str, **options: Any) -> connect:
    return connect(
        url,
        origin=Origin("http://127.0.0.1"),
        additional_headers={"Cookie": cookie},
        open_timeout=10,
        proxy=None,
        **options,
    )


def wait_for_line(log: Path, text: str) -> None:
    deadline = time.monotonic() + 20
    while text not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.01)


def consumer_logs(caplog: Any) -> list[tuple[str, Any]]:
    """What the consumer logged, level and traceback; nothing else of ours logs a traceback."""
    ours = [r for r in caplog.records if r.name.startswith("assistant")]
    # (the test project's deliberately broken toolset fails to start on every connection)
    assert not [r for r in ours if r.exc_info and r.name != "assistant.lifecycle"]
    return [(r.levelname, r.getMessage()) for r in ours if r.name == "assistant.consumers"]


async def read_resume(ws: Any) -> list[dict[str, Any]]:
    frames = [json.loads(await asyncio.wait_for(ws.recv(), 10))]
    while frames[-1].get("name") != "assistant.resumed":
        frames.append(json.loads(await asyncio.wait_for(ws.recv(), 10)))
    return frames


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_client_that_never_reads_is_closed_with_4008_and_the_server_lets_go_of_its_output(
    daphne_server, make_user
):
    """Unbounded, 200 unread snapshots grew daphne by ~57 MB; bounded, by about the cap."""
    url, server, log = daphne_server
    thread_id, cookie = big_conversation(make_user)
    resume = json.dumps({"type": "resume", "conversation": thread_id})

    async def hoard() -> tuple[int, int, int, int | None]:
        async with ws_connect(url, cookie) as reader:  # a client that reads is served in full
            await reader.send(resume)
            frames = await read_resume(reader)
            assert [frame["type"] for frame in frames] == ["MESSAGES_SNAPSHOT", "CUSTOM"]
            assert len(frames[0]["messages"]) == 40
        before = rss(server.pid)
        # max_queue=1: the client library stops reading its socket at once, like a stuck client
        async with ws_connect(url, cookie, max_queue=1) as hoarder:
            for _ in range(200):  # ~330 KB each
                await hoarder.send(resume)
            # Read only once the server gave up on us (it drops us if we never read at all).
            await asyncio.to_thread(wait_for_line, log, "with 4008")
            peak = rss(server.pid)
            received = 0
            with contextlib.suppress(ConnectionClosed):
                while True:
                    await asyncio.wait_for(hoarder.recv(), 10)
                    received += 1
            return before, peak, received, hoarder.close_code

    before, peak, received, code = asyncio.run(hoard())

    assert code == 4008
    assert received < 2 * 200  # what the kernel and the cap held, not all 200 snapshots
    assert peak - before < 8 * CAP


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_reading_client_gets_a_snapshot_larger_than_the_cap_in_full(daphne_server, make_user):
    url, _, log = daphne_server
    thread_id, cookie = big_conversation(make_user)  # a ~330 KB snapshot

    async def read() -> list[dict[str, Any]]:
        async with ws_connect(url, cookie) as reader:
            await reader.send(json.dumps({"type": "resume", "conversation": thread_id}))
            return await read_resume(reader)

    frames = asyncio.run(read())

    assert len(frames[0]["messages"]) == 40
    assert "4008" not in log.read_text()


async def a_run_in_bursts(url: str, cookie: str) -> tuple[str | None, list[Any]]:
    """The subprotocol the server chose for a client asking for bursts, and what a run sent."""
    async with ws_connect(url, cookie, subprotocols=["assistant.bursts"]) as ws:
        await ws.send(json.dumps({"type": "message", "text": "ping"}))
        received = [json.loads(await asyncio.wait_for(ws.recv(), 10))]
        while received[-1][-1]["type"] != "RUN_FINISHED":
            received.append(json.loads(await asyncio.wait_for(ws.recv(), 10)))
        return ws.subprotocol, received


def assert_bursts_of_a_ping_run(subprotocol: str | None, received: list[Any]) -> None:
    assert subprotocol == "assistant.bursts"
    assert all(isinstance(burst, list) for burst in received)
    frames = [frame for burst in received for frame in burst]
    assert kinds(frames) == sockets.PING_RUN
    assert len(received) < len(frames)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_daphne_sends_a_run_in_bursts_to_a_client_that_asks_for_them(daphne_server, make_user):
    url, _, _ = daphne_server
    make_user("burst")

    assert_bursts_of_a_ping_run(*asyncio.run(a_run_in_bursts(url, session_cookie("burst"))))


@pytest.mark.django_db(transaction=True)
def test_uvicorn_sends_a_run_in_bursts_to_a_client_that_asks_for_them(asgi_live_server, make_user):
    url = asgi_live_server.replace("http://", "ws://") + "/ws/assistant/"
    make_user("burst")

    assert_bursts_of_a_ping_run(*asyncio.run(a_run_in_bursts(url, session_cookie("burst"))))


# -- in process: snapshots, throttling, bad frames, missing pieces ------------------------------


def messages_in(conversation: Conversation, count: int) -> None:
    start = timezone.now() - timedelta(minutes=count)
    for index in range(count):
        message = Message.objects.create(
            conversation=conversation, role=Message.Role.USER, text=f"m{index}"
        )
        Message.objects.filter(pk=message.pk).update(created_at=start + timedelta(minutes=index))


@pytest.mark.django_db(transaction=True)
async def test_a_snapshot_holds_the_newest_messages_and_says_older_ones_exist(
    open_socket, plain_user, settings
):
    settings.ASSISTANT = {**settings.ASSISTANT, "SNAPSHOT_MAX_MESSAGES": 3}
    conversation = await Conversation.objects.acreate(user=plain_user, title="long")
    await sync_to_async(messages_in)(conversation, 5)
    socket = await open_socket(plain_user)

    await send(socket, type="resume", conversation=str(conversation.pk), after=0)

    snapshot = await receive(socket)
    assert [message["content"] for message in snapshot["messages"]] == ["m2", "m3", "m4"]
    cut = await receive(socket)
    assert kind(cut) == "CUSTOM assistant.snapshot"
    assert cut["value"] == {"messages": 3, "more": True}
    assert kind(await receive(socket)) == "CUSTOM assistant.resumed"


@pytest.mark.django_db(transaction=True)
async def test_a_whole_conversation_fits_the_snapshot_without_a_cut_marker(
    open_socket, plain_user, settings
):
    settings.ASSISTANT = {**settings.ASSISTANT, "SNAPSHOT_MAX_MESSAGES": 5}
    conversation = await Conversation.objects.acreate(user=plain_user, title="short")
    await sync_to_async(messages_in)(conversation, 5)
    socket = await open_socket(plain_user)

    await send(socket, type="resume", conversation=str(conversation.pk), after=0)

    assert len((await receive(socket))["messages"]) == 5
    assert kind(await receive(socket)) == "CUSTOM assistant.resumed"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("filler", "kept"),
    [("x" * 100_000, "56789"), ("é" * 20_000, "6789")],  # é: six bytes as JSON writes it
)
async def test_a_snapshot_stays_under_half_a_mebibyte_as_sent(
    open_socket, plain_user, filler, kept
):
    conversation = await Conversation.objects.acreate(user=plain_user, title="huge")
    for index in range(10):
        await Message.objects.acreate(
            conversation=conversation, role=Message.Role.ASSISTANT, text=f"{index}{filler}"
        )
    socket = await open_socket(plain_user)

    await send(socket, type="resume", conversation=str(conversation.pk), after=0)

    snapshot = await receive(socket)
    assert len(json.dumps(snapshot)) < 1024 * 1024  # daphne sends nothing larger
    assert "".join(m["content"][0] for m in snapshot["messages"]) == kept
    assert (await receive(socket))["value"] == {"messages": len(kept), "more": True}


@pytest.fixture
def turn_rate(settings: Any) -> Callable[[str], None]:
    """Set ``ASSISTANT["THROTTLE_RATE"]`` with nothing counted yet."""

    def set_rate(rate: str) -> None:
        settings.ASSISTANT = {**settings.ASSISTANT, "THROTTLE_RATE": rate}
        cache.clear()

    yield set_rate
    cache.clear()


@pytest.mark.django_db(transaction=True)
async def test_turns_past_the_throttle_rate_are_refused_as_throttled_and_store_nothing(
    open_socket, plain_user, turn_rate
):
    turn_rate("2/min")
    socket = await open_socket(plain_user)
    await send(socket, type="message", text="ping")
    thread_id = (await receive_run(socket))[0]["threadId"]
    await send(socket, type="message", text="ping", conversation=thread_id)
    await receive_run(socket)

    await send(socket, type="message", text="ping", conversation=thread_id)
    await send(socket, type="reject", action=str(uuid.uuid4()))

    for _ in range(2):
        error = await receive(socket)
        assert kind(error) == "CUSTOM assistant.error"
        assert error["value"]["code"] == "throttled"
        assert 0 < error["value"]["retry_after"] <= 60
    assert await socket.receive_nothing(timeout=0.2)
    assert await Message.objects.filter(conversation_id=thread_id).acount() == 4
    assert await Conversation.objects.acount() == 1


@pytest.mark.django_db(transaction=True)
async def test_the_websocket_turn_budget_is_its_own_not_spent_by_rest_requests(
    open_socket, plain_user, turn_rate
):
    turn_rate("1/min")
    client = Client()
    await sync_to_async(client.force_login)(plain_user)
    listed = await sync_to_async(client.get)("/assistant/api/conversations/")
    assert listed.status_code == 200  # the page's list of conversations costs no turn
    socket = await open_socket(plain_user)

    await send(socket, type="message", text="ping")

    assert kinds(await receive_run(socket)) == sockets.PING_RUN


NOT_WHOLE_NUMBERS = ["Infinity", "-Infinity", "NaN", "1e999", "1.5", "true", "false", '"5"', "-1"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("after", [*NOT_WHOLE_NUMBERS, "[1]", '""', str(2**64)])
async def test_resume_after_anything_but_a_whole_number_is_a_bad_frame_logged_in_one_line(
    open_socket, plain_user, caplog, after
):
    conversation = await Conversation.objects.acreate(user=plain_user, title="t")
    socket = await open_socket(plain_user)
    caplog.set_level(logging.INFO, logger="assistant")

    frame = f'{{"type": "resume", "conversation": "{conversation.pk}", "after": {after}}}'
    await socket.send_to(text_data=frame)

    error = await receive(socket)
    assert kind(error) == "CUSTOM assistant.error"
    assert error["value"]["code"] == "bad_frame"
    [(level, line)] = consumer_logs(caplog)
    assert level == "INFO"
    assert "bad_frame" in line
    await send(socket, type="resume", conversation=str(conversation.pk), after=0)
    assert (await receive(socket))["type"] == "MESSAGES_SNAPSHOT"  # the socket still serves


@pytest.mark.django_db(transaction=True)
async def test_without_a_channel_layer_the_socket_says_channel_layer_missing_and_closes(
    plain_user, settings, caplog
):
    settings.CHANNEL_LAYERS = {}
    channel_layers.backends.clear()
    caplog.set_level(logging.INFO, logger="assistant")
    socket = WebsocketCommunicator(application, "/ws/assistant/", headers=[ORIGIN])
    socket.scope["user"] = plain_user
    try:
        connected, _ = await socket.connect(timeout=WAIT)
        assert connected

        error = await receive(socket)
        assert kind(error) == "CUSTOM assistant.error"
        assert error["value"]["code"] == "channel_layer_missing"
        assert await socket.receive_output(timeout=WAIT) == {
            "type": "websocket.close",
            "code": 1011,
        }
    finally:
        await socket.disconnect()
        channel_layers.backends.clear()
    [(level, line)] = consumer_logs(caplog)
    assert level == "ERROR"
    assert "CHANNEL_LAYERS" in line


@pytest.mark.django_db(transaction=True)
async def test_the_llm_planner_without_openai_still_echoes_the_message_and_ends_llm_unavailable(
    open_socket, plain_user, settings, monkeypatch
):
    monkeypatch.setitem(sys.modules, "openai", None)  # as if the package were not installed
    monkeypatch.delitem(sys.modules, "assistant.turns.planners.llm", raising=False)
    settings.ASSISTANT = {**settings.ASSISTANT, "PLANNER": "llm"}
    socket = await open_socket(plain_user)

    await send(socket, type="message", text="hello there")

    frames = await receive_run(socket)
    assert kinds(frames)[:4] == [
        "RUN_STARTED",
        "TEXT_MESSAGE_START user",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
    ]
    assert frames[2]["delta"] == "hello there"
    assert frames[-1]["type"] == "RUN_ERROR"
    assert frames[-1]["code"] == "llm_unavailable"
    stored = await sync_to_async(sockets.stored)(frames[0]["threadId"])
    assert [(m.role, m.status) for m in stored] == [("user", "complete"), ("assistant", "failed")]


@pytest.mark.parametrize("key", ["SOCKET_MAX_PENDING_BYTES", "SNAPSHOT_MAX_MESSAGES"])
@pytest.mark.parametrize("value", [0, -1, "8MB", 1.5, True, None])
def test_the_socket_bounds_must_be_positive_integers(key, value, settings):
    settings.ASSISTANT = {**settings.ASSISTANT, key: value}

    errors = check_settings()

    assert [(e.id, key in e.msg) for e in errors] == [("assistant.E002", True)]


# -- the chat page ------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_chat_page_shows_a_refused_message_as_not_sent_with_the_error(
    open_chat, plain_user, turn_rate
):
    from playwright.sync_api import expect

    turn_rate("1/min")
    page = open_chat(plain_user)
    browsing.send(page, "ping")
    expect(page.locator(".bubble.assistant .text")).to_have_text("pong for plain")

    browsing.send(page, "ping again")

    refused = page.locator(".bubble.user.failed")
    expect(refused.locator(".text")).to_have_text("ping again")
    expect(refused.locator(".state")).to_have_text("not sent")
    expect(page.locator("#notice.error")).to_contain_text("Too many messages")
    expect(page.get_by_placeholder("Message the assistant…")).to_have_value("ping again")
    expect(page.locator(".bubble.user:not(.failed)")).to_have_count(1)
    assert list(Message.objects.filter(role="user").values_list("text", flat=True)) == ["ping"]
