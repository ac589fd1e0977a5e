"""No operation-name oracle: a tool the caller has no part in answers exactly as a missing one, on
every surface (REST, MCP, the chat over the websocket and AG-UI, the CLI); only the audit says
``denied``, and a user who works with the tool's domain is still told what it needs."""

from __future__ import annotations

import json
from io import StringIO
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.core.management import CommandError, call_command

from assistant.access import tokens
from assistant.models import AuditEntry
from assistant.turns.runs import run_turn
from tests.agui_clients import run_input
from tests.clients import client_for, dispatch_call
from tests.mcp_clients import MODES, mcp_client
from tests.openai_peer import call, text, tool_calls
from tests.openai_peer import openai_peer as openai_peer  # the fixtures
from tests.openai_peer import use_llm as use_llm
from tests.sockets import receive_run, send
from tests.turns.reading import read_told

HIDDEN = "store_secret"  # the vault's: the reader works with orders and reports, not the vault
MISSING = "no_such_tool"
ENTITIES = {"label": "a", "secret": "b"}
VOLATILE = {"audit_id", "duration_ms", "id", "timestamp", "seq", "runId", "threadId", "messageId"}
VOLATILE |= {"toolCallId", "tool_call_id", "parentMessageId", "message"}  # (ids of a call, a run)


def same_shape(answer: Any, operation: str) -> Any:
    """An answer with its operation's name written as OP and its per-call ids and times blanked."""
    if isinstance(answer, dict):
        return {k: None if k in VOLATILE else same_shape(v, operation) for k, v in answer.items()}
    if isinstance(answer, list):
        return [same_shape(item, operation) for item in answer]
    return answer.replace(operation, "OP") if isinstance(answer, str) else answer


def audited() -> list[tuple[str, str, str, dict[str, Any]]]:
    """Each audit entry's operation, decision, domain and entities, oldest first."""
    return [
        (entry.operation, entry.decision, entry.domain, entry.entities)
        for entry in AuditEntry.objects.order_by("id")
    ]


TRUTH = [
    (HIDDEN, "denied", "vault", {"label": "a", "secret": "[redacted]"}),
    (MISSING, "unknown", "", {"label": "[redacted]", "secret": "[redacted]"}),
]


@pytest.mark.django_db
def test_over_rest_a_hidden_tool_and_a_missing_one_get_the_same_404(reader):
    client = client_for(reader)

    hidden = dispatch_call(client, HIDDEN, **ENTITIES)
    missing = dispatch_call(client, MISSING, **ENTITIES)

    assert hidden.status_code == missing.status_code == 404
    assert hidden.json()["code"] == "unknown_operation"
    assert same_shape(hidden.json(), HIDDEN) == same_shape(missing.json(), MISSING)
    assert audited() == TRUTH


@pytest.mark.django_db
def test_over_rest_arguments_too_large_for_a_hidden_tool_look_as_for_a_missing_one(
    reader, settings
):
    settings.ASSISTANT = {**settings.ASSISTANT, "MAX_TOOL_ARGUMENT_BYTES": 1_000}
    client = client_for(reader)
    huge = {"label": "a", "secret": "b", "note": "x" * 2_000}

    hidden = dispatch_call(client, HIDDEN, **huge)
    missing = dispatch_call(client, MISSING, **huge)

    assert hidden.status_code == missing.status_code == 400
    assert hidden.json()["code"] == "arguments_too_large"
    assert same_shape(hidden.json(), HIDDEN) == same_shape(missing.json(), MISSING)
    # the audit keeps the preview as the tool redacts it
    assert '"label": "a"' in AuditEntry.objects.get(operation=HIDDEN).entities["preview"]


@pytest.mark.django_db
def test_in_a_chat_turn_arguments_too_large_for_a_hidden_tool_look_as_for_a_missing_one(
    use_llm, reader, settings
):
    peer = use_llm()
    settings.ASSISTANT = {**settings.ASSISTANT, "MAX_TOOL_ARGUMENT_BYTES": 1_000}
    huge = {"label": "a", "secret": "b", "note": "x" * 2_000}
    for operation in (HIDDEN, MISSING):
        peer.script(tool_calls(call(operation, huge)), text("Done."))

    turns = [run_turn(reader, "keep a secret"), run_turn(reader, "keep a secret")]

    hidden, missing = (read_told(fed_back(peer, n)) for n in (1, 3))
    assert same_shape(hidden, HIDDEN) == same_shape(missing, MISSING)
    shown = [turn.assistant_message.tool_calls for turn in turns]
    assert same_shape(shown[0], HIDDEN) == same_shape(shown[1], MISSING)


