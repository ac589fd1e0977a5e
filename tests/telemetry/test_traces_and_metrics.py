"""OpenTelemetry: every turn as GenAI spans and metrics, exported over OTLP/HTTP to a real
receiver on 127.0.0.1 (``tests/otlp_receiver.py``), with the SDK and its exporter as shipped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from django.core.checks import run_checks
from rest_framework.test import APIClient

from assistant import telemetry
from assistant.access import tokens
from assistant.models import AuditEntry, PendingAction
from assistant.turns.runs import run_turn
from tests import sockets
from tests.openai_peer import USAGE, call, text, tool_calls
from tests.openai_peer import openai_peer as openai_peer  # the fixtures
from tests.openai_peer import use_llm as use_llm
from tests.otlp_receiver import Receiver
from tests.telemetry.tracing import (
    CALLER_SPAN,
    CALLER_TRACE,
    CLIENT,
    INTERNAL,
    SERVER,
    TRACEPARENT,
    children_of,
    mcp_tool_call,
)
from tests.telemetry.tracing import otlp_receiver as otlp_receiver  # the fixtures
from tests.telemetry.tracing import traced as traced

SECRET = "hunter2-correct-horse-battery"
EXPORTER_THREADS = ("OtelBatchSpanRecordProcessor", "OtelPeriodicExportingMetricReader")

pytestmark = pytest.mark.django_db


@pytest.fixture
def keeper(make_user: Any) -> Any:
    return make_user("keeper", "assistant.vault_write")


def post_message(user: Any, message: str, traceparent: str = TRACEPARENT) -> Any:
    """A REST turn, sent by a caller whose trace is ``traceparent``."""
    client = APIClient()
    client.force_authenticate(user)
    return client.post(
        "/assistant/api/messages/",
        {"message": message},
        format="json",
        headers={"traceparent": traceparent},
    )


def no_secret_anywhere(receiver: Receiver) -> None:
    """The secret is in no exported attribute, event, resource or name (as text, anywhere)."""
    assert receiver.spans
    dumped = json.dumps([receiver.spans, receiver.metrics], default=str)
    assert SECRET not in dumped
    assert "correct-horse" not in dumped


# -- a turn --------------------------------------------------------------------------------------


def test_a_turn_with_a_tool_call_is_one_trace_of_agent_chat_and_tool_spans(traced, use_llm, keeper):
    peer = use_llm()
    peer.script(
        tool_calls(call("store_secret", {"label": "db", "secret": SECRET}, id="call_vault_1")),
        text("Stored."),
    )

    turn = run_turn(keeper, f"store secret db {SECRET}")

    receiver = traced()
    agent = receiver.one("invoke_agent assistant")
    assert agent["kind"] == INTERNAL
    assert (
        agent["attributes"].items()
        >= {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "assistant",
            "gen_ai.provider.name": "openai_compatible",  # (a model server on 127.0.0.1)
            "gen_ai.conversation.id": str(turn.conversation.pk),
            "gen_ai.response.model": "test-model",
            "gen_ai.usage.input_tokens": USAGE["prompt_tokens"] * 2,
            "gen_ai.usage.output_tokens": USAGE["completion_tokens"] * 2,
            "assistant.turn.status": "complete",
            "assistant.source": "rest",
        }.items()
    )
    assert children_of(receiver, agent) == [
        "chat test-model",
        "chat test-model",
        "execute_tool store_secret",
    ]
    first, second = sorted(receiver.named("chat test-model"), key=lambda span: span["start"])
    assert first["kind"] == CLIENT
    assert (
        first["attributes"].items()
        >= {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "openai_compatible",
            "gen_ai.request.model": "test-model",
            "gen_ai.response.model": "test-model",
            "gen_ai.usage.input_tokens": USAGE["prompt_tokens"],
            "gen_ai.usage.output_tokens": USAGE["completion_tokens"],
            "gen_ai.response.finish_reasons": ["tool_calls"],
            "server.address": "127.0.0.1",
        }.items()
    )
    assert second["attributes"]["gen_ai.response.finish_reasons"] == ["stop"]

    tool = receiver.one("execute_tool store_secret")
    entry = AuditEntry.objects.get(operation="store_secret")
    assert tool["kind"] == INTERNAL
    assert (
        tool["attributes"].items()
        >= {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "store_secret",
            "gen_ai.tool.type": "function",
            "gen_ai.tool.call.id": "call_vault_1",
            "gen_ai.conversation.id": str(turn.conversation.pk),
            "assistant.audit_entry_id": entry.pk,
            "assistant.decision": "executed",
            "assistant.risk_level": "guarded",
        }.items()
    )
    # the arguments as the audit entry stores them: the secret redacted, the label shown
    assert json.loads(tool["attributes"]["gen_ai.tool.call.arguments"]) == entry.entities
    assert entry.entities == {"label": "db", "secret": "[redacted]"}
    assert "gen_ai.tool.call.result" not in tool["attributes"]  # not opted in
    assert first["start"] < tool["start"] < tool["end"] <= second["start"]
    assert agent["resource"]["service.name"] == "ops-tests"
    assert agent["schema_url"] == "https://opentelemetry.io/schemas/1.41.0"
    no_secret_anywhere(receiver)


def test_a_tool_result_is_on_its_span_only_when_opted_in_and_redacted(
    traced, use_llm, keeper, settings
):
    settings.ASSISTANT = {**settings.ASSISTANT, "TELEMETRY_RESULTS": True}
    use_llm().script(
        tool_calls(call("store_secret", {"label": "db", "secret": SECRET})), text("Stored.")
    )

    run_turn(keeper, "store the db secret")

    tool = traced().one("execute_tool store_secret")
    assert tool["attributes"]["gen_ai.tool.call.result"] == "stored db (29 characters)"


def test_a_refused_call_and_a_failing_tool_record_their_error_type(traced, use_llm, plain_user):
    use_llm().script(
        tool_calls(call("store_secret", {"label": "db", "secret": SECRET}), call("explode")),
        text("Sorry."),
    )

    run_turn(plain_user, "try both")

    receiver = traced()
    denied = receiver.one("execute_tool store_secret")
    assert denied["attributes"]["assistant.decision"] == "denied"
    # (hidden from this user: refused as a missing tool, as the caller was told)
    assert denied["attributes"]["error.type"] == "unknown_operation"
    assert denied["status"] == 2  # ERROR
    exploded = receiver.one("execute_tool explode")
    assert exploded["attributes"]["assistant.decision"] == "failed"
    assert exploded["attributes"]["error.type"] == "tool_failed"
    no_secret_anywhere(receiver)


def test_a_dead_model_fails_its_chat_span_and_the_turn(traced, use_llm, plain_user):
    peer = use_llm()
    peer.script()  # nothing scripted: the peer answers 500

    turn = run_turn(plain_user, "hello")

    receiver = traced()
    assert turn.assistant_message.status == "failed"
    chat = receiver.one("chat test-model")
    assert chat["attributes"]["error.type"] in {"llm_error", "llm_unavailable"}
    agent = receiver.one("invoke_agent assistant")
    assert agent["attributes"]["error.type"] == chat["attributes"]["error.type"]
    assert agent["attributes"]["assistant.turn.status"] == "failed"


def test_a_confirmed_action_is_traced_without_its_sealed_secret(traced, use_llm, keeper):
    use_llm().script(
        tool_calls(call("rotate_secret", {"label": "db", "secret": SECRET})), text("Asked.")
    )
    run_turn(keeper, "rotate the db secret")
    action = PendingAction.objects.get(operation="rotate_secret")
    client = APIClient()
    client.force_authenticate(keeper)

    answered = client.post(
        f"/assistant/api/actions/{action.pk}/confirm/",
        {},
        format="json",
        headers={"traceparent": TRACEPARENT},
    )

    assert answered.status_code == 200, answered.content
    receiver = traced()
    asked, confirmed = sorted(
        receiver.named("execute_tool rotate_secret"), key=lambda span: span["start"]
    )
    assert asked["attributes"]["assistant.decision"] == "confirmation_requested"
    assert "error.type" not in asked["attributes"]
    assert confirmed["attributes"]["assistant.decision"] == "confirmed"
    assert (confirmed["trace_id"], confirmed["parent"]) == (CALLER_TRACE, CALLER_SPAN)
    entry = AuditEntry.objects.get(operation="rotate_secret", decision="confirmed")
    assert confirmed["attributes"]["assistant.audit_entry_id"] == entry.pk
    no_secret_anywhere(receiver)


# -- the caller's trace --------------------------------------------------------------------------


def test_a_rest_turn_continues_the_callers_traceparent(traced, use_llm, plain_user):
    use_llm().script(text("Hi."))

    created = post_message(plain_user, "hello")

    assert created.status_code == 201
    agent = traced().one("invoke_agent assistant")
    assert (agent["trace_id"], agent["parent"]) == (CALLER_TRACE, CALLER_SPAN)


def test_a_malformed_traceparent_starts_a_trace_of_its_own(traced, use_llm, plain_user):
    use_llm().script(text("Hi."))

    created = post_message(plain_user, "hello", traceparent="00-not-a-trace-01")

    assert created.status_code == 201
    agent = traced().one("invoke_agent assistant")
    assert agent["parent"] == ""
    assert agent["trace_id"] != CALLER_TRACE


@pytest.mark.django_db(transaction=True)
async def test_a_websocket_turn_continues_the_handshakes_traceparent(traced, plain_user):
    socket = sockets.WebsocketCommunicator(
        sockets.application,
        sockets.PATH,
        headers=[sockets.ORIGIN, (b"traceparent", TRACEPARENT.encode())],
    )
    socket.scope["user"] = plain_user
    connected, _ = await socket.connect(timeout=sockets.WAIT)
    assert connected
    try:
        await sockets.send(socket, type="message", text="ping")
        await sockets.receive_run(socket)
    finally:
        await socket.disconnect()
    assert await sockets.turns_ended(5)

    receiver = traced()
    agent = receiver.one("invoke_agent assistant")
    assert (agent["trace_id"], agent["parent"]) == (CALLER_TRACE, CALLER_SPAN)
    assert agent["attributes"]["assistant.source"] == "websocket"
    assert children_of(receiver, agent) == ["execute_tool ping"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("trace_in", ["header", "meta"])
async def test_an_mcp_call_is_a_server_span_with_its_tool_span_inside(traced, make_user, trace_in):
    # (the caller's trace in the traceparent header, or in params._meta as MCP's SEP-414 puts it
    # on every transport, stdio included)
    from asgiref.sync import sync_to_async

    reader = await sync_to_async(make_user)("reader", "testapp.view_order")
    secret = (await sync_to_async(tokens.issue)(reader, name="tracing"))[1]

    response = await mcp_tool_call(secret, "ping", {}, trace_in=trace_in)

    assert response.status_code == 200, response.content
    receiver = traced()
    server = receiver.one("tools/call ping")
    assert server["kind"] == SERVER
    assert (server["trace_id"], server["parent"]) == (CALLER_TRACE, CALLER_SPAN)
    assert server["attributes"]["mcp.method.name"] == "tools/call"
    assert children_of(receiver, server) == ["execute_tool ping"]
    tool = receiver.one("execute_tool ping")
    assert tool["attributes"]["assistant.source"] == "mcp"


@pytest.mark.slow
def test_an_agui_run_is_a_server_span_around_its_turn(traced, asgi_live_server, plain_user):
    import requests
    from rest_framework.authtoken.models import Token

    from tests.agui_clients import parse, run_input

    key = Token.objects.create(user=plain_user).key
    body = run_input("ping")
    headers = {
        "Accept": "text/event-stream",
        "Authorization": f"Bearer {key}",
        "traceparent": TRACEPARENT,
    }
    with requests.post(
        f"{asgi_live_server}/assistant/agui/", json=body, headers=headers, stream=True, timeout=20
    ) as response:
        assert response.status_code == 200
        list(parse(response.iter_lines(decode_unicode=True)))

    receiver = traced()
    server = receiver.one("POST /assistant/agui/")
    assert server["kind"] == SERVER
    assert (server["trace_id"], server["parent"]) == (CALLER_TRACE, CALLER_SPAN)
    agent = receiver.one("invoke_agent assistant")
    assert agent["parent"] == server["span_id"]
    assert agent["attributes"]["assistant.source"] == "agui"
    assert children_of(receiver, agent) == ["execute_tool ping"]


# -- metrics -------------------------------------------------------------------------------------


def test_turns_tool_calls_tokens_and_durations_are_exported_as_metrics(traced, use_llm, keeper):
    use_llm().script(
        tool_calls(call("store_secret", {"label": "db", "secret": SECRET})), text("Stored.")
    )

    run_turn(keeper, "store the db secret")

    metrics = traced().metrics
    tokens_used = {
        point["attributes"]["gen_ai.token.type"]: point
        for point in metrics["gen_ai.client.token.usage"]
    }
    assert tokens_used["input"]["kind"] == "histogram"
    assert tokens_used["input"]["unit"] == "{token}"
    assert (tokens_used["input"]["count"], tokens_used["input"]["sum"]) == (2, 200)
    assert (tokens_used["output"]["count"], tokens_used["output"]["sum"]) == (2, 40)
    assert tokens_used["input"]["attributes"]["gen_ai.request.model"] == "test-model"
    durations = {
        point["attributes"]["gen_ai.operation.name"]: point
        for point in metrics["gen_ai.client.operation.duration"]
    }
    assert durations["invoke_agent"]["count"] == 1
    assert durations["chat"]["count"] == 2
    assert durations["chat"]["unit"] == "s"
    (turns,) = metrics["assistant.turns"]
    assert (turns["attributes"], turns["value"]) == ({"assistant.turn.status": "complete"}, 1)
    (calls,) = metrics["assistant.tool_calls"]
    assert calls["attributes"] == {
        "gen_ai.tool.name": "store_secret",
        "assistant.decision": "executed",
    }
    assert calls["value"] == 1


# -- the conventions' version --------------------------------------------------------------------


def test_without_the_opt_in_the_v1_36_baseline_names_are_emitted(
    traced, use_llm, keeper, monkeypatch
):
    monkeypatch.delenv("OTEL_SEMCONV_STABILITY_OPT_IN")
    use_llm().script(
        tool_calls(call("store_secret", {"label": "db", "secret": SECRET})), text("Stored.")
    )

    run_turn(keeper, "store the db secret")

    receiver = traced()
    chat = receiver.named("chat test-model")[0]
    assert chat["attributes"]["gen_ai.system"] == "openai_compatible"
    assert "gen_ai.provider.name" not in chat["attributes"]
    assert receiver.one("invoke_agent assistant")["kind"] == CLIENT
    tool = receiver.one("execute_tool store_secret")
    assert "gen_ai.tool.call.arguments" not in tool["attributes"]
    assert json.loads(tool["attributes"]["assistant.tool.call.arguments"])["secret"] == "[redacted]"
    assert chat["schema_url"] == "https://opentelemetry.io/schemas/1.36.0"
    no_secret_anywhere(receiver)


# -- off -----------------------------------------------------------------------------------------


def test_off_by_default_nothing_is_exported_and_no_exporter_thread_starts(
    otlp_receiver, monkeypatch, plain_user
):
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    telemetry.reset()

    run_turn(plain_user, "ping")

    assert telemetry.active() is None
    assert not [t.name for t in threading.enumerate() if t.name.startswith(EXPORTER_THREADS)]
    assert otlp_receiver.requests == []
    assert "assistant.telemetry._otel" not in sys.modules or telemetry.active() is None


def test_an_otlp_endpoint_in_the_environment_turns_it_on(otlp_receiver, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp_receiver.url)
    assert telemetry.wanted()
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert not telemetry.wanted()


def test_asked_for_but_not_installed_is_a_check_warning(settings, monkeypatch):
    settings.ASSISTANT = {**settings.ASSISTANT, "TELEMETRY": True}
    monkeypatch.setattr(telemetry, "installed", lambda: False)

    warnings = [m.id for m in run_checks() if m.id == "assistant.W020"]

    assert warnings == ["assistant.W020"]
    assert telemetry.active() is None


@pytest.mark.slow
def test_without_the_extra_the_app_imports_and_runs_a_turn_untraced(tmp_path: Path):
    """In a process where the SDK and exporter cannot be imported: checks warn, a turn runs."""
    script = tmp_path / "untraced.py"
    script.write_text(UNTRACED)
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "PYTHONPATH": os.getcwd()}
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://127.0.0.1:9"
    # a database of its own: never the one DATABASE_URL names (it migrates and adds a user)
    env["DATABASE_URL"] = f"sqlite:///{tmp_path / 'untraced.sqlite3'}"
    for name in ("REDIS_URL", "ASSISTANT_REQUIRE_SERVICES"):
        env.pop(name, None)

    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["assistant.W020", "complete", "untraced"]


UNTRACED = """
import importlib.abc, sys

