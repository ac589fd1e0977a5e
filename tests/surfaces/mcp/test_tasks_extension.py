"""MCP tasks (2026-07-28 extension ``io.modelcontextprotocol/tasks``): a background tool's job
is the task a declaring client polls with ``tasks/get``, from any server process."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import httpx2
import pytest
from asgiref.sync import sync_to_async
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from assistant.models import AuditEntry, Job
from tests.mcp_clients import (
    DECLARES_TASKS,
    EXAMPLES,
    MODERN,
    PATH,
    TASKS_EXTENSION,
    ModernWire,
    TasksExtension,
    WireError,
    WireSession,
    envelope,
    issue,
    json_values,
    mcp_client,
    server_processes,
)
from tests.race_jobs import workers as workers  # a fixture
from tests.surfaces.mcp.test_tasks import a_job
from tests.surfaces.mcp.test_tasks import fuzz_secret as fuzz_secret  # a fixture
from tests.testapp.models import Order

pytestmark = pytest.mark.django_db(transaction=True)

REQUIRED = {"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}}
TASK_FIELDS = {"taskId", "status", "statusMessage", "createdAt", "lastUpdatedAt", "ttlMs"}


def audited(operation: str) -> list[tuple[str, str]]:
    """The audit's (decision, source) for this operation, oldest first."""
    return list(AuditEntry.objects.filter(operation=operation).values_list("decision", "source"))


def without_meta(result: dict[str, Any]) -> dict[str, Any]:
    """A result without its ``_meta`` (where every 2026-07-28 result names the server)."""
    return {key: value for key, value in result.items() if key != "_meta"}


async def test_the_server_discovers_the_extension_to_2026_clients_only(
    asgi_live_server: str, diagnostician: Any
) -> None:
    secret = await issue(diagnostician)
    async with ModernWire(asgi_live_server, secret, {}) as wire:
        discovered = await wire.request("server/discover")
    async with WireSession(asgi_live_server, secret, {}) as legacy:
        pass
    assert discovered["capabilities"]["extensions"] == {TASKS_EXTENSION: {}}
    assert "extensions" not in legacy.initialized["capabilities"]  # 2025-11-25 has core tasks


async def test_a_declaring_client_gets_a_task_and_polls_it_to_the_plain_calls_result(
    asgi_live_server: str, diagnostician: Any
) -> None:
    secret = await issue(diagnostician)
    call = {"name": "start_job", "arguments": {"kind": "count", "steps": 2}}
    async with ModernWire(asgi_live_server, secret, DECLARES_TASKS) as wire:
        created = await wire.request("tools/call", call)
        got = await wire.request("tasks/get", {"taskId": created["taskId"]})
    async with ModernWire(asgi_live_server, secret, {}) as plain_wire:
        plain = await plain_wire.request("tools/call", call)
    job = await sync_to_async(Job.objects.get)(pk=created["taskId"])
    assert job.user_id == diagnostician.pk
    assert created["resultType"] == "task"
    assert set(created) - {"_meta", "resultType", "pollIntervalMs"} == TASK_FIELDS
    assert created["ttlMs"] is None  # job rows are kept: unlimited
    assert got["resultType"] == "complete"
    assert got["status"] == "completed"  # the test backend runs jobs at once
    assert set(got) - {"_meta", "resultType", "result"} == TASK_FIELDS
    assert (plain["resultType"], "taskId" in plain) == ("complete", False)
    assert got["result"]["content"] == [{"type": "text", "text": "0 orders"}] == plain["content"]
    assert got["result"]["isError"] is False
    assert got["result"]["structuredContent"]["status"] == "succeeded"
    assert await sync_to_async(audited)("start_job") == [("executed", "mcp")] * 2


async def test_the_official_client_with_a_tasks_extension_follows_the_task_to_its_result(
    asgi_live_server: str, diagnostician: Any
) -> None:
    tasks = TasksExtension()
    secret = await issue(diagnostician)
    async with mcp_client(asgi_live_server, secret, "2026-07-28", extensions=[tasks]) as client:
        result = await client.call_tool("start_job", {"kind": "count", "steps": 2})
        probed = await client.call_tool("probe_state", {})
    assert result.content[0].text == "0 orders"
    assert result.structured_content["status"] == "succeeded"
    assert [created.task_id for created in tasks.created] == [tasks.polled[-1]["taskId"]]
    assert tasks.polled[-1]["status"] == "completed"
    assert probed.is_error is False  # runs at once: answered as it always was, never a task
    assert len(tasks.created) == 1


