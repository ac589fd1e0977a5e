"""The MCP Inspector's CLI mode (from the npm registry, pinned in package.json) against a live server."""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

import pytest

from assistant.access import tokens
from assistant.models import AuditEntry
from tests.conftest import REQUIRE_SERVICES
from tests.mcp_clients import PATH
from tests.processes import ROOT

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

INSPECTOR = ROOT / "node_modules" / "@modelcontextprotocol" / "inspector"


@pytest.fixture
def inspector() -> Any:
    """``npx --no-install @modelcontextprotocol/inspector --cli``: the local, pinned install."""
    if not INSPECTOR.exists() or shutil.which("npx") is None:
        reason = "needs the MCP Inspector: npm ci (package.json pins it)"
        if REQUIRE_SERVICES:
            pytest.fail(f"ASSISTANT_REQUIRE_SERVICES=1: {reason}")
        pytest.skip(reason)

    def run(url: str, secret: str, *arguments: str) -> Any:
        command = ["npx", "--no-install", "@modelcontextprotocol/inspector", "--cli", url]
        command += ["--transport", "http", "--header", f"Authorization: Bearer {secret}"]
        finished = subprocess.run(
            [*command, *arguments],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert finished.returncode == 0, finished.stderr
        return json.loads(finished.stdout)

    return run


def test_the_inspector_lists_the_users_tools_and_calls_one(
    inspector: Any, asgi_live_server: str, reader: Any
) -> None:
    _, secret = tokens.issue(reader, name="inspector")
    url = asgi_live_server + PATH
    listed = inspector(url, secret, "--method", "tools/list")
    names = [tool["name"] for tool in listed["tools"]]
    assert "list_orders" in names
    assert "cancel_order" not in names
    called = inspector(url, secret, "--method", "tools/call", "--tool-name", "ping")
    assert called["content"][0]["text"] == "pong for reader"
    assert called["isError"] is False
    entry = AuditEntry.objects.get(operation="ping")
    assert entry.source == "mcp"
    assert entry.client.endswith("(inspector)")
