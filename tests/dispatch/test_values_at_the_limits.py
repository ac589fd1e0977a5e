"""Values at the limits: results that are not plain JSON, nesting at the
storage limit, secrets in lists, hidden tables read by query on SQLite, bodies nested too deeply."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from assistant import ToolCall, ToolResult, assistant_tool
from assistant.core.registry import ToolRegistry
from assistant.dispatch.confirmation import confirm_action
from assistant.dispatch.door import dispatch
from assistant.exceptions import ToolDefinitionError
from assistant.models import AuditEntry, Conversation, Message
from assistant.turns.runs import run_turn
from tests.clients import API
from tests.sockets import connect

SITE = ToolRegistry("review-fixes")
SEEN: list[Any] = []


def client(user: Any) -> APIClient:
    c = APIClient(raise_request_exception=False)
    c.force_login(user)
    return c


@assistant_tool(
    site=SITE,
    operation="apply_config",
    domain="diagnostics",
    description="Apply a config",
    risk_level="guarded",
    requires_confirmation=True,
    public=True,
)
def apply_config(call: ToolCall, config: dict[str, object]) -> ToolResult:
    SEEN.append(call.entities["config"])
    return ToolResult(text="applied")


@assistant_tool(
    site=SITE,
    operation="blob",
    domain="diagnostics",
    description="Answer with odd values",
    risk_level="safe",
    public=True,
)
def blob(call: ToolCall, where: str = "actions") -> ToolResult:
    if where == "actions":
        return ToolResult(text="ok", actions=[{"type": "download", "body": b"\xff\xfe"}])
    if where == "object":
        return ToolResult(text="ok", data={"x": object()})
    return ToolResult(text="ok", data={"b": b"\xff", "s": {1, 2}})


@assistant_tool(
    site=SITE,
    operation="set_keys",
    domain="diagnostics",
    description="Store keys",
    risk_level="safe",
    public=True,
    sensitive_entities=["keys"],
    keywords=["set keys"],
)
def set_keys(call: ToolCall, label: str, keys: list[str]) -> ToolResult:
    return ToolResult(text=f"stored {len(keys)} keys for {label}")


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"k": value}
    return value


@pytest.mark.django_db
@pytest.mark.parametrize("where", ["actions", "object", "data"])
def test_a_result_that_is_not_plain_json_is_answered_not_a_500(superuser, where):
    outcome = dispatch("blob", {"where": where}, user=superuser, site=SITE)

    assert outcome.decision == "executed"
    json.dumps([outcome.result.actions, outcome.result.data])  # plain JSON now
    assert AuditEntry.objects.get().decision == "executed"


@pytest.mark.django_db
def test_bytes_and_sets_in_a_result_become_plain_json(superuser):
    outcome = dispatch("blob", {"where": "none"}, user=superuser, site=SITE)

    assert outcome.result.data == {"b": "b'\\xff'", "s": [1, 2]}


@pytest.mark.django_db(transaction=True)
def test_a_query_returning_bytes_is_confirmed_and_answered_over_rest(make_user):
    analyst = make_user("analyst", "assistant.database_read", "assistant.database_query")
    c = client(analyst)
    asked = c.post(
        f"{API}/dispatch/",
        {"operation": "run_readonly_query", "entities": {"sql": "select x'ff' as b"}},
        format="json",
    )
    action = asked.json()["pending_action"]["id"]

    confirmed = c.post(f"{API}/actions/{action}/confirm/", {}, format="json")

    assert confirmed.status_code == 200, confirmed.content[:300]
    assert confirmed["Content-Type"].startswith("application/json")


@pytest.mark.django_db
@pytest.mark.parametrize(("depth", "accepted"), [(30, True), (31, True), (32, False)])
def test_what_is_accepted_is_confirmed_and_run_exactly_as_given(superuser, depth, accepted):
    SEEN.clear()
    config = nested(depth)

    asked = dispatch("apply_config", {"config": config}, user=superuser, site=SITE)

    if not accepted:
        assert (asked.decision, asked.code) == ("invalid", "invalid_entities")
        return
    assert asked.decision == "confirmation_requested"
    confirm_action(asked.pending_action.pk, user=superuser, site=SITE)
    assert [config] == SEEN


@pytest.mark.django_db(transaction=True)
def test_secrets_in_a_list_entity_are_redacted_in_the_message_and_title(superuser):
    run_turn(superuser, "set keys label=door keys=alpha9k,beta7z", site=SITE)

    stored = [*Message.objects.values_list("text", flat=True)]
    stored += [*Conversation.objects.values_list("title", flat=True)]
    assert stored
    assert not any("alpha9k" in text or "beta7z" in text for text in stored)


def test_a_sensitive_entity_that_is_not_text_is_refused_where_it_is_declared():
    site = ToolRegistry("pins")

    with pytest.raises(ToolDefinitionError, match="must be text"):

        @assistant_tool(
            site=site,
            operation="set_pin",
            domain="d",
            description="Set a PIN",
            risk_level="safe",
            public=True,
            sensitive_entities=["pin"],
        )
        def set_pin(call: ToolCall, pin: int) -> ToolResult:
            return ToolResult(text="ok")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "sql",
    [
        "select key from authtoken_token",
        "select session_data from django_session",
        "select count(*) from (select * from authtoken_token)",
    ],
)
def test_a_hidden_table_cannot_be_read_by_query_on_sqlite(make_user, superuser, sql):
    from django.db import connection

    if connection.vendor != "sqlite":
        pytest.skip("PostgreSQL hides tables with the role's grants (demo_sql_role)")
    Token.objects.create(user=superuser)
    analyst = make_user("analyst", "assistant.database_read", "assistant.database_query")
    c = client(analyst)
    asked = c.post(
        f"{API}/dispatch/",
        {"operation": "run_readonly_query", "entities": {"sql": sql}},
        format="json",
    )
    confirmed = c.post(
        f"{API}/actions/{asked.json()['pending_action']['id']}/confirm/", {}, format="json"
    )

    assert confirmed.status_code == 200
    assert "is prohibited" in confirmed.json()["text"]
    assert Token.objects.get().key not in confirmed.content.decode()


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["dispatch", "messages"])
def test_a_body_nested_past_the_interpreters_depth_is_a_400(superuser, path):
    depth = 200_000
    body = (
        '{"message": "hi", "operation": "ping", "entities": {"x": '
        + "[" * depth
        + "]" * depth
        + "}}"
    )

    response = client(superuser).post(f"{API}/{path}/", body, content_type="application/json")

    assert response.status_code == 400
    assert response.json()["code"] == "parse_error"
    assert not AuditEntry.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_lost_reply_frees_its_idempotency_key_so_the_retry_runs(plain_user, monkeypatch):
    from django.db import DatabaseError

    from assistant.turns.turn import Turn

    real_store = Turn._store
    gone = [True]  # the database is away for the whole first turn

    def store_refused_while_gone(turn: Any, fields: Any) -> Any:
        if gone[0]:
            raise DatabaseError("the database went away")  # as the server would answer
        return real_store(turn, fields)

    monkeypatch.setattr(Turn, "_store", store_refused_while_gone)
    c = client(plain_user)
    headers = {"HTTP_IDEMPOTENCY_KEY": "order-42"}

    lost = c.post(f"{API}/messages/", {"message": "ping"}, format="json", **headers)
    gone[0] = False
    retried = c.post(f"{API}/messages/", {"message": "ping"}, format="json", **headers)
    again = c.post(f"{API}/messages/", {"message": "ping"}, format="json", **headers)

    assert (lost.status_code, lost.json()["code"]) == (503, "reply_not_stored")
    assert retried.status_code == 201
    assert again.status_code == 201
    assert again.json()["assistant_message"]["id"] == retried.json()["assistant_message"]["id"]


@pytest.mark.django_db(transaction=True)
async def test_a_socket_that_cannot_join_its_conversation_is_told_and_the_turn_still_runs(
    plain_user, monkeypatch
):
    import asyncio

    from channels.layers import get_channel_layer
    from django.db import OperationalError
    from django.db.models import Q

    layer = get_channel_layer()
    real_add = layer.group_add

    async def refuse_conversations(group: str, channel: str) -> None:
        if group.startswith("assistant.conversation"):
            raise ConnectionError("the channel layer refused")
        await real_add(group, channel)

    monkeypatch.setattr(layer, "group_add", refuse_conversations)
    socket = await connect(plain_user)
    try:
        await socket.send_json_to({"type": "message", "text": "ping"})
        frame = await socket.receive_json_from(timeout=10)
        while not (frame["type"] == "CUSTOM" and frame["name"] == "assistant.error"):
            frame = await socket.receive_json_from(timeout=10)
    finally:
        await socket.disconnect()

    assert frame["value"]["code"] == "not_subscribed"
    replies = Message.objects.filter(Q(role="assistant"), conversation__user=plain_user)
    answered = False
    for _ in range(100):
        try:  # (in-memory SQLite may refuse the read while the lane writes: ask again)
            answered = await replies.aexists()
        except OperationalError:
            answered = False
        if answered:
            break
        await asyncio.sleep(0.1)
    assert answered
