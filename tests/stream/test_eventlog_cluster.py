"""The Redis event log on a real Redis Cluster: three local masters on private ports."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
import redis
from redis.cluster import RedisCluster

from assistant.stream.broadcast import published_by
from assistant.stream.eventlog import RedisEventLog, event_log
from tests.channel_layers import redis_channel_layer as redis_channel_layer_config
from tests.conftest import REQUIRE_SERVICES
from tests.processes import free_ports
from tests.sockets import PING_RUN, WAIT, count_group_sends, kinds, receive_run, send

MASTERS = 3
CONVERSATIONS = 12  # enough that their logs land on every master


def wait_until(ready: Any, what: str, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while True:
        with contextlib.suppress(redis.RedisError):
            if ready():
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the test Redis Cluster: {what} after {within:g} s")
        time.sleep(0.05)


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[list[int]]:
    """Three cluster-enabled masters joined into one cluster; yields their ports, stops them."""
    server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    if server is None or cli is None:
        reason = "needs redis-server and redis-cli (apt-get install redis-server)"
        if REQUIRE_SERVICES:
            pytest.fail(f"ASSISTANT_REQUIRE_SERVICES=1: {reason}")
        pytest.skip(reason)
    ports = free_ports(MASTERS)
    processes: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory(prefix="assistant-redis-cluster-") as directory:
        try:
            for port in ports:
                nodes_file = str(Path(directory) / f"nodes-{port}.conf")
                command = [server, "--cluster-enabled", "yes", "--port", str(port)]
                command += ["--bind", "127.0.0.1", "--dir", directory]
                command += ["--cluster-config-file", nodes_file]
                command += ["--save", "", "--appendonly", "no", "--daemonize", "no"]
                processes.append(
                    subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                )
            nodes = [redis.Redis(port=port, socket_connect_timeout=1) for port in ports]
            for node in nodes:
                wait_until(node.ping, "a master does not answer")
            create = [cli, "--cluster", "create", *(f"127.0.0.1:{port}" for port in ports)]
            subprocess.run(
                [*create, "--cluster-replicas", "0", "--cluster-yes"],
                check=True,
                capture_output=True,
                timeout=30,
            )
            for node in nodes:
                wait_until(
                    lambda node=node: node.cluster("info")["cluster_state"] == "ok",
                    "cluster_state is not ok",
                )
                node.close()
            yield ports
        finally:
            for process in processes:
                process.terminate()
            for process in processes:
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


@pytest.fixture
def cluster_url(redis_cluster: list[int]) -> str:
    """The event log's URL for the test cluster: any master will do as the first contact."""
    return f"redis+cluster://127.0.0.1:{redis_cluster[0]}"


def conversation_ids() -> list[str]:
    return [str(uuid.uuid4()) for _ in range(CONVERSATIONS)]


def masters_holding(ports: list[int], thread_ids: list[str]) -> set[str]:
    """The masters whose slots hold these conversations' logs."""
    client = RedisCluster(host="127.0.0.1", port=ports[0])
    try:
        return {
            client.get_node_from_key(RedisEventLog._keys(thread_id)[0]).name
            for thread_id in thread_ids
        }
    finally:
        client.close()


def frame(text: str) -> dict[str, Any]:
    return {"type": "TEXT_MESSAGE_CONTENT", "delta": text}


async def test_on_a_cluster_each_conversation_is_numbered_kept_trimmed_and_replayed(
    redis_cluster: list[int], cluster_url: str
) -> None:
    log = RedisEventLog(cluster_url, keep=3, ttl=60)
    thread_ids = conversation_ids()
    assert len(masters_holding(redis_cluster, thread_ids)) == MASTERS

    lasts = {}
    for thread_id in thread_ids:
        await log.append_many(thread_id, [frame(f"{thread_id} 1"), frame(f"{thread_id} 2")])
        lasts[thread_id] = await log.append_many(
            thread_id, [frame(f"{thread_id} {n}") for n in (3, 4, 5)]
        )

    for thread_id, last in lasts.items():
        everything = await log.since(thread_id, last - 5)
        assert [f["delta"] for f in everything.frames] == [f"{thread_id} {n}" for n in (3, 4, 5)]
        assert [f["seq"] for f in everything.frames] == [last - 2, last - 1, last]
        assert (everything.gap, everything.last) == (True, last)  # the first two were trimmed
        recent = await log.since(thread_id, last - 1)
        assert ([f["delta"] for f in recent.frames], recent.gap) == ([f"{thread_id} 5"], False)
        assert (await log.since(thread_id, last)).frames == []