async def test_a_job_that_failed_is_a_completed_task_whose_result_is_a_tool_error(
    asgi_live_server: str, diagnostician: Any
) -> None:
    call = {"name": "start_job", "arguments": {"kind": "explode"}}
    async with ModernWire(asgi_live_server, await issue(diagnostician), DECLARES_TASKS) as wire:
        created = await wire.request("tools/call", call)
        got = await wire.request("tasks/get", {"taskId": created["taskId"]})
    # "failed" is for JSON-RPC errors only; a tool that ended in error completed, with isError
    assert (got["status"], "error" in got) == ("completed", False)
    assert got["result"]["isError"] is True
    assert "the job blew up" in got["result"]["content"][0]["text"]
    assert got["result"]["structuredContent"]["status"] == "failed"
    assert "the job blew up" in got["statusMessage"]


async def test_a_working_task_reports_its_jobs_progress_and_when_to_poll_again(
    asgi_live_server: str, diagnostician: Any
) -> None:
    running = await sync_to_async(a_job)(diagnostician, status="running", progress=40)
    await sync_to_async(Job.objects.filter(pk=running.pk).update)(progress_message="step 2 of 5")
    async with ModernWire(asgi_live_server, await issue(diagnostician), DECLARES_TASKS) as wire:
        got = await wire.request("tasks/get", {"taskId": str(running.pk)})
    assert without_meta(got) == {
        "resultType": "complete",
        "taskId": str(running.pk),
        "status": "working",
        "statusMessage": "40%: step 2 of 5",
        "createdAt": running.created_at.isoformat(),
        "lastUpdatedAt": got["lastUpdatedAt"],
        "ttlMs": None,
        "pollIntervalMs": 1000,
    }


async def test_cancelling_a_task_is_acknowledged_and_stops_its_job_audited(
    asgi_live_server: str, diagnostician: Any
) -> None:
    queued = await sync_to_async(a_job)(diagnostician)
    running = await sync_to_async(a_job)(diagnostician, status="running")
    async with ModernWire(asgi_live_server, await issue(diagnostician), DECLARES_TASKS) as wire:
        acks = [
            await wire.request("tasks/cancel", {"taskId": str(job.pk)}) for job in (queued, running)
        ]
        got = [
            await wire.request("tasks/get", {"taskId": str(job.pk)}) for job in (queued, running)
        ]
        again = await wire.request("tasks/cancel", {"taskId": str(queued.pk)})
    assert [without_meta(ack) for ack in [*acks, again]] == [{"resultType": "complete"}] * 3
    assert [task["status"] for task in got] == ["cancelled", "cancelled"]
    await sync_to_async(queued.refresh_from_db)()
    await sync_to_async(running.refresh_from_db)()
    assert (queued.status, running.cancel_requested) == ("cancelled", True)
    # the second ask stopped nothing: no third entry
    assert await sync_to_async(audited)("cancel_job") == [("executed", "mcp")] * 2


async def test_an_update_is_acknowledged_and_answers_to_no_key_are_ignored(
    asgi_live_server: str, diagnostician: Any
) -> None:
    running = await sync_to_async(a_job)(diagnostician, status="running")
    update = {
        "taskId": str(running.pk),
        "inputResponses": {"name": {"action": "accept", "content": {"name": "Luca"}}},
    }
    async with ModernWire(asgi_live_server, await issue(diagnostician), DECLARES_TASKS) as wire:
        ack = await wire.request("tasks/update", update)
        got = await wire.request("tasks/get", {"taskId": str(running.pk)})
        with pytest.raises(WireError) as unknown:
            await wire.request("tasks/update", {**update, "taskId": str(uuid.uuid4())})
    assert without_meta(ack) == {"resultType": "complete"}
    assert got["status"] == "working"
    assert (unknown.value.code, unknown.value.data) == (-32602, {"code": "task_not_found"})


async def test_a_client_that_does_not_declare_it_gets_plain_results_and_no_tasks_methods(
    asgi_live_server: str, diagnostician: Any
) -> None:
    mine = await sync_to_async(a_job)(diagnostician, status="running")
    call = {"name": "start_job", "arguments": {"kind": "count", "steps": 2}}
    refusals = []
    async with ModernWire(asgi_live_server, await issue(diagnostician), {}) as wire:
        called = await wire.request("tools/call", call)
        for method, params in [
            ("tasks/get", {"taskId": str(mine.pk)}),
            ("tasks/get", {"taskId": "not-an-id"}),
            ("tasks/update", {"taskId": str(mine.pk), "inputResponses": {}}),
            ("tasks/cancel", {"taskId": str(mine.pk)}),
        ]:
            with pytest.raises(WireError) as refused:
                await wire.request(method, params)
            refusals.append((refused.value.code, refused.value.data))
    assert (called["resultType"], called["content"][0]["text"]) == ("complete", "0 orders")
    assert refusals == [(-32021, REQUIRED)] * 4
    assert wire.statuses[1:] == [400] * 4
    assert (await sync_to_async(Job.objects.get)(pk=mine.pk)).cancel_requested is False


