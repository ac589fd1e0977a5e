"""MCP test helpers: the official client against a live server, and the servers it talks to."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import httpx2
import mcp_types as types
from asgiref.sync import sync_to_async
from hypothesis import strategies as st
from mcp import Client
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.streamable_http import streamable_http_client
from pydantic import TypeAdapter

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


class Wire:
    """Requests spoken by hand over Streamable HTTP, with a bearer token and these capabilities."""

    def __init__(self, base_url: str, secret: str, capabilities: dict[str, Any]) -> None:
        self.url = base_url + PATH
        self.capabilities = capabilities
        self.http = httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {secret}"}, timeout=httpx2.Timeout(30, read=60)
        )
        self.ids = itertools.count(1)
        self.notifications: list[dict[str, Any]] = []  # what came on the requests' streams


class WireSession(Wire):
    """A 2025-11-25 session spoken by hand over Streamable HTTP: for what the official client
    cannot send (a task-augmented ``tools/call``), as clients of the tasks utility send it."""

    def __init__(self, base_url: str, secret: str, capabilities: dict[str, Any]) -> None:
        super().__init__(base_url, secret, capabilities)
        self.session_id = ""
        self.initialized: dict[str, Any] = {}

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
        return answered(response, request_id, self.notifications)


def answered(response: httpx2.Response, request_id: int, notifications: list[Any]) -> Any:
    """The result a response (JSON or a stream of events) carries for ``request_id``, keeping the
    notifications that came with it; a JSON-RPC error raises ``WireError``."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        answers = [
            json.loads(line[len("data:") :])
            for line in response.text.splitlines()
            if line.startswith("data:") and line[len("data:") :].strip()
        ]
    else:
        answers = [response.json()]
    notifications += [each for each in answers if "id" not in each]
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


def envelope(
    method: str, params: Any, capabilities: dict[str, Any] | None = None, request_id: int = 1
) -> dict[str, Any]:
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities or {},
    }
    if isinstance(params, dict):
        params = {**params, "_meta": meta}
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


# -- the tasks extension (2026-07-28), as a client speaks it ---------------------------------------

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
DECLARES_TASKS = {"extensions": {TASKS_EXTENSION: {}}}  # a request's capabilities, declaring it


class ModernWire(Wire):
    """2026-07-28 requests spoken by hand over Streamable HTTP, each with its own capabilities
    (the extension's ``tasks/*`` send ``Mcp-Name: <taskId>``, as its spec asks)."""

    def __init__(self, base_url: str, secret: str, capabilities: dict[str, Any]) -> None:
        super().__init__(base_url, secret, capabilities)
        self.statuses: list[int] = []  # each answer's HTTP status

    async def __aenter__(self) -> ModernWire:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.http.aclose()

    async def request(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """The request's result; a JSON-RPC error raises ``WireError``."""
        params = params or {}
        request_id = next(self.ids)
        headers = {**MODERN, "MCP-Method": method}
        name = params.get("taskId") if method.startswith("tasks/") else params.get("name")
        if isinstance(name, str):
            headers["MCP-Name"] = name
        body = envelope(method, params, self.capabilities, request_id)
        response = await self.http.post(self.url, json=body, headers=headers)
        self.statuses.append(response.status_code)
        return answered(response, request_id, self.notifications)


class CreatedTask(types.Result):
    """``CreateTaskResult``: a result that is a task (``resultType: "task"``)."""

    result_type: Literal["task"] = "task"
    task_id: str
    status: str
    status_message: str | None = None
    created_at: str
    last_updated_at: str
    ttl_ms: int | None
    poll_interval_ms: int | None = None


class TaskIdParams(types.RequestParams):
    task_id: str


class GetTask(types.Request[TaskIdParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskIdParams
    name_param = "taskId"


class TasksExtension(ClientExtension):
    """The tasks extension for the official client, which does not ship one: it declares the
    extension on every request, and finishes a task it is handed by polling ``tasks/get``."""

    identifier = TASKS_EXTENSION

    def __init__(self) -> None:
        self.created: list[CreatedTask] = []
        self.polled: list[dict[str, Any]] = []

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreatedTask, resolve=self.resolve)]

    async def resolve(self, created: CreatedTask, ctx: ClaimContext) -> types.CallToolResult:
        self.created.append(created)
        while True:
            request = GetTask(params=TaskIdParams(task_id=created.task_id))
            task = await ctx.session.send_request(request, TypeAdapter(dict[str, Any]))
            self.polled.append(task)
            if task["status"] == "completed":
                return types.CallToolResult.model_validate(task["result"])
            if task["status"] != "working":
                raise RuntimeError(f"the task ended {task['status']}: {task}")
            await asyncio.sleep(min(task.get("pollIntervalMs", 1000), 200) / 1000)


async def issue(user: Any, name: str = "laptop", **options: Any) -> str:
    """A personal access token's secret for ``user`` (``options`` bound it, as ``tokens.issue``)."""
    _, secret = await sync_to_async(tokens.issue)(user, name=name, **options)
    return secret
