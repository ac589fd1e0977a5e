"""PostgreSQL going down mid-life is ``503 database_unavailable`` with ``Retry-After`` on every
surface (REST, AG-UI, MCP; the websocket's error frame carries the code and ``retry_after``),
never a 500, an HTML page or ``message_not_stored``.

A real outage: the project served by uvicorn on a cluster of the test's own (a private port),
stopped with ``pg_ctl -m immediate`` while the server runs and a chat socket is open.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from django.db import IntegrityError, InterfaceError, OperationalError
from mcp import Client, StdioServerParameters
from websockets.asyncio.client import connect
from websockets.typing import Origin

from assistant.exceptions import ReplyNotStored, outage
from tests.agui_clients import run_input
from tests.mcp_clients import MODERN, envelope, server_command
from tests.outage import Cluster, private_postgres
from tests.processes import ROOT, free_port, wait_until_listening

WAIT = 20

SEED = """
import json
from django.contrib.auth import get_user_model
from django.test import Client
from rest_framework.authtoken.models import Token
from assistant.access import tokens
user = get_user_model().objects.create_user("ops", password="pw")
browser = Client()
browser.force_login(user)
print(json.dumps({
    "token": Token.objects.create(user=user).key,
    "bearer": tokens.issue(user, name="laptop")[1],
    "session": browser.cookies["sessionid"].value,
}))
"""


def django(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "django", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    with private_postgres() as running:
        yield running


@pytest.fixture
def project(cluster: Cluster) -> tuple[dict[str, str], dict[str, str]]:
    """The test project's environment on the private cluster, migrated, and one user's keys."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": cluster.url,
        "PYTHONPATH": str(ROOT),
    }
    django(env, "migrate", "--noinput", "-v", "0")
    keys = json.loads(django(env, "shell", "-c", SEED).strip().splitlines()[-1])
    return env, keys


@pytest.fixture
def served(
    project: tuple[dict[str, str], dict[str, str]], tmp_path: Path
) -> Iterator[tuple[str, dict[str, str]]]:
    """The project under uvicorn on the private cluster, and the user's keys."""
    env, keys = project
    port = free_port()
    log = tmp_path / "uvicorn.log"
    with log.open("wb") as output:
        server = subprocess.Popen(
            [*server_command("uvicorn", port), "tests.asgi:application"],
            cwd=ROOT,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until_listening(port, server, log)
        yield f"127.0.0.1:{port}", keys
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)


def refusal(response: requests.Response) -> tuple[int, str, str, str | None]:
    kind = response.headers.get("Content-Type", "")
    code = response.json().get("code") if kind.startswith("application/json") else ""
    return (response.status_code, kind, code, response.headers.get("Retry-After"))


UNAVAILABLE = (503, "application/json", "database_unavailable", "5")


def rest(host: str, keys: dict[str, str], path: str, body: Any) -> requests.Response:
    return requests.post(
        f"http://{host}/assistant/api/{path}",
        json=body,
        headers={"Authorization": f"Token {keys['token']}"},
        timeout=WAIT,
    )


def agui(host: str, keys: dict[str, str]) -> requests.Response:
    return requests.post(
        f"http://{host}/assistant/agui/",
        json=run_input("ping"),
        headers={"Authorization": f"Token {keys['token']}", "Accept": "text/event-stream"},
        timeout=WAIT,
    )


def mcp(host: str, keys: dict[str, str]) -> requests.Response:
    headers = {**MODERN, "MCP-Method": "tools/call", "MCP-Name": "ping"}
    return requests.post(
        f"http://{host}/assistant/mcp/",
        json=envelope("tools/call", {"name": "ping", "arguments": {}}),
        headers={**headers, "Authorization": f"Bearer {keys['bearer']}"},
        timeout=WAIT,
    )


