"""The tutorial's install blocks, pasted into a fresh ``startproject``, give a working chat.

The blocks are read from docs/tutorial.md (between ``<!-- startproject:NAME -->`` markers), so
the documentation cannot drift from what is tested. The project runs on the installed wheel, not
the checkout: ``check``, ``migrate``, a sign-in through the app's own login page, one REST turn
and one websocket turn against a real daphne.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from http.cookiejar import CookieJar
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect

from tests.processes import free_port
from tests.tutorial import tutorial_block
from tests.wheel import InstalledWheel, clean_environment, installed_wheel

PASSWORD = "a-long-enough-password"
DAPHNE_APPLICATION = ("-b", "127.0.0.1", "mysite.asgi:application")


@dataclass
class Project:
    root: Path
    installed: InstalledWheel

    def manage(self, *args: str) -> str:
        return self.installed.run("manage.py", *args, cwd=self.root)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    installed = installed_wheel(tmp_path_factory)
    root = tmp_path_factory.mktemp("startproject")
    installed.run("-m", "django", "startproject", "mysite", str(root))
    project = Project(root, installed)
    project.manage("startapp", "hello")
    settings = root / "mysite" / "settings.py"
    settings.write_text(
        settings.read_text()
        + "\n"
        + tutorial_block("settings")
        + 'INSTALLED_APPS.append("hello")  # the project\'s own app\n'
    )
    (root / "mysite" / "urls.py").write_text(tutorial_block("urls"))
    (root / "mysite" / "asgi.py").write_text(tutorial_block("asgi"))
    (root / "hello" / "assistant_tools.py").write_text(tutorial_block("tool"))
    project.manage("migrate", "--no-input", "-v", "0")
    project.manage(
        "shell",
        "--no-imports",
        "-c",
        "from django.contrib.auth import get_user_model; "
        f"get_user_model().objects.create_user('alice', password='{PASSWORD}')",
    )
    return project


@pytest.fixture(scope="module")
def server(project: Project) -> Iterator[str]:
    """daphne serving the project on a free local port."""
    port = free_port()
    process = subprocess.Popen(
        [str(project.installed.python), "-m", "daphne", "-p", str(port), *DAPHNE_APPLICATION],
        cwd=project.root,
        env=clean_environment(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert process.poll() is None, f"daphne exited:\n{process.communicate()[1]}"
                assert time.monotonic() < deadline, "daphne did not listen within 30 s"
                time.sleep(0.2)
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class Browser:
    """Just enough of a browser: cookies, forms, no redirects followed."""

    def __init__(self, host: str) -> None:
        self.base = f"http://{host}"
        self.cookies = CookieJar()
        self.opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(self.cookies), NoRedirect()
        )

    def cookie(self, name: str) -> str:
        return next(c.value for c in self.cookies if c.name == name and c.value is not None)

    def request(
        self, path: str, data: bytes | None = None, headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], str]:
        request = urllib.request.Request(self.base + path, data=data, headers=headers or {})
        try:
            with self.opener.open(request, timeout=30) as response:
                return response.status, dict(response.headers), response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, dict(error.headers), error.read().decode()


@pytest.fixture(scope="module")
def browser(server: str) -> Browser:
    """Alice, signed in through the app's own login page, as the chat page sends her there."""
    browser = Browser(server)
    status, headers, _ = browser.request("/assistant/")
    assert status == 302
    assert headers["Location"] == "/assistant/login/?next=/assistant/"
    status, _, page = browser.request(headers["Location"])
    assert status == 200
    assert 'name="password"' in page
    form = urllib.parse.urlencode(
        {
            "username": "alice",
            "password": PASSWORD,
            "next": "/assistant/",
            "csrfmiddlewaretoken": browser.cookie("csrftoken"),
        }
    ).encode()
    status, headers, _ = browser.request(
        "/assistant/login/?next=/assistant/", form, {"Referer": browser.base + "/assistant/login/"}
    )
    assert status == 302, "sign-in refused"
    assert headers["Location"] == "/assistant/"
    return browser


def test_check_finds_nothing_to_warn_about(project: Project) -> None:
    output = project.manage("check", "--fail-level", "WARNING")

    assert "System check identified no issues" in output


def test_the_production_howtos_settings_pass_check_in_the_same_project(project: Project) -> None:
    production = project.root / "mysite" / "settings_production.py"
    production.write_text(
        "from .settings import *  # noqa: F403\n"
        + tutorial_block("production", page="howto/production.md")
    )

    output = project.manage(
        "check", "--settings", "mysite.settings_production", "--fail-level", "WARNING"
    )
    layer = project.manage(
        "shell",
        "--settings",
        "mysite.settings_production",
        "--no-imports",
        "-c",
        "from django.conf import settings; print(settings.CHANNEL_LAYERS['default']['BACKEND'])",
    )

    # the in-memory layer beside PostgreSQL would be assistant.W002
    assert "System check identified no issues" in output
    assert layer.strip() == "channels_redis.pubsub.RedisPubSubChannelLayer"


def test_jobs_go_to_the_database_backend_not_inline(project: Project) -> None:
    output = project.manage(
        "shell",
        "--no-imports",
        "-c",
        "from assistant.compat import task_backends; "
        "print(type(task_backends['default']).__name__)",
    )

    assert output.strip() == "DatabaseBackend"


def test_the_project_runs_on_the_installed_wheel(project: Project) -> None:
    output = project.manage(
        "shell", "--no-imports", "-c", "import assistant; print(assistant.__file__)"
    )

    assert Path(output.strip()).is_relative_to(project.installed.venv)


def test_a_signed_in_user_gets_the_chat_page(browser: Browser) -> None:
    status, _, page = browser.request("/assistant/")

    assert status == 200
    assert 'id="composer"' in page


def test_one_rest_turn_runs_the_projects_own_tool(browser: Browser) -> None:
    status, _, body = browser.request(
        "/assistant/api/messages/",
        json.dumps({"message": "say hello"}).encode(),
        {
            "Content-Type": "application/json",
            "X-CSRFToken": browser.cookie("csrftoken"),
            "Referer": browser.base + "/assistant/",
        },
    )

    assert status == 201, body
    turn = json.loads(body)
    assert turn["assistant_message"]["text"] == "Hello, alice!"
    assert [(o["operation"], o["decision"]) for o in turn["outcomes"]] == [
        ("say_hello", "executed")
    ]


async def websocket_turn(host: str, session: str, text: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    async with connect(
        f"ws://{host}/ws/assistant/",
        origin=f"http://{host}",  # type: ignore[arg-type]
        additional_headers={"Cookie": f"sessionid={session}"},
        open_timeout=10,
    ) as websocket:
        await websocket.send(json.dumps({"type": "message", "text": text}))
        async with asyncio.timeout(20):
            while not events or events[-1]["type"] not in ("RUN_FINISHED", "RUN_ERROR"):
                events.append(json.loads(await websocket.recv()))
    return events


def test_one_websocket_turn_under_daphne(server: str, browser: Browser) -> None:
    events = asyncio.run(websocket_turn(server, browser.cookie("sessionid"), "say hello name=Bob"))

    assert events[-1]["type"] == "RUN_FINISHED"
    said = "".join(
        event["delta"]
        for event in events
        if event["type"] == "TEXT_MESSAGE_CONTENT" and event.get("role") != "user"
    )
    assert "Hello, Bob!" in said
