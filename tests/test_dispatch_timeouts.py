"""Per-tool timeouts: dispatch stops an overrunning tool, audits a timeout and tells the user."""

from __future__ import annotations

import time
from typing import Any

import pytest

from assistant.chat import arun_turn
from assistant.dispatch import adispatch, dispatch
from assistant.models import AuditEntry


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