async def chat(host: str, keys: dict[str, str], cluster: Cluster) -> list[dict[str, Any]]:
    """Open the chat while the database is up, lose the database, then send a message: the
    frames the socket gets for it (up to its error, or its run's end)."""
    async with connect(
        f"ws://{host}/ws/assistant/",
        origin=Origin(f"http://{host}"),
        additional_headers={"Cookie": f"sessionid={keys['session']}"},
        open_timeout=WAIT,
        proxy=None,
    ) as socket:
        await socket.send(json.dumps({"type": "message", "text": "ping"}))
        while json.loads(await asyncio.wait_for(socket.recv(), WAIT))["type"] != "RUN_FINISHED":
            pass  # a first turn, the database up: the socket works
        await asyncio.to_thread(cluster.crash)
        await socket.send(json.dumps({"type": "message", "text": "ping"}))
        frames = []
        while not frames or not (
            frames[-1]["type"] in ("RUN_FINISHED", "RUN_ERROR")
            or frames[-1].get("name") == "assistant.error"
        ):
            frames.append(json.loads(await asyncio.wait_for(socket.recv(), WAIT)))
        return frames


@pytest.mark.slow  # a cluster, a migration and a server of its own (~30 s)
def test_a_database_outage_is_503_database_unavailable_on_every_surface(served, cluster):
    host, keys = served
    assert rest(host, keys, "dispatch/", {"operation": "ping"}).status_code == 200  # (it is up)

    frames = asyncio.run(chat(host, keys, cluster))  # the database goes down in there

    error = frames[-1].get("value", {}) if frames[-1].get("name") == "assistant.error" else {}
    answers = {
        "websocket": (error.get("code"), error.get("retry_after")),
        "REST dispatch": refusal(rest(host, keys, "dispatch/", {"operation": "ping"})),
        "REST message": refusal(rest(host, keys, "messages/", {"message": "ping"})),
        "AG-UI": refusal(agui(host, keys)),
        "MCP": refusal(mcp(host, keys)),
    }
    assert answers == {
        "websocket": ("database_unavailable", 5),
        "REST dispatch": UNAVAILABLE,
        "REST message": UNAVAILABLE,
        "AG-UI": UNAVAILABLE,
        "MCP": UNAVAILABLE,
    }, frames


@pytest.mark.slow
async def test_an_mcp_tool_call_under_way_in_an_outage_is_an_error_result_with_the_code(
    project, cluster
):
    env, _ = project
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "django", "assistant_mcp", "--user", "ops"],
        env=env,
        cwd=str(ROOT),
    )
    async with Client(server, mode="legacy") as client:  # (stdio: no request to sign in)
        assert not (await client.call_tool("ping", {})).is_error
        await asyncio.to_thread(cluster.crash)
        refused = await client.call_tool("ping", {})

    assert refused.is_error
    assert refused.structured_content == {"code": "database_unavailable", "retry_after": 5}


# -- what counts as an outage --------------------------------------------------------------------


def raised_while_handling(cause: BaseException, error: BaseException) -> BaseException:
    try:
        try:
            raise cause
        except type(cause):
            raise error  # noqa: B904  (as code that handles the first does: implicitly chained)
    except type(error) as caught:
        return caught


@pytest.mark.parametrize(
    "error",
    [
        OperationalError("connection refused"),
        InterfaceError("connection already closed"),
        raised_while_handling(OperationalError("gone"), RuntimeError("while cleaning up")),
    ],
    ids=["operational", "interface", "chained"],
)
def test_a_lost_database_is_database_unavailable(error):
    unavailable = outage(error)

    assert unavailable is not None
    assert (unavailable.code, unavailable.status, unavailable.retry_after) == (
        "database_unavailable",
        503,
        5,
    )


@pytest.mark.parametrize(
    "error",
    [
        IntegrityError("duplicate key"),
        raised_while_handling(OperationalError("gone"), ReplyNotStored()),
    ],
    ids=["not an outage", "an error of ours that says more"],
)
def test_other_errors_keep_their_own_answer(error):
    assert outage(error) is None
