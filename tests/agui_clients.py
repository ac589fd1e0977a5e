"""AG-UI over HTTP as a client speaks it: a RunAgentInput, a user's client posting it to the live
server, the streamed events parsed by ``ag_ui.core``, and an interrupt's resume."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import requests
from ag_ui.core import BaseEvent, Event, RunAgentInput
from pydantic import TypeAdapter
from rest_framework.authtoken.models import Token

from tests.testapp.models import Order

WAIT = 20.0
AG_UI_EVENT: TypeAdapter[Any] = TypeAdapter(Event)


def run_input(text: str | None = "ping", thread_id: str | None = None, **fields: Any) -> dict:
    """A RunAgentInput as @ag-ui/client's HttpAgent sends it (camelCase, the whole history)."""
    messages = fields.pop("messages", None)
    if messages is None:
        messages = [{"id": str(uuid.uuid4()), "role": "user", "content": text}] if text else []
    body = {
        "threadId": thread_id or str(uuid.uuid4()),
        "runId": str(uuid.uuid4()),
        "state": {},
        "messages": messages,
        "tools": [],
        "context": [],
        "forwardedProps": {},
        **fields,
    }
    RunAgentInput.model_validate(body)  # the tests send only what the protocol allows
    return body


class Agent:
    """One user's AG-UI client against the live server (a DRF token, as ``Bearer``)."""

    def __init__(self, server: str, user: Any) -> None:
        self.url = f"{server}/assistant/agui/"
        self.headers = {"Authorization": f"Bearer {Token.objects.create(user=user).key}"}

    def post(self, body: Any, **kwargs: Any) -> requests.Response:
        headers = {"Accept": "text/event-stream", **self.headers, **kwargs.pop("headers", {})}
        return requests.post(self.url, json=body, headers=headers, timeout=WAIT, **kwargs)

    def run(self, body: dict[str, Any]) -> list[BaseEvent]:
        """The run's events, each validated by the ag_ui.core models."""
        with self.post(body, stream=True) as response:
            assert response.status_code == 200, response.text
            assert response.headers["Content-Type"] == "text/event-stream"
            assert response.headers["Cache-Control"] == "no-cache"
            assert response.headers["X-Accel-Buffering"] == "no"
            return list(parse(response.iter_lines(decode_unicode=True)))


def parse(lines: Iterator[str]) -> Iterator[BaseEvent]:
    for line in lines:
        if line:
            assert line.startswith("data: "), line
            yield AG_UI_EVENT.validate_json(line.removeprefix("data: "))


def ask_to_cancel(client: Agent, order: Order) -> tuple[dict[str, Any], list[BaseEvent]]:
    body = run_input(f"cancel order {order.pk}")
    return body, client.run(body)


def resume(asked: dict[str, Any], interrupt_id: str, status: str = "resolved", **payload: Any):
    return run_input(
        None,
        thread_id=asked["threadId"],
        messages=asked["messages"],
        resume=[{"interruptId": interrupt_id, "status": status, "payload": payload or None}],
    )
