"""HTTP clients for the tests: signed in as a user (REST unless asked otherwise), and what they call."""

from __future__ import annotations

import json
from typing import Any

from django.test import Client
from rest_framework.test import APIClient

API = "/assistant/api"
# The test app's tools that every signed-in user may call.
PUBLIC_TOOLS = [
    "apong",
    "echo_types",
    "explode",
    "forbid",
    "get_task_status",
    "ping",
    "show_capabilities",
    "slow",
    "slow_sync",
]


def client_for(user: Any, client_class: type[Client] = APIClient, **options: Any) -> Any:
    """A ``client_class(**options)`` with ``user`` signed in through the session."""
    client = client_class(**options)
    client.force_login(user)
    return client


def dispatch_call(client: Any, operation: str, **entities: Any) -> Any:
    return client.post(
        f"{API}/dispatch/", {"operation": operation, "entities": entities}, format="json"
    )


def operations(tools: list[dict[str, Any]]) -> list[str]:
    return sorted(tool["operation"] for tool in tools)


def raw_json(payload: Any) -> str:
    # 1e400 is how a JSON client writes an overflowing float; Python has no literal for it.
    return json.dumps(payload, allow_nan=True).replace("Infinity", "1e400")


def post_raw(user: Any, path: str, payload: Any) -> Any:
    client = APIClient()
    client.force_login(user)
    return client.post(f"{API}/{path}/", raw_json(payload), content_type="application/json")


def start_conversation(client: APIClient, *messages: str) -> str:
    conversation = None
    for text in messages:
        body = client.post(
            f"{API}/messages/", {"message": text, "conversation": conversation}, format="json"
        ).json()
        conversation = body["conversation"]
    assert conversation is not None
    return conversation