@pytest.mark.django_db
def test_a_tool_of_a_domain_one_works_in_still_names_what_it_needs(reader):
    refused = dispatch_call(client_for(reader), "cancel_order", order_id=1)

    assert refused.status_code == 403
    assert refused.json()["code"] == "permission_denied"
    assert "“Can change order”" in refused.json()["detail"]


@pytest.mark.django_db
def test_from_the_cli_a_hidden_tool_and_a_missing_one_fail_alike(reader):
    failures = []
    for operation in (HIDDEN, MISSING):
        with pytest.raises(CommandError) as failed:
            call_command(
                "assistant_call", operation, "label=a", "secret=b", "--user", "reader", "--json",
                stdout=StringIO(),
            )  # fmt: skip
        failures.append(same_shape(str(failed.value), operation))

    assert failures[0] == failures[1] == "unknown_operation: Unknown operation 'OP'"
    assert audited() == TRUTH


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("mode", MODES)
async def test_over_mcp_a_hidden_tool_and_a_missing_one_are_the_same_error_result(
    asgi_live_server, mode, reader
):
    _, secret = await sync_to_async(tokens.issue)(reader, name="laptop")
    async with mcp_client(asgi_live_server, secret, mode) as client:
        hidden = await client.call_tool(HIDDEN, ENTITIES)
        missing = await client.call_tool(MISSING, ENTITIES)

    assert hidden.is_error
    assert missing.is_error
    assert hidden.structured_content["code"] == "unknown_operation"
    assert same_shape(hidden.model_dump(), HIDDEN) == same_shape(missing.model_dump(), MISSING)
    assert await sync_to_async(audited)() == TRUTH


def model_calls(peer: Any) -> None:
    """A model that calls the hidden tool, then the missing one, each in a turn of its own."""
    for operation in (HIDDEN, MISSING):
        peer.script(tool_calls(call(operation, ENTITIES)), text("Done."))


def fed_back(peer: Any, request: int) -> str:
    (result,) = [m for m in peer.requests[request]["messages"] if m["role"] == "tool"]
    return str(result["content"])


@pytest.mark.django_db
def test_in_a_chat_turn_the_model_is_told_the_same_of_both(use_llm, reader):
    peer = use_llm()
    model_calls(peer)

    turns = [run_turn(reader, "keep a secret"), run_turn(reader, "keep a secret")]

    hidden, missing = (read_told(fed_back(peer, n)) for n in (1, 3))
    assert hidden["code"] == "unknown_operation"
    assert same_shape(hidden, HIDDEN) == same_shape(missing, MISSING)
    shown = [turn.assistant_message.tool_calls for turn in turns]
    assert same_shape(shown[0], HIDDEN) == same_shape(shown[1], MISSING)
    assert audited() == TRUTH


def frames_of_run(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The run's frames as a client sees them, without the snapshots that carry history."""
    return [frame for frame in frames if frame["type"] not in ("STATE_SNAPSHOT",)]


@pytest.mark.django_db(transaction=True)
async def test_over_the_websocket_both_runs_stream_the_same_frames(use_llm, open_socket, reader):
    peer = use_llm()
    model_calls(peer)
    socket = await open_socket(reader)

    runs = []
    for _ in (HIDDEN, MISSING):
        await send(socket, type="message", text="keep a secret")
        runs.append(frames_of_run(await receive_run(socket)))

    hidden, missing = runs
    results = [f for f in hidden if f["type"] == "TOOL_CALL_RESULT"]
    assert "unknown_operation" in json.dumps(results) or "Unknown operation" in json.dumps(results)
    assert [f["type"] for f in hidden] == [f["type"] for f in missing]
    assert same_shape(hidden, HIDDEN) == same_shape(missing, MISSING)
    assert await sync_to_async(audited)() == TRUTH


@pytest.mark.django_db(transaction=True)
def test_over_agui_both_runs_stream_the_same_events(use_llm, agent, reader):
    peer = use_llm()
    model_calls(peer)
    client = agent(reader)

    runs = [
        [
            event.model_dump(exclude={"timestamp", "raw_event"})
            for event in client.run(run_input("keep a secret"))
            if event.type.value not in ("STATE_SNAPSHOT", "MESSAGES_SNAPSHOT")
        ]
        for _ in (HIDDEN, MISSING)
    ]

    hidden, missing = runs
    assert [e["type"] for e in hidden] == [e["type"] for e in missing]
    for event in (*hidden, *missing):  # ids differ per run: thread, run, message, tool call
        for key in ("thread_id", "run_id", "message_id", "tool_call_id", "parent_message_id"):
            event.pop(key, None)
    assert same_shape(hidden, HIDDEN) == same_shape(missing, MISSING)
    assert audited() == TRUTH