async def test_someone_elses_task_answers_exactly_as_an_unknown_or_malformed_one(
    asgi_live_server: str, diagnostician: Any, reader: Any
) -> None:
    theirs = await sync_to_async(a_job)(diagnostician)
    answers = []
    async with ModernWire(asgi_live_server, await issue(reader), DECLARES_TASKS) as wire:
        for task_id in (str(theirs.pk), str(uuid.uuid4()), "not-an-id"):
            for method, extra in [
                ("tasks/get", {}),
                ("tasks/update", {"inputResponses": {}}),
                ("tasks/cancel", {}),
            ]:
                with pytest.raises(WireError) as refused:
                    await wire.request(method, {"taskId": task_id, **extra})
                answers.append((refused.value.code, refused.value.args, refused.value.data))
    assert all(answer == answers[0] for answer in answers), answers
    assert (answers[0][0], answers[0][2]) == (-32602, {"code": "task_not_found"})
    assert (await sync_to_async(Job.objects.get)(pk=theirs.pk)).status == "queued"
    assert not await sync_to_async(AuditEntry.objects.filter(decision="executed").exists)()


async def test_a_tokens_ceiling_hides_the_tasks_of_tools_beyond_it(
    asgi_live_server: str, diagnostician: Any
) -> None:
    job = await sync_to_async(a_job)(diagnostician)
    narrow = await issue(diagnostician, operations=["probe_state"])
    async with ModernWire(asgi_live_server, narrow, DECLARES_TASKS) as wire:
        with pytest.raises(WireError) as refused:
            await wire.request("tasks/get", {"taskId": str(job.pk)})
    assert refused.value.data == {"code": "task_not_found"}


async def test_the_extension_has_no_result_or_list_methods(
    asgi_live_server: str, diagnostician: Any
) -> None:
    job = await sync_to_async(a_job)(diagnostician)
    async with ModernWire(asgi_live_server, await issue(diagnostician), DECLARES_TASKS) as wire:
        for method in ("tasks/result", "tasks/list"):
            with pytest.raises(WireError) as refused:
                await wire.request(method, {"taskId": str(job.pk)})
            assert refused.value.code == -32601, method


@pytest.mark.slow
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    method=st.sampled_from(["tasks/get", "tasks/update", "tasks/cancel"]),
    params=st.dictionaries(st.sampled_from(["taskId", "inputResponses", "x"]), json_values),
    capabilities=st.sampled_from([{}, DECLARES_TASKS]),
)
def test_any_extension_request_is_answered_never_with_an_internal_error(
    asgi_live_server: str, fuzz_secret: str, method: str, params: Any, capabilities: Any
) -> None:
    body = json.dumps(envelope(method, params, capabilities))
    headers = {**MODERN, "MCP-Method": method, "Authorization": f"Bearer {fuzz_secret}"}
    response = httpx2.post(asgi_live_server + PATH, content=body, headers=headers, timeout=30)
    assert response.status_code < 500, response.text
    assert '"code":-32603' not in response.text.replace(" ", ""), response.text


# -- a task outlives the process that started it --------------------------------------------------


@pytest.mark.slow
async def test_a_task_started_on_one_process_is_polled_to_its_result_on_another(
    tmp_path: Path, diagnostician: Any, workers: Any
) -> None:
    secret = await issue(diagnostician)
    await sync_to_async(workers.start)()
    call = {"name": "start_job", "arguments": {"kind": "until", "seconds": 60}}
    with server_processes(["daphne"], tmp_path, settings="tests.worker_settings") as [second]:
        with server_processes(["uvicorn"], tmp_path, settings="tests.worker_settings") as [first]:
            async with ModernWire(first, secret, DECLARES_TASKS) as wire:
                created = await wire.request("tools/call", call)
        task_id = created["taskId"]  # the first process is gone now
        async with ModernWire(second, secret, DECLARES_TASKS) as wire:
            seen = []
            for _ in range(100):
                got = await wire.request("tasks/get", {"taskId": task_id})
                seen.append((got["status"], got["statusMessage"]))
                if got["status"] != "working" or got["statusMessage"] == "10%: waiting for go":
                    break
                await asyncio.sleep(0.1)
            await sync_to_async(Order.objects.create)(reference="go")
            for _ in range(100):
                done = await wire.request("tasks/get", {"taskId": task_id})
                if done["status"] != "working":
                    break
                await asyncio.sleep(0.1)
    assert (created["resultType"], created["status"]) == ("task", "working")
    assert seen[-1] == ("working", "10%: waiting for go"), seen  # the worker's, read elsewhere
    assert done["status"] == "completed"
    assert done["result"]["content"] == [{"type": "text", "text": "went"}]
