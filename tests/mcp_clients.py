"""MCP test helpers: the official client against a live server, and the servers it talks to."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
from asgiref.sync import sync_to_async
from hypothesis import strategies as st
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from assistant.access import tokens
from tests.processes import ROOT, database_url, free_port, wait_until_listening

MODES = ["legacy", "2026-07-28"]  # the 2025-11-25 handshake, and the stateless revision
PATH = "/assistant/mcp/"
# Hypothesis: examples per fuzzed property, and any JSON value
EXAMPLES = int(os.environ.get("ASSISTANT_FUZZ_EXAMPLES", "40"))
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)

MODERN = {
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2026-07-28",
}


def mcp_client(base_url: str, secret: str | None, mode: str = "legacy", **options: Any) -> Client:
    """The official client over Streamable HTTP, sending ``secret`` as its bearer token."""
    headers = {"Authorization": f"Bearer {secret}"} if secret else {}
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=60))
    return Client(streamable_http_client(base_url + PATH, http_client=http), mode=mode, **options)


class WireError(Exception):
    """A JSON-RPC error answer: its code, message and data."""

    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(error["code"], error["message"])
        self.code: int = error["code"]
        self.data: Any = error.get("data")


class WireSession:
    """A 2025-11-25 session spoken by hand over Streamable HTTP: for what the official client
    cannot send (a task-augmented ``tools/call``), as clients of the tasks utility send it."""

    def __init__(self, base_url: str, secret: str, capabilities: dict[str, Any]) -> None:
        self.url = base_url + PATH
        self.capabilities = capabilities
        self.http = httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {secret}"}, timeout=httpx2.Timeout(30, read=60)
        )
        self.ids = itertools.count(1)
        self.session_id = ""
        self.initialized: dict[str, Any] = {}
        self.notifications: list[dict[str, Any]] = []  # what came on the requests' streams

    async def __aenter__(self) -> WireSession:
        self.initialized = await self.request(
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": self.capabilities,
                "clientInfo": {"name": "wire-client", "version": "1"},
            },
        )
        await self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return self

    async def __aexit__(self, *exc: object) -> None:
        with contextlib.suppress(httpx2.HTTPError):
            await self.http.delete(self.url, headers=self.headers())
        await self.http.aclose()

    def headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json, text/event-stream"}
        if self.session_id:
            headers |= {"Mcp-Session-Id": self.session_id, "MCP-Protocol-Version": "2025-11-25"}
        return headers

    async def post(self, message: dict[str, Any]) -> httpx2.Response:
        response = await self.http.post(self.url, json=message, headers=self.headers())
        self.session_id = response.headers.get("mcp-session-id", self.session_id)
        return response

    async def request(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """The request's result; a JSON-RPC error raises ``WireError``."""
        request_id = next(self.ids)
        message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}}
        response = await self.post(message)
        assert response.status_code == 200, response.text
        if response.headers["content-type"].startswith("text/event-stream"):
            answers = [
                json.loads(line[len("data:") :])
                for line in response.text.splitlines()
                if line.startswith("data:") and line[len("data:") :].strip()
            ]
        else:
            answers = [response.json()]
        self.notifications += [each for each in answers if "id" not in each]
        [answer] = [each for each in answers if each.get("id") == request_id]
        if "error" in answer:
            raise WireError(answer["error"])
        return answer["result"]


def server_command(kind: str, port: int) -> list[str]:
    if kind == "daphne":
        return [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port)]
    # lifespan "auto": Django's handler declines it, so the MCP endpoint starts without one
    uvicorn = [sys.executable, "-m", "uvicorn", "--host", "127.0.0.1", "--port", str(port)]
    return [*uvicorn, "--lifespan", "auto", "--log-level", "warning"]


@contextlib.contextmanager
def server_processes(
    kinds: list[str], tmp_path: Path, settings: str = "tests.settings"
) -> Iterator[list[str]]:
    """The test project served by these ASGI servers, one process each, on the test database."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": settings,
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
