"""Redis going down under an open chat: the run's user still sees it, nothing is lost."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from assistant.models import AuditEntry, Message
from tests.channel_layers import redis_channel_layer
from tests.conftest import REQUIRE_SERVICES
from tests.processes import free_ports
from tests.sockets import PING_RUN, kinds, receive_run, send

pytestmark = pytest.mark.redis


@pytest.fixture
def private_redis(settings: Any) -> Iterator[subprocess.Popen[bytes]]:
    """A Redis of this test's own (it is stopped), under the channel layer and the event log."""
    server = shutil.which("redis-server")
    if server is None:
        reason = "needs redis-server (apt-get install redis-server)"
        if REQUIRE_SERVICES:
            pytest.fail(f"ASSISTANT_REQUIRE_SERVICES=1: {reason}")
        pytest.skip(reason)
    from channels.layers import channel_layers

    (port,) = free_ports(1)
    url = f"redis://127.0.0.1:{port}/0"
    with tempfile.TemporaryDirectory(prefix="assistant-redis-outage-") as directory:
        command = [server, "--port", str(port), "--bind", "127.0.0.1", "--dir", directory]
        process = subprocess.Popen(
            [*command, "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = redis.Redis(port=port, socket_connect_timeout=1)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        client.close()
        prefix = f"test-{uuid.uuid4().hex[:8]}"
        settings.CHANNEL_LAYERS = {"default": redis_channel_layer("pubsub", url, prefix)}
        settings.ASSISTANT = {**settings.ASSISTANT, "EVENT_LOG": url, "EVENT_LOG_TTL": 300}
        channel_layers.backends.clear()
        try:
            yield process
        finally:
            channel_layers.backends.clear()
            process.kill()
            process.wait()


@pytest.mark.django_db(transaction=True)
async def test_a_run_started_while_redis_is_down_still_reaches_the_socket_that_sent_it(
    private_redis, open_socket, plain_user
):
    """Neither the event log nor the layer can carry the run's bursts: they go straight to the
    socket whose message started it (unnumbered), rather than leaving its user with nothing."""
    socket = await open_socket(plain_user)
    await send(socket, type="message", text="ping")
    first = await receive_run(socket)
    assert kinds(first) == PING_RUN
    assert all(frame["seq"] > 0 for frame in first)  # numbered by the log while Redis was up

    private_redis.kill()
    private_redis.wait()
    await send(socket, type="message", text="ping", conversation=first[0]["threadId"])
    second = await receive_run(socket)

    assert kinds(second) == PING_RUN
    assert {frame["seq"] for frame in second} == {0}
    assert await Message.objects.filter(status="complete").acount() == 4
    assert await AuditEntry.objects.filter(operation="ping", decision="executed").acount() == 2


@pytest.mark.django_db(transaction=True)
async def test_a_run_published_before_the_sockets_subscription_is_back_still_reaches_its_socket(
    private_redis, open_socket, plain_user
):
    """The server's subscriptions are gone (as for up to a second after Redis restarts, until
    the layer tries again): the log keeps and publishes the burst, but nobody hears it, so the
    socket that started the run gets it straight, numbered, and once."""
    socket = await open_socket(plain_user)
    await send(socket, type="message", text="ping")
    first = await receive_run(socket)
    client = redis.Redis(port=int(private_redis.args[2]))
    try:
        # the subscriptions cannot come back (SUBSCRIBE denied) once their connections drop
        client.acl_setuser("default", enabled=True, commands=["-subscribe"])
        client.client_kill_filter(_type="pubsub")
        deadline = time.monotonic() + 5
        while client.pubsub_channels():  # gone once the server closed them
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)

        await send(socket, type="message", text="ping", conversation=first[0]["threadId"])
        second = await receive_run(socket)
        client.acl_setuser("default", enabled=True, commands=["+subscribe"])
        assert await socket.receive_nothing(timeout=1.5)  # nothing twice, once subscribed again
    finally:
        client.close()

    assert kinds(second) == PING_RUN
    assert all(frame["seq"] > 0 for frame in second)
