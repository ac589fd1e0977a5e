"""``manage.py assistant_call`` continues the trace its caller (a CI job, a cron wrapper) hands it
in ``TRACEPARENT`` / ``TRACESTATE``, and has exported its spans when it returns."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from tests.otlp_receiver import Receiver
from tests.telemetry.tracing import CALLER_SPAN, CALLER_TRACE, TRACEPARENT
from tests.telemetry.tracing import otlp_receiver as otlp_receiver  # the fixtures
from tests.telemetry.tracing import traced as traced

pytestmark = pytest.mark.django_db


def run(*args: str) -> None:
    call_command("assistant_call", *args, "--user", "plain", stdout=StringIO())


def test_a_dispatched_call_continues_the_callers_trace_from_the_environment(
    traced, otlp_receiver: Receiver, plain_user, monkeypatch
):
    monkeypatch.setenv("TRACEPARENT", TRACEPARENT)
    monkeypatch.setenv("TRACESTATE", "ci=build-42")

    run("ping")

    # exported when the command returned (a CLI process may exit right after)
    tool = otlp_receiver.one("execute_tool ping")
    assert (tool["trace_id"], tool["parent"]) == (CALLER_TRACE, CALLER_SPAN)
    assert tool["attributes"]["assistant.source"] == "cli"


def test_a_message_turn_continues_the_callers_trace_from_the_environment(
    traced, otlp_receiver: Receiver, plain_user, monkeypatch
):
    monkeypatch.setenv("TRACEPARENT", TRACEPARENT)

    run("--message", "ping")

    agent = otlp_receiver.one("invoke_agent assistant")
    assert (agent["trace_id"], agent["parent"]) == (CALLER_TRACE, CALLER_SPAN)
    assert agent["attributes"]["assistant.source"] == "cli"
    assert otlp_receiver.one("execute_tool ping")["parent"] == agent["span_id"]


def test_a_malformed_traceparent_is_ignored_and_the_call_starts_its_own_trace(
    traced, otlp_receiver: Receiver, plain_user, monkeypatch
):
    monkeypatch.setenv("TRACEPARENT", "00-not-a-trace-01")

    run("ping")

    tool = otlp_receiver.one("execute_tool ping")
    assert tool["parent"] == ""
    assert tool["trace_id"] not in {CALLER_TRACE, "0" * 32}