async def test_on_a_cluster_a_conversations_kept_frames_are_redacted(cluster_url: str) -> None:
    log = RedisEventLog(cluster_url, keep=10, ttl=60)
    thread_id = str(uuid.uuid4())
    last = await log.append_many(thread_id, [frame("the secret is 42"), frame("nothing here")])

    changed = await log.redact(thread_id, lambda text: text.replace("42", "[redacted]"))

    replay = await log.since(thread_id, last - 2)
    assert changed == 1
    assert [f["delta"] for f in replay.frames] == ["the secret is [redacted]", "nothing here"]


async def test_on_a_cluster_the_log_script_publishes_the_burst_it_keeps(
    redis_cluster: list[int], cluster_url: str
) -> None:
    """Pub/sub is cluster-wide: a subscriber on any master hears what the script publishes."""
    log = RedisEventLog(cluster_url, keep=10, ttl=60)
    channel = f"test-{uuid.uuid4().hex[:8]}-burst"
    thread_ids = conversation_ids()[: MASTERS * 2]
    heard: dict[int, list[Any]] = {}
    subscribers = [redis.Redis(port=port).pubsub() for port in redis_cluster]
    try:
        for subscriber in subscribers:
            subscriber.subscribe(channel)
            assert subscriber.get_message(timeout=WAIT)["type"] == "subscribe"
        for thread_id in thread_ids:
            await log.append_many(thread_id, [frame("a"), frame("b")], publish=channel)
        for port, subscriber in zip(redis_cluster, subscribers, strict=True):
            heard[port] = []
            while len(heard[port]) < len(thread_ids):
                message = subscriber.get_message(timeout=WAIT)
                assert message is not None, f"master {port} heard {len(heard[port])} bursts"
                if message["type"] == "message":
                    heard[port].append(msgpack.unpackb(message["data"]))
    finally:
        for subscriber in subscribers:
            subscriber.close()

    for bursts in heard.values():
        assert [burst["type"] for burst in bursts] == ["assistant.events"] * len(thread_ids)
        for burst in bursts:
            texts = [json.loads(text) for text in burst["texts"]]
            assert [text["delta"] for text in texts] == ["a", "b"]
            assert texts[1]["seq"] == texts[0]["seq"] + 1


@pytest.mark.django_db(transaction=True)
async def test_a_chat_on_a_cluster_streams_numbered_runs_that_the_log_published_and_replays(
    redis_cluster: list[int], cluster_url: str, settings, open_socket, plain_user, monkeypatch
) -> None:
    """channels-redis's pub/sub layer on a master of the cluster the log writes to: the log's
    script numbers, keeps and publishes each run (the layer sends none of it)."""
    from channels.layers import channel_layers

    layer_url = f"redis://127.0.0.1:{redis_cluster[0]}"
    settings.CHANNEL_LAYERS = {
        "default": redis_channel_layer_config("pubsub", layer_url, f"test-{uuid.uuid4().hex[:8]}")
    }
    channel_layers.backends.clear()
    settings.ASSISTANT = {
        **settings.ASSISTANT,
        "EVENT_LOG": cluster_url,
        "EVENT_LOG_TTL": 300,
        "BURST_WINDOW": 60,  # a run is one burst
    }
    carried = count_group_sends(monkeypatch)
    try:
        socket = await open_socket(plain_user)
        await send(socket, type="message", text="ping")
        first = await receive_run(socket)
        await send(socket, type="message", text="ping", conversation=first[0]["threadId"])
        second = await receive_run(socket)
        replayed = await event_log().since(first[0]["threadId"], first[0]["seq"] - 1)
    finally:
        channel_layers.backends.clear()

    assert kinds(first) == kinds(second) == PING_RUN
    start = first[0]["seq"]
    assert [f["seq"] for f in first + second] == list(range(start, start + 2 * len(PING_RUN)))
    assert replayed.frames == first + second
    assert carried == []


async def test_the_log_publishes_itself_through_a_pub_sub_layer_on_its_clusters_first_master(
    redis_cluster: list[int], cluster_url: str
) -> None:
    """The master the log's URL names is in its cluster; a server outside it is not."""
    from channels_redis.pubsub import RedisPubSubChannelLayer

    log = RedisEventLog(cluster_url, keep=10, ttl=60)
    layer = RedisPubSubChannelLayer(hosts=[f"redis://127.0.0.1:{redis_cluster[0]}"])
    outside = RedisPubSubChannelLayer(hosts=["redis://127.0.0.1:6379"])

    assert published_by(log, layer, "assistant.conversation.1") is not None
    assert published_by(log, outside, "assistant.conversation.1") is None