class NoExtra(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.startswith(("opentelemetry.sdk", "opentelemetry.exporter")):
            raise ModuleNotFoundError(name)
        return None

sys.meta_path.insert(0, NoExtra())
import django
django.setup()
from django.core.management import call_command
from django.core.checks import run_checks
call_command("migrate", verbosity=0)
print(*[m.id for m in run_checks() if m.id == "assistant.W020"])
from django.contrib.auth import get_user_model
from assistant import telemetry
from assistant.turns.runs import run_turn
user = get_user_model().objects.create_user("someone")
print(run_turn(user, "ping").assistant_message.status)
print("untraced" if telemetry.active() is None and "assistant.telemetry._otel" not in sys.modules else "traced")
"""


# -- a picture of a trace ------------------------------------------------------------------------


@pytest.mark.browser
def test_a_traced_turn_drawn_as_a_waterfall_shows_every_span_and_no_secret(
    traced, use_llm, keeper, tmp_path
):
    from playwright.sync_api import sync_playwright

    from tests.browsing import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS
    from tests.trace_waterfall import waterfall

    use_llm().script(
        text("Warm."),  # the process's first turn makes the model's client: not pictured
        tool_calls(
            call("ping", {}, id="call_ping_1"),
            call("store_secret", {"label": "db", "secret": SECRET}, id="call_vault_2"),
        ),
        text("Pinged, and the secret is stored."),
    )
    run_turn(keeper, "hello")
    created = post_message(keeper, "ping, then store the db secret")
    assert created.status_code == 201
    spans = [span for span in traced().spans if span["trace_id"] == CALLER_TRACE]
    page_file = tmp_path / "trace.html"
    page_file.write_text(waterfall(spans, "POST /assistant/api/messages/ — one turn"))

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    picture = ARTIFACTS / "telemetry-trace.png"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 400})
            page.goto(page_file.as_uri())
            shown = page.locator("body").inner_text()
            page.screenshot(path=str(picture), full_page=True)
        finally:
            browser.close()

    for name in ("invoke_agent assistant", "chat test-model", "execute_tool ping"):
        assert name in shown
    assert "execute_tool store_secret" in shown
    assert '"secret": "[redacted]"' in shown
    assert SECRET not in shown
    if os.environ.get("ASSISTANT_DOCS_SCREENSHOTS"):  # the how-to's picture, made again
        docs = Path(__file__).resolve().parents[2] / "docs" / "_static"
        docs.mkdir(exist_ok=True)
        (docs / "telemetry-trace.png").write_bytes(picture.read_bytes())
