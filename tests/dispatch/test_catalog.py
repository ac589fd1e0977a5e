"""The catalog offers exactly what dispatch would let the user call, on every surface."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from io import StringIO
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import AsyncClient, Client

from assistant.core.lifecycle import (
    ToolLifecycleState,
    bind_process_session,
    process_session,
    stop_process_session,
)
from assistant.dispatch.catalog import get_catalog, visible_tools
from assistant.dispatch.door import dispatch
from assistant.models import AuditEntry
from tests.lifecycles import log as log  # a fixture
from tests.testapp.assistant_tools import Outage


@pytest.fixture
def diagnostician(make_user: Any) -> Any:
    return make_user("diagnostician", "assistant.diagnostics_run")


@pytest.fixture
async def failed_outage() -> AsyncIterator[None]:
    """This loop serves as the process's server loop, and its Outage toolset failed to start."""
    process = bind_process_session()
    await process.start(Outage)
    assert process.state(Outage) is ToolLifecycleState.FAILED
    try:
        yield
    finally:
        await stop_process_session()


def operations(specs: list[dict[str, Any]]) -> set[str]:
    return {spec["function"]["name"] for spec in specs}


@pytest.mark.django_db(transaction=True)
async def test_a_failed_process_toolset_leaves_the_catalog_of_a_thread_without_a_loop(
    failed_outage: None, diagnostician: Any
) -> None:
    # a sync view of an ASGI server runs in a thread with no loop of its own
    in_a_thread = sync_to_async(visible_tools, thread_sensitive=False)
    offered = {tool.operation for tool in await in_a_thread(diagnostician)}
    catalog = operations(await sync_to_async(get_catalog, thread_sensitive=False)(diagnostician))
    outcome = await sync_to_async(dispatch)("outage_status", {}, user=diagnostician)

    assert outcome.decision == "unavailable"
    assert "outage_status" not in offered
    assert "outage_status" not in catalog
    assert "probe_state" in offered  # a session toolset, started on first use, stays offered


@pytest.mark.django_db(transaction=True)
async def test_the_rest_catalog_does_not_list_what_rest_dispatch_refuses_as_unavailable(
    failed_outage: None, diagnostician: Any
) -> None:
    client = AsyncClient()
    await sync_to_async(client.force_login)(diagnostician)

    listed = await client.get("/assistant/api/tools/")
    openai = await client.get("/assistant/api/tools/", {"style": "openai"})
    called = await client.post(
        "/assistant/api/dispatch/",
        {"operation": "outage_status", "entities": {}},
        content_type="application/json",
    )

    assert listed.status_code == 200
    assert openai.status_code == 200
    assert "outage_status" not in {tool["operation"] for tool in listed.json()["tools"]}
    assert "outage_status" not in operations(openai.json()["tools"])
    assert "probe_state" in {tool["operation"] for tool in listed.json()["tools"]}
    assert called.status_code == 503, called.json()
    assert called.json()["code"] == "unavailable"
    audited = await AuditEntry.objects.filter(operation="outage_status").alatest("pk")
    assert audited.decision == "unavailable"


# -- no server loop (WSGI, a management command, Django's test client): the same one answer ----


def rest_operations(client: Client, style: str = "inventory") -> set[str]:
    listed = client.get("/assistant/api/tools/", {"style": style})
    assert listed.status_code == 200
    if style == "openai":
        return operations(listed.json()["tools"])
    return {tool["operation"] for tool in listed.json()["tools"]}


@pytest.mark.django_db
def test_without_a_server_loop_the_rest_catalog_omits_what_rest_dispatch_refuses(
    diagnostician: Any,
) -> None:
    assert process_session() is None
    client = Client()
    client.force_login(diagnostician)

    listed, openai = rest_operations(client), rest_operations(client, "openai")
    refused = {
        operation: client.post(
            "/assistant/api/dispatch/",
            {"operation": operation, "entities": {}},
            content_type="application/json",
        )
        for operation in ("broken_tool", "outage_status")
    }

    assert not {"broken_tool", "outage_status"} & (listed | openai)
    assert {"probe_state", "sluggish_tool"} <= listed & openai  # their toolsets start
    for operation, response in refused.items():
        assert response.status_code == 503, operation
        assert response.json()["code"] == "unavailable"
    assert list(
        AuditEntry.objects.filter(operation__in=refused)
        .order_by("pk")
        .values_list("operation", "decision")
    ) == [("broken_tool", "unavailable"), ("outage_status", "unavailable")]


@pytest.mark.django_db
def test_without_a_server_loop_the_catalog_leaves_no_toolset_running(
    diagnostician: Any, log: list[str]
) -> None:
    offered = {tool.operation for tool in visible_tools(diagnostician)}

    assert "probe_state" in offered
    # started to answer, as a call would, then stopped (its background task ended with it)
    assert log == ["probe:start", "probe:stop", "probe:background-exit"]


@pytest.mark.django_db
def test_the_inventory_command_says_a_failed_toolsets_tools_are_hidden_and_why(
    diagnostician: Any,
) -> None:
    out = StringIO()
    call_command("assistant_tools", "--json", "--as", "diagnostician", stdout=out)
    rows = {row["operation"]: row for row in json.loads(out.getvalue())}

    assert rows["broken_tool"]["visible"] is False
    assert rows["broken_tool"]["hidden_because"] == [
        "its toolset broken failed to start (ConnectionError: the backend is down)"
    ]
    assert rows["outage_status"]["hidden_because"] == [
        "its toolset outage failed to start (ConnectionError: the service is down)"
    ]
    assert rows["probe_state"]["visible"] is True
    with pytest.raises(CommandError, match=r"^unavailable: broken_tool is not available right now"):
        call_command("assistant_call", "broken_tool", "--user", "diagnostician", stdout=StringIO())
