"""MCP test helpers: the official client against a live server, and the servers it talks to."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
from asgiref.sync import sync_to_async
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from assistant.access import tokens
from tests.processes import ROOT, database_url, free_port, wait_until_listening

MODES = ["legacy", "2026-07-28"]  # the 2025-11-25 handshake, and the stateless revision
PATH = "/assistant/mcp/"
MODERN = {
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2026-07-28",
}


def mcp_client(base_url: str, secret: str | None, mode: str = "legacy", **options: Any) -> Client:
    """The official client over Streamable HTTP, sending ``secret`` as its bearer token."""
    headers = {"Authorization": f"Bearer {secret}"} if secret else {}
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=60))
    return Client(streamable_http_client(base_url + PATH, http_client=http), mode=mode, **options)


def server_command(kind: str, port: int) -> list[str]:
    if kind == "daphne":
        return [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port)]
    # lifespan "auto": Django's handler declines it, so the MCP endpoint starts without one
    uvicorn = [sys.executable, "-m", "uvicorn", "--host", "127.0.0.1", "--port", str(port)]
    return [*uvicorn, "--lifespan", "auto", "--log-level", "warning"]


@contextlib.contextmanager
def server_processes(kinds: list[str], tmp_path: Path) -> Iterator[list[str]]:
    """The test project served by these ASGI servers, one process each, on the test database."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": database_url(),
    }
    processes: list[tuple[int, subprocess.Popen[bytes], Path]] = []
    try:
        for kind in kinds:
            port = free_port()
            log = tmp_path / f"{kind}-{port}.log"
            with log.open("wb") as output:
                command = [*server_command(kind, port), "tests.asgi:application"]
                process = subprocess.Popen(
                    command, cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT
                )
            processes.append((port, process, log))
        for port, process, log in processes:
            wait_until_listening(port, process, log)
        yield [f"http://127.0.0.1:{port}" for port, _, _ in processes]
    finally:
        for _, process, _ in processes:
            process.terminate()
        for _, process, _ in processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


def envelope(method: str, params: Any) -> dict[str, Any]:
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    if isinstance(params, dict):
        params = {**params, "_meta": meta}
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


async def issue(user: Any, name: str = "laptop", **options: Any) -> str:
    """A personal access token's secret for ``user`` (``options`` bound it, as ``tokens.issue``)."""
    _, secret = await sync_to_async(tokens.issue)(user, name=name, **options)
    return secret
