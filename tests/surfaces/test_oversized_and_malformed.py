"""A body past Django's upload limit and a malformed Origin are refused with a stable JSON code,
never a 500 or an HTML page (REST, AG-UI, MCP)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import AsyncClient, Client
from rest_framework.authtoken.models import Token

from assistant.access import tokens
from assistant.models import Conversation, Message
from tests.agui_clients import run_input
from tests.mcp_clients import MODERN, envelope

SMALL_LIMIT = 10_000  # DATA_UPLOAD_MAX_MEMORY_SIZE for these tests (Django's default is 2.5 MB)


# -- a body over DATA_UPLOAD_MAX_MEMORY_SIZE, on AG-UI and the REST API -------------------------


@pytest.mark.django_db(transaction=True)
def test_an_agui_body_over_the_upload_limit_is_a_json_4xx_not_a_500(agent, plain_user, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = SMALL_LIMIT
    body = run_input("ping", state={"pad": "x" * (SMALL_LIMIT * 2)})

    response = agent(plain_user).post(body)

    assert response.status_code in (400, 413), (response.status_code, response.text)
    assert response.headers["Content-Type"] == "application/json"
    assert response.json()["code"] == "request_too_large"
    assert not Conversation.objects.exists()
    assert not Message.objects.exists()


@pytest.mark.django_db
def test_a_rest_body_over_the_upload_limit_is_a_json_4xx_not_a_500(plain_user, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = SMALL_LIMIT
    key = Token.objects.create(user=plain_user).key
    body = json.dumps({"text": "ping", "pad": "x" * (SMALL_LIMIT * 2)})

    response = Client().post(
        "/assistant/api/messages/",
        body,
        content_type="application/json",
        headers={"Authorization": f"Bearer {key}"},
    )

    assert response.status_code in (400, 413), (response.status_code, response.content[:200])
    assert response.json()["code"] == "request_too_large"
    assert not Message.objects.exists()


# -- MCP: a malformed Origin header ---------------------------------------------------------------


@pytest.fixture
def mcp_secret(make_user: Any) -> str:
    reader = make_user("reader", "testapp.view_order", "assistant.reports_read")
    return tokens.issue(reader, name="review")[1]


def mcp_headers(secret: str, **extra: str) -> dict[str, str]:
    return {**MODERN, "MCP-Method": "tools/list", "Authorization": f"Bearer {secret}", **extra}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("origin", ["http://[::1", "http://[evil.example", "http://]x"])
async def test_a_malformed_origin_is_refused_not_a_server_error(mcp_secret, origin):
    client = AsyncClient(raise_request_exception=False)

    response = await client.post(
        "/assistant/mcp/",
        json.dumps(envelope("tools/list", {})),
        content_type="application/json",
        headers=mcp_headers(mcp_secret, Origin=origin),
    )

    assert response.status_code == 403, response.status_code
    assert json.loads(response.content)["code"] == "origin_not_allowed"


# -- MCP: a body over the upload limit --------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_an_mcp_body_over_the_upload_limit_is_a_json_refusal_with_a_code(
    mcp_secret, settings
):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = SMALL_LIMIT
    body = json.dumps({**envelope("tools/list", {}), "pad": "x" * (SMALL_LIMIT * 2)})

    response = await AsyncClient().post(
        "/assistant/mcp/", body, content_type="application/json", headers=mcp_headers(mcp_secret)
    )

    assert response.status_code in (400, 413), response.status_code
    assert response["Content-Type"].startswith("application/json"), response.content[:120]
    assert json.loads(response.content)["code"] == "request_too_large"
