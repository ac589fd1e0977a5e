"""Per-tool timeouts: dispatch stops an overrunning tool, audits a timeout and tells the user."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from asgiref.sync import ThreadSensitiveContext, sync_to_async

from assistant.dispatch.calls import DispatchCancelled
from assistant.dispatch.door import adispatch, dispatch
from assistant.dispatch.execution import in_one_hop
from assistant.models import AuditEntry
from assistant.turns.runs import arun_turn
from tests.sockets import WAIT


def assert_timed_out(outcome: Any, elapsed: float) -> None:
    assert outcome.decision == "timeout"
    assert outcome.code == "timeout"
    assert outcome.status == 504
    assert outcome.text == f"{outcome.operation} took longer than 0.2 s and was stopped."
    assert elapsed < 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("operation", ["overrun", "overrun_sync"])
async def test_an_overrunning_tool_is_stopped_and_audited_timeout(
    diagnostician: Any, operation: str
) -> None:
    started = time.monotonic()
    outcome = await adispatch(operation, {"seconds": 2.0}, user=diagnostician)

    assert_timed_out(outcome, time.monotonic() - started)
    entry = await AuditEntry.objects.aget(pk=outcome.audit_id)
    assert entry.decision == AuditEntry.Decision.TIMEOUT
    assert entry.error == outcome.text


@pytest.mark.django_db
@pytest.mark.parametrize("operation", ["overrun", "overrun_sync"])
def test_an_overrunning_tool_is_stopped_from_sync_dispatch(
    diagnostician: Any, operation: str
) -> None:
    started = time.monotonic()
    outcome = dispatch(operation, {"seconds": 2.0}, user=diagnostician)

    assert_timed_out(outcome, time.monotonic() - started)
    assert AuditEntry.objects.get(pk=outcome.audit_id).decision == "timeout"


@pytest.mark.django_db
def test_a_tool_within_its_timeout_runs(diagnostician: Any) -> None:
    outcome = dispatch("overrun", {"seconds": 0.01}, user=diagnostician)

    assert outcome.decision == "executed"
    assert outcome.text == "finished"


@pytest.mark.django_db(transaction=True)
async def test_the_user_is_told_when_a_tool_timed_out(diagnostician: Any) -> None:
    started = time.monotonic()
    result = await arun_turn(diagnostician, "overrun")

    assert time.monotonic() - started < 1
    assert [o.decision for o in result.outcomes] == ["timeout"]
    assert "overrun took longer than 0.2 s and was stopped." in result.assistant_message.text


# -- a stop while the sync pipeline has its hop ----------------------------------------------


async def _attempt(work: Any) -> Any:
    """Run ``work`` as dispatch runs a sync pipeline; what it returned, or how it was stopped."""
    try:
        return await in_one_hop(work)
    except asyncio.CancelledError as stopped:
        return stopped


async def test_a_stop_while_the_pipeline_runs_waits_for_what_it_decided() -> None:
    began, release = threading.Event(), threading.Event()

    def work() -> str:
        began.set()
        release.wait(WAIT)
        return "audited outcome"

    attempt = asyncio.ensure_future(_attempt(work))
    assert await asyncio.to_thread(began.wait, WAIT)
    attempt.cancel()  # (a thread cannot be interrupted: the hop's result is waited for)
    await asyncio.sleep(0.05)
    release.set()

    stopped = await attempt
    assert isinstance(stopped, DispatchCancelled)
    assert stopped.outcome == "audited outcome"


async def test_a_stop_before_the_thread_took_the_pipeline_up_still_waits_for_its_outcome() -> None:
    # Every call that reaches dispatch is audited: one stopped while it waited for its thread
    # still runs (its handler sees the stop token) and ends with the outcome it decided.
    ran: list[str] = []
    release = threading.Event()
    lane = ThreadPoolExecutor(max_workers=1)
    try:
        async with ThreadSensitiveContext(executor=lane):
            busy = asyncio.ensure_future(sync_to_async(release.wait)(WAIT))  # the lane's thread
            attempt = asyncio.ensure_future(_attempt(lambda: ran.append("ran") or "outcome"))
            await asyncio.sleep(0.05)
            attempt.cancel()
            await asyncio.sleep(0.05)
            release.set()
            stopped = await attempt
            await busy
    finally:
        lane.shutdown()

    assert isinstance(stopped, DispatchCancelled)
    assert stopped.outcome == "outcome"
    assert ran == ["ran"]
