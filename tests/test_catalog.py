"""The catalog offers exactly what dispatch would let the user call, on every surface."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient

from assistant.catalog import get_catalog, visible_tools
from assistant.dispatch import dispatch
from assistant.lifecycle import (
    ToolLifecycleState,
    bind_process_session,
    process_session,
    stop_process_session,
)
from assistant.models import AuditEntry
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


@pytest.mark.django_db
def test_without_a_server_process_a_process_toolset_is_offered_until_a_call_finds_it_down(
    diagnostician: Any,
) -> None:
    assert process_session() is None
    assert "outage_status" in {tool.operation for tool in visible_tools(diagnostician)}

    outcome = dispatch("outage_status", {}, user=diagnostician)

    assert outcome.decision == "unavailable"  # its own session tried, and it failed there
