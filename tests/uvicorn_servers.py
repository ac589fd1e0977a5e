"""The test project under uvicorn processes of a test's own: on the test database, with the
test's Redis channel layer between them, their Redis event logs deleted afterwards."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis

from assistant.models import Conversation
from assistant.stream.eventlog import RedisEventLog
from tests.channel_layers import REDIS_CHANNEL_LAYERS
from tests.conftest import REDIS_URL
from tests.processes import ROOT, database_url, free_port, wait_until_listening

UVICORN = [sys.executable, "-m", "uvicorn", "tests.asgi:application", "--host", "127.0.0.1"]
UVICORN += ["--lifespan", "off", "--log-level", "warning"]


def forget_event_logs() -> None:
    """Delete the Redis event logs of this test's conversations (their ids are fresh UUIDs)."""
    client = redis.Redis.from_url(REDIS_URL)
    try:
        for pk in Conversation.objects.values_list("pk", flat=True):
            client.delete(*RedisEventLog._keys(str(pk)))
    finally:
        client.close()


@contextlib.contextmanager
def servers(
    count: int,
    tmp_path: Path,
    redis_channel_layer: dict[str, Any],
    env: dict[str, str] | None = None,
) -> Iterator[list[str]]:
    """The test project under ``count`` uvicorn processes on the test database, Redis between them.

    They use the test's Redis channel layer (each kind in turn), prefix included: what this
    process sends to a group, such as news of a permission change, reaches them. ``env`` adds to
    their environment. Yields their websocket URLs.
    """
    kind = {backend: name for name, backend in REDIS_CHANNEL_LAYERS.items()}
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.two_process_settings",
        "DATABASE_URL": database_url(),
        "REDIS_URL": REDIS_URL,
        "ASSISTANT_CHANNEL_LAYER": kind[redis_channel_layer["BACKEND"]],
        "ASSISTANT_CHANNEL_PREFIX": redis_channel_layer["CONFIG"]["prefix"],
        **(env or {}),
    }
    ports = [free_port() for _ in range(count)]
    processes: list[subprocess.Popen[bytes]] = []
    try:
        for port in ports:
            log = tmp_path / f"server-{port}.log"
            with log.open("wb") as output:
                processes.append(
                    subprocess.Popen(
                        [*UVICORN, "--port", str(port)],
                        cwd=ROOT,
                        env=env,
                        stdout=output,
                        stderr=subprocess.STDOUT,
                    )
                )
        for port, process in zip(ports, processes, strict=True):
            wait_until_listening(port, process, tmp_path / f"server-{port}.log")
        yield [f"ws://127.0.0.1:{port}/ws/assistant/" for port in ports]
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        forget_event_logs()
