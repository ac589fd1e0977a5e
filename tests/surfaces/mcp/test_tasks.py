"""MCP tasks (2025-11-25): a call that starts a job answers with a task backed by the job's row."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
import pytest
from asgiref.sync import async_to_sync, sync_to_async
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from assistant.access import tokens
from assistant.models import AuditEntry, Job
from tests.mcp_clients import (
    EXAMPLES,
    WireError,
    WireSession,
    json_values,
    mcp_client,
    server_processes,
)
from tests.race_jobs import workers as workers  # a fixture
from tests.testapp.models import Order

pytestmark = pytest.mark.django_db(transaction=True)

TASKS = {"tasks": {"list": {}, "cancel": {}}}  # what a client speaking tasks declares
AS_TASK = {"ttl": 60000}


async def issue(user: Any, **options: Any) -> str:
    return (await sync_to_async(tokens.issue)(user, name="laptop", **options))[1]


def a_job(user: Any, **fields: Any) -> Job:
    fields = {"operation": "start_job", "function": "tests.testapp.jobs.count_orders", **fields}
    return Job.objects.create(user=user, **fields)


async def test_the_server_offers_tasks_and_lists_its_background_tools_as_optional_tasks(
    asgi_live_server: str, diagnostician: Any
) -> None:
    async with WireSession(asgi_live_server, await issue(diagnostician), TASKS) as wire:
        listed = await wire.request("tools/list")
    tasks = wire.initialized["capabilities"]["tasks"]
    assert tasks == {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
    execution = {tool["name"]: tool.get("execution") for tool in listed["tools"]}
    assert execution["start_job"] == {"taskSupport": "optional"}
    assert execution["probe_state"] is None  # runs at once: never a task


async def test_a_call_as_a_task_answers_the_jobs_task_and_its_result_is_the_plain_calls(
    asgi_live_server: str, diagnostician: Any
) -> None:
    secret = await issue(diagnostician)
    arguments = {"kind": "count", "steps": 2}
    async with WireSession(asgi_live_server, secret, TASKS) as wire:
        created = await wire.request(
            "tools/call", {"name": "start_job", "arguments": arguments, "task": AS_TASK}
        )
        task_id = created["task"]["taskId"]
        got = await wire.request("tasks/get", {"taskId": task_id})
        result = await wire.request("tasks/result", {"taskId": task_id})
    async with mcp_client(asgi_live_server, secret) as client:
        plain = await client.call_tool("start_job", arguments)
    job = await sync_to_async(Job.objects.get)(pk=task_id)
    assert job.user_id == diagnostician.pk
    assert set(created["task"]) >= {"status", "createdAt", "lastUpdatedAt", "ttl"}
    assert created["task"]["ttl"] is None  # job rows are kept: unlimited
    assert created["_meta"]["io.modelcontextprotocol/model-immediate-response"].startswith(
        "started count job"
    )
    assert got["status"] == "completed"  # the test backend runs jobs at once
    assert result["_meta"] == {"io.modelcontextprotocol/related-task": {"taskId": task_id}}
    assert (
        result["content"]
        == [{"type": "text", "text": "0 orders"}]
        == plain.model_dump(mode="json", exclude_none=True)["content"]
    )
    assert result["structuredContent"]["status"] == "succeeded"
    assert result["isError"] is False
    decisions = await sync_to_async(list)(
        AuditEntry.objects.filter(operation="start_job").values_list("decision", "source")
    )
    assert decisions == [("executed", "mcp"), ("executed", "mcp")]


async def test_a_tool_that_never_starts_a_job_is_refused_as_a_task(
    asgi_live_server: str, diagnostician: Any
) -> None:
    async with WireSession(asgi_live_server, await issue(diagnostician), TASKS) as wire:
        with pytest.raises(WireError) as refused:
            await wire.request("tools/call", {"name": "probe_state", "task": AS_TASK})
    assert refused.value.code == -32601  # as the spec says for taskSupport "forbidden"
    assert refused.value.data == {"code": "task_not_supported"}


async def test_someone_elses_task_answers_exactly_as_an_unknown_one(
    asgi_live_server: str, diagnostician: Any, reader: Any
) -> None:
    theirs = await sync_to_async(a_job)(diagnostician)
    answers = []
    async with WireSession(asgi_live_server, await issue(reader), TASKS) as wire:
        for task_id in (str(theirs.pk), str(uuid.uuid4()), "not-an-id"):
            for method in ("tasks/get", "tasks/result", "tasks/cancel"):
                with pytest.raises(WireError) as refused:
                    await wire.request(method, {"taskId": task_id})
                answers.append((refused.value.code, refused.value.args, refused.value.data))
        listed = await wire.request("tasks/list")
    assert all(answer == answers[0] for answer in answers), answers
    assert answers[0][2] == {"code": "task_not_found"}
    assert listed == {"tasks": []}
    assert (await sync_to_async(Job.objects.get)(pk=theirs.pk)).status == "queued"


async def test_a_tokens_ceiling_hides_the_tasks_of_tools_beyond_it(
    asgi_live_server: str, diagnostician: Any
) -> None:
    job = await sync_to_async(a_job)(diagnostician)
    narrow = await issue(diagnostician, operations=["probe_state"])
    async with WireSession(asgi_live_server, narrow, TASKS) as wire:
        listed = await wire.request("tasks/list")
        with pytest.raises(WireError) as refused:
            await wire.request("tasks/get", {"taskId": str(job.pk)})
    assert listed == {"tasks": []}
    assert refused.value.data == {"code": "task_not_found"}


async def test_the_task_list_pages_newest_first_with_opaque_cursors(
    asgi_live_server: str, diagnostician: Any
) -> None:
    made = [await sync_to_async(a_job)(diagnostician) for _ in range(53)]
    async with WireSession(asgi_live_server, await issue(diagnostician), TASKS) as wire:
        first = await wire.request("tasks/list")
        second = await wire.request("tasks/list", {"cursor": first["nextCursor"]})
        with pytest.raises(WireError) as refused:
            await wire.request("tasks/list", {"cursor": "garbage"})
    listed = [task["taskId"] for task in first["tasks"] + second["tasks"]]
    assert len(first["tasks"]) == 50
    assert "nextCursor" not in second
    assert listed == [str(job.pk) for job in reversed(made)]
    assert (refused.value.code, refused.value.data) == (-32602, {"code": "invalid_cursor"})


async def test_cancelling_a_task_stops_its_job_audited_as_the_rest_api_does(
    asgi_live_server: str, diagnostician: Any
) -> None:
    queued = await sync_to_async(a_job)(diagnostician)
    running = await sync_to_async(a_job)(diagnostician, status="running")
    async with WireSession(asgi_live_server, await issue(diagnostician), TASKS) as wire:
        stopped = [
            await wire.request("tasks/cancel", {"taskId": str(job.pk)}) for job in (queued, running)
        ]
        got = await wire.request("tasks/get", {"taskId": str(running.pk)})
        result = await wire.request("tasks/result", {"taskId": str(running.pk)})
        await sync_to_async(running.finish)("succeeded", result="finished anyway")
        finished = await wire.request("tasks/get", {"taskId": str(running.pk)})
        late = await wire.request("tasks/result", {"taskId": str(running.pk)})
        with pytest.raises(WireError) as again:
            await wire.request("tasks/cancel", {"taskId": str(queued.pk)})
    assert [task["status"] for task in stopped] == ["cancelled", "cancelled"]
    assert got["status"] == "cancelled"  # its worker has not stopped yet: the task stays so
    assert result["isError"] is True
    assert result["structuredContent"]["status"] == "cancelled"
    # its handler finished after all: the task stays cancelled, as the spec wants
    assert (finished["status"], late["isError"]) == ("cancelled", True)
    assert late["structuredContent"]["status"] == "cancelled"
    assert (again.value.code, again.value.data) == (-32602, {"code": "task_finished"})
    await sync_to_async(queued.refresh_from_db)()
    await sync_to_async(running.refresh_from_db)()
    assert (queued.status, running.cancel_requested) == ("cancelled", True)
    audited = await sync_to_async(list)(
        AuditEntry.objects.filter(operation="cancel_job").values_list("decision", "source")
    )
    assert audited == [("executed", "mcp"), ("executed", "mcp")]


async def test_a_result_waits_within_mcp_job_wait_then_says_the_task_still_works(
    asgi_live_server: str, diagnostician: Any, settings: Any
) -> None:
    settings.ASSISTANT = {**settings.ASSISTANT, "MCP_JOB_WAIT": 0.5}
    running = await sync_to_async(a_job)(diagnostician, status="running", progress=40)
    await sync_to_async(Job.objects.filter(pk=running.pk).update)(progress_message="step 2 of 5")
    async with WireSession(asgi_live_server, await issue(diagnostician), TASKS) as wire:
        got = await wire.request("tasks/get", {"taskId": str(running.pk)})
        with pytest.raises(WireError) as waited:
            await wire.request("tasks/result", {"taskId": str(running.pk)})
    assert (got["status"], got["statusMessage"], got["pollInterval"]) == (
        "working",
        "40%: step 2 of 5",
        1000,
    )
    assert (waited.value.code, waited.value.data) == (-32000, {"code": "task_working"})


async def test_a_result_awaited_with_a_progress_token_reports_the_jobs_progress_meanwhile(
    asgi_live_server: str, diagnostician: Any
) -> None:
    job = await sync_to_async(a_job)(diagnostician, status="running", progress=10)

    async def work() -> None:
        await asyncio.sleep(0.6)
        await sync_to_async(job.report)(60, "half way")
        await asyncio.sleep(0.6)
        await sync_to_async(job.finish)("succeeded", result="done")

    asked = {"taskId": str(job.pk), "_meta": {"progressToken": "p1"}}
    async with WireSession(asgi_live_server, await issue(diagnostician), TASKS) as wire:
        result, _ = await asyncio.gather(wire.request("tasks/result", asked), work())
    progress = [n["params"] for n in wire.notifications if n["method"] == "notifications/progress"]
    assert [(p["progress"], p.get("message")) for p in progress] == [
        (10.0, None),
        (60.0, "half way"),
    ]
    related = {"io.modelcontextprotocol/related-task": {"taskId": str(job.pk)}}
    assert all(p["progressToken"] == "p1" and p["_meta"] == related for p in progress)
    assert result["content"][0]["text"] == "done"


async def test_the_stateless_revision_has_none_of_these_tasks_methods(
    asgi_live_server: str, diagnostician: Any
) -> None:
    """2026-07-28 has the tasks extension instead (test_tasks_extension): no ``tasks/result``, no
    ``tasks/list``, and its ``tasks/get`` wants the extension declared."""
    job = await sync_to_async(a_job)(diagnostician)
    async with mcp_client(asgi_live_server, await issue(diagnostician), "2026-07-28") as client:
        listed = await client.list_tools()
        with pytest.raises(Exception, match="Method not found"):
            await client.session.send_request(
                types.GetTaskPayloadRequest(
                    params=types.GetTaskPayloadRequestParams(task_id=str(job.pk))
                ),
                types.CallToolResult,
            )
        with pytest.raises(Exception, match="did not declare required extension"):
            await client.session.send_request(
                types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=str(job.pk))),
                types.GetTaskResult,
            )
    assert all(tool.execution is None for tool in listed.tools)


async def answer(base_url: str, secret: str, method: str, params: Any) -> httpx2.Response:
    body = json.dumps({"jsonrpc": "2.0", "id": 99, "method": method, "params": params})
    async with WireSession(base_url, secret, TASKS) as wire:
        headers = {**wire.headers(), "Content-Type": "application/json"}
        return await wire.http.post(wire.url, content=body, headers=headers)


@pytest.mark.slow  # a session of its own per example
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    method=st.sampled_from(["tasks/get", "tasks/result", "tasks/list", "tasks/cancel"]),
    params=st.dictionaries(st.sampled_from(["taskId", "cursor", "_meta", "x"]), json_values)
    | json_values,
)
def test_any_tasks_request_is_answered_never_with_an_internal_error(
    asgi_live_server: str, fuzz_secret: str, method: str, params: Any
) -> None:
    response = async_to_sync(answer)(asgi_live_server, fuzz_secret, method, params)
    assert response.status_code < 500, response.text
    assert '"code":-32603' not in response.text.replace(" ", ""), response.text


@pytest.fixture
def fuzz_secret(diagnostician: Any) -> str:
    a_job(diagnostician, status="running")  # something to find, for the ids that are real
    return tokens.issue(diagnostician, name="fuzz")[1]


# -- a task outlives the process that started it --------------------------------------------------


@pytest.mark.slow
async def test_a_task_started_on_one_process_is_followed_and_collected_on_another(
    tmp_path: Path, diagnostician: Any, workers: Any
) -> None:
    secret = await issue(diagnostician)
    await sync_to_async(workers.start)()
    arguments = {"kind": "until", "seconds": 60}  # until the test creates an order named "go"
    with server_processes(["daphne"], tmp_path, settings="tests.worker_settings") as [second]:
        with server_processes(["uvicorn"], tmp_path, settings="tests.worker_settings") as [first]:
            async with WireSession(first, secret, TASKS) as wire:
                created = await wire.request(
                    "tools/call", {"name": "start_job", "arguments": arguments, "task": AS_TASK}
                )
        task_id = created["task"]["taskId"]  # the first process is gone now
        async with mcp_client(second, secret) as client:  # the official client, as far as it can
            seen = []
            for _ in range(100):
                got = await client.session.send_request(
                    types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id)),
                    types.GetTaskResult,
                )
                seen.append((got.status, got.status_message))
                if got.status_message == "10%: waiting for go":
                    break
                await asyncio.sleep(0.1)
            await sync_to_async(Order.objects.create)(reference="go")
            result = await client.session.send_request(
                types.GetTaskPayloadRequest(
                    params=types.GetTaskPayloadRequestParams(task_id=task_id)
                ),
                types.CallToolResult,
            )
            listed = await client.session.send_request(
                types.ListTasksRequest(), types.ListTasksResult
            )
    assert created["task"]["status"] == "working"
    assert seen[-1] == ("working", "10%: waiting for go"), seen  # the worker's, read elsewhere
    assert result.content[0].text == "went"
    assert result.structured_content["status"] == "succeeded"
    assert [task.task_id for task in listed.tasks] == [task_id]
    assert listed.tasks[0].status == "completed"


async def test_a_task_call_to_a_tool_the_caller_does_not_see_answers_as_an_unknown_one(
    asgi_live_server: str, reader: Any
) -> None:
    """Only a tool the caller sees is told apart as "not a task": a hidden one answers exactly
    as a name that does not exist, so the task route is no oracle for what exists."""
    answers = []
    async with WireSession(asgi_live_server, await issue(reader), TASKS) as wire:
        for name in (
            "start_job",
            "probe_state",
            "no_such_tool",
        ):  # hidden: a background tool, another
            result = await wire.request("tools/call", {"name": name, "task": AS_TASK})
            answers.append(json.loads(json.dumps(result).replace(name, "NAME")))
    assert answers[0] == answers[1] == answers[2]
    assert answers[0]["isError"] is True
