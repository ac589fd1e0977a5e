"""A run's credential is confirmed again before each model call and each tool call: a token
revoked, a session ended (signed out, password changed, deleted) or a user deactivated while a
run goes on stops it at its next step, on every surface, audited once."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import requests
from ag_ui.core import EventType
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.contrib.sessions.models import Session
from django.db import connections
from django.test import Client
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from assistant.access import tokens
from assistant.models import AccessToken, AuditEntry, Job, Message, PendingAction
from tests.agui_clients import Agent, parse, run_input
from tests.openai_peer import Reply, call, text, tool_calls
from tests.openai_peer import openai_peer as openai_peer  # the fixtures
from tests.openai_peer import use_llm as use_llm
from tests.sockets import WAIT, receive, receive_run, receive_until, send
from tests.testapp.models import Order

LLM_TIMEOUT = 20.0


def meanwhile(change: Callable[[], Any], reply: Reply) -> Reply:
    """``reply``, played once ``change`` was made elsewhere (while the model thinks)."""

    def elsewhere() -> None:
        try:
            change()
        finally:
            connections.close_all()  # (the peer's thread: its own connection)

    return dataclasses.replace(reply, meanwhile=elsewhere)


def two_pings(peer: Any, change: Callable[[], Any]) -> None:
    """A model that calls ping, then (``change`` made while it thinks) apong, then speaks (a
    second, different call: an identical one would be answered with the first's result)."""
    peer.script(
        tool_calls(call("ping")),
        meanwhile(change, tool_calls(call("apong"))),
        text("never asked"),
    )


def decisions(*operations: str) -> list[tuple[str, str]]:
    entries = AuditEntry.objects.filter(operation__in=operations).order_by("pk")
    return [(entry.decision, entry.source) for entry in entries]


def revoke(token: AccessToken) -> Callable[[], Any]:
    return lambda: AccessToken.objects.get(pk=token.pk).revoke()


def signed_in(user: Any) -> Client:
    browser = Client()
    browser.force_login(user)
    return browser


def cookie_of(browser: Client) -> str:
    return f"sessionid={browser.cookies['sessionid'].value}"


def change_password(user: Any) -> None:
    fresh = get_user_model().objects.get(pk=user.pk)
    fresh.set_password("a new one")
    fresh.save()


# -- REST ---------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_over_rest_a_token_revoked_while_the_model_thinks_stops_the_next_tool_call(
    use_llm, plain_user
):
    token, secret = tokens.issue(plain_user, name="ci")
    peer = use_llm(TIMEOUT=LLM_TIMEOUT)
    two_pings(peer, revoke(token))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")

    response = client.post("/assistant/api/messages/", {"message": "ping twice"}, format="json")

    assert response.status_code == 401, response.content
    body = response.json()
    assert body["code"] == "token_revoked"
    assert "revoked" in body["detail"]
    assert response.headers["WWW-Authenticate"] == 'Bearer realm="assistant"'
    assert decisions("ping", "apong") == [("executed", "rest"), ("denied", "rest")]
    assert "revoked" in AuditEntry.objects.get(decision="denied").error
    assert len(peer.requests) == 2  # no model call after it either
    reply = Message.objects.get(role="assistant")
    assert (str(reply.conversation_id), reply.status) == (body["conversation"], "failed")


@pytest.mark.django_db(transaction=True)
def test_over_rest_a_password_changed_while_the_model_thinks_ends_the_sessions_run(
    use_llm, plain_user
):
    peer = use_llm(TIMEOUT=LLM_TIMEOUT)
    two_pings(peer, lambda: change_password(plain_user))
    client = APIClient()
    client.force_login(plain_user)

    response = client.post("/assistant/api/messages/", {"message": "ping twice"}, format="json")

    assert response.status_code == 401, response.content
    assert response.json()["code"] == "session_ended"
    assert decisions("ping", "apong") == [("executed", "rest"), ("denied", "rest")]


@pytest.mark.django_db(transaction=True)
def test_over_rest_the_rest_of_a_reply_is_neither_run_nor_audited_once_the_token_is_revoked(
    use_llm, plain_user
):
    token, secret = tokens.issue(plain_user, name="ci")
    peer = use_llm(TIMEOUT=LLM_TIMEOUT)
    calls = [call("ping") for _ in range(5)]
    peer.script(meanwhile(revoke(token), tool_calls(*calls)), text("never asked"))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")

    response = client.post("/assistant/api/messages/", {"message": "ping"}, format="json")

    assert response.json()["code"] == "token_revoked"
    assert decisions("ping") == [("denied", "rest")]  # the first, refused; the others never ran
    assert AuditEntry.objects.count() == 1
    assert len(peer.requests) == 1


# -- AG-UI --------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_over_ag_ui_a_token_revoked_while_the_model_thinks_stops_the_next_tool_call(
    asgi_live_server, use_llm, plain_user
):
    token, secret = tokens.issue(plain_user, name="copilot")
    peer = use_llm(TIMEOUT=LLM_TIMEOUT)
    two_pings(peer, revoke(token))

    with requests.post(
        f"{asgi_live_server}/assistant/agui/",
        json=run_input("ping twice"),
        headers={"Accept": "text/event-stream", "Authorization": f"Bearer {secret}"},
        stream=True,
        timeout=LLM_TIMEOUT,
    ) as response:
        events = list(parse(response.iter_lines(decode_unicode=True)))

    assert events[-1].type == EventType.RUN_ERROR
    assert events[-1].code == "token_revoked"
    assert [e.content for e in events if e.type == EventType.TOOL_CALL_RESULT] == [
        "pong for plain",
        events[-1].message,
    ]
    assert decisions("ping", "apong") == [("executed", "agui"), ("denied", "agui")]
    assert len(peer.requests) == 2


@pytest.mark.django_db(transaction=True)
def test_over_ag_ui_a_drf_token_deleted_while_the_model_thinks_stops_the_next_tool_call(
    asgi_live_server, use_llm, plain_user
):
    client = Agent(asgi_live_server, plain_user)  # (a DRF token)
    peer = use_llm(TIMEOUT=LLM_TIMEOUT)
    two_pings(peer, lambda: Token.objects.filter(user=plain_user).delete())

    events = client.run(run_input("ping twice"))

    assert (events[-1].type, events[-1].code) == (EventType.RUN_ERROR, "token_revoked")
    assert decisions("ping", "apong") == [("executed", "agui"), ("denied", "agui")]


def revoke_once_running(token: AccessToken) -> threading.Thread:
    """Revoke ``token`` from another thread as soon as a job of its user runs."""

    def revoke_it() -> None:
        try:
            deadline = time.monotonic() + LLM_TIMEOUT
            while not Job.objects.filter(status=Job.Status.RUNNING).exists():
                assert time.monotonic() < deadline, "the job never started"
                time.sleep(0.05)
            AccessToken.objects.get(pk=token.pk).revoke()
        finally:
            connections.close_all()

    return threading.Thread(target=revoke_it)


def streamed(server: str, secret: str, text: str, *, meanwhile: Callable[[], Any]) -> list[Any]:
    """An AG-UI run's events (keepalives skipped), ``meanwhile`` done once its tool call began."""
    with requests.post(
        f"{server}/assistant/agui/",
        json=run_input(text),
        headers={"Accept": "text/event-stream", "Authorization": f"Bearer {secret}"},
        stream=True,
        timeout=LLM_TIMEOUT,
    ) as response:
        events = []
        for event in parse(
            line for line in response.iter_lines(decode_unicode=True) if not line.startswith(":")
        ):
            events.append(event)
            if event.type == EventType.TOOL_CALL_END:
                meanwhile()
    return events


@pytest.mark.django_db(transaction=True)
def test_over_ag_ui_a_token_revoked_while_the_run_waits_on_its_job_ends_the_run_token_revoked(
    asgi_live_server, diagnostician
):
    # (the test project runs jobs inline, as Django does without a TASKS setting: the run waits)
    token, secret = tokens.issue(diagnostician, name="copilot")
    revoker = revoke_once_running(token)

    events = streamed(
        asgi_live_server, secret, "start job kind=wait seconds=2", meanwhile=revoker.start
    )
    revoker.join()

    assert (events[-1].type, events[-1].code) == (EventType.RUN_ERROR, "token_revoked")
    assert EventType.RUN_FINISHED not in {event.type for event in events}
    shown = [e.content for e in events if e.type == EventType.TOOL_CALL_RESULT]
    assert shown == [events[-1].message]  # not what the job's call came to
    assert decisions("start_job") == [("cancelled", "agui")]
    assert decisions("turn") == [("denied", "agui")]
    job = Job.objects.get()
    assert (job.status, job.result) == ("succeeded", "waited")  # the job goes on, as over MCP


@pytest.mark.django_db(transaction=True)
def test_over_ag_ui_a_token_revoked_while_a_tool_runs_stops_the_tool_at_once(
    asgi_live_server, plain_user
):
    token, secret = tokens.issue(plain_user, name="copilot")
    began = time.monotonic()

    events = streamed(asgi_live_server, secret, "slow sync seconds=30", meanwhile=revoke(token))

    assert time.monotonic() - began < 10  # (the tool stops when its stop token fires)
    assert (events[-1].type, events[-1].code) == (EventType.RUN_ERROR, "token_revoked")
    assert [e.content for e in events if e.type == EventType.TOOL_CALL_RESULT] == [
        events[-1].message
    ]
    assert decisions("slow_sync") == [("cancelled", "agui")]
    assert decisions("turn") == [("denied", "agui")]


# -- the websocket ------------------------------------------------------------------------------


SESSION_ENDINGS: dict[str, Callable[[Client, Any], Any]] = {
    "signed out": lambda browser, user: browser.logout(),
    "the password changed": lambda browser, user: change_password(user),
    "every session row deleted": lambda browser, user: Session.objects.all().delete(),
}


async def refused_and_closed(socket: Any) -> None:
    error = await receive(socket)
    closed = await socket.receive_output(timeout=WAIT)
    assert (error["name"], error["value"]["code"]) == ("assistant.error", "session_ended")
    assert "Sign in again" in error["value"]["message"]
    assert closed == {"type": "websocket.close", "code": 4401}


@pytest.mark.parametrize("ending", list(SESSION_ENDINGS))
@pytest.mark.django_db(transaction=True)
async def test_an_open_socket_whose_session_ended_runs_no_turn(open_socket, reader, ending):
    browser = await sync_to_async(signed_in)(reader)
    socket = await open_socket(cookie=cookie_of(browser))
    await send(socket, type="message", text="ping")
    assert (await receive_run(socket))[-1]["type"] == "RUN_FINISHED"  # signed in: it runs

    await sync_to_async(SESSION_ENDINGS[ending])(browser, reader)
    await send(socket, type="message", text="list orders")

    await refused_and_closed(socket)
    assert await Message.objects.acount() == 2  # the first turn's; nothing of the second
    assert not await AuditEntry.objects.filter(operation="list_orders").aexists()
    refused = [e async for e in AuditEntry.objects.filter(decision="denied")]
    assert [(e.operation, e.source, e.entities) for e in refused] == [
        ("start_turn", "websocket", {"request": "message"})
    ]


@pytest.mark.parametrize("ending", list(SESSION_ENDINGS))
@pytest.mark.django_db(transaction=True)
async def test_an_open_socket_whose_session_ended_cannot_confirm_an_action(
    open_socket, clerk, ending
):
    order = await Order.objects.acreate(reference="ORD-1")
    browser = await sync_to_async(signed_in)(clerk)
    socket = await open_socket(cookie=cookie_of(browser))
    await send(socket, type="message", text=f"approve order {order.pk}")
    (interrupt,) = (await receive_run(socket))[-1]["outcome"]["interrupts"]

    await sync_to_async(SESSION_ENDINGS[ending])(browser, clerk)
    await send(socket, type="confirm", action=interrupt["id"])

    await refused_and_closed(socket)
    assert (await PendingAction.objects.aget()).status == "pending"
    assert (await Order.objects.aget()).approvals == 0
    assert not await AuditEntry.objects.filter(decision="confirmed").aexists()


@pytest.mark.parametrize("frame", ["resume", "cancel_job"])
@pytest.mark.django_db(transaction=True)
async def test_an_open_socket_whose_session_ended_reads_and_cancels_nothing(
    open_socket, reader, frame
):
    browser = await sync_to_async(signed_in)(reader)
    socket = await open_socket(cookie=cookie_of(browser))
    await send(socket, type="message", text="ping")
    thread = (await receive_run(socket))[0]["threadId"]

    await sync_to_async(browser.logout)()
    await send(socket, type=frame, conversation=thread, job=thread)

    await refused_and_closed(socket)
    refused = [e async for e in AuditEntry.objects.filter(decision="denied")]
    assert [(e.operation, e.source) for e in refused] == [(frame, "websocket")]


@pytest.mark.django_db(transaction=True)
async def test_a_session_deleted_while_the_model_thinks_stops_the_sockets_next_tool_call(
    open_socket, use_llm, reader
):
    peer = use_llm(TIMEOUT=LLM_TIMEOUT)
    two_pings(peer, lambda: Session.objects.all().delete())
    browser = await sync_to_async(signed_in)(reader)
    socket = await open_socket(cookie=cookie_of(browser))

    await send(socket, type="message", text="ping twice")
    frames = await receive_run(socket)

    assert (frames[-1]["type"], frames[-1]["code"]) == ("RUN_ERROR", "session_ended")
    assert await sync_to_async(decisions)("ping", "apong") == [
        ("executed", "websocket"),
        ("denied", "websocket"),
    ]
    assert len(peer.requests) == 2


@pytest.mark.django_db(transaction=True)
async def test_a_session_ended_while_the_sockets_tool_runs_stops_the_tool_at_once(
    open_socket, reader
):
    browser = await sync_to_async(signed_in)(reader)
    socket = await open_socket(cookie=cookie_of(browser))
    await send(socket, type="message", text="slow sync seconds=30")
    await receive_until(socket, "TOOL_CALL_END")

    await sync_to_async(lambda: Session.objects.all().delete())()
    frames = await receive_run(socket)

    assert (frames[-1]["type"], frames[-1]["code"]) == ("RUN_ERROR", "session_ended")
    results = [frame["content"] for frame in frames if frame["type"] == "TOOL_CALL_RESULT"]
    assert results == [frames[-1]["message"]]
    assert await sync_to_async(decisions)("slow_sync") == [("cancelled", "websocket")]
    assert await sync_to_async(decisions)("turn") == [("denied", "websocket")]


@pytest.mark.django_db(transaction=True)
async def test_a_user_deactivated_while_the_socket_is_open_asks_the_model_nothing(
    open_socket, use_llm, reader
):
    peer = use_llm(TIMEOUT=LLM_TIMEOUT)
    peer.script(tool_calls(call("ping")), text("never asked"))
    browser = await sync_to_async(signed_in)(reader)
    socket = await open_socket(cookie=cookie_of(browser))
    await get_user_model().objects.filter(pk=reader.pk).aupdate(is_active=False)  # no signal

    await send(socket, type="message", text="ping")
    frames = await receive_run(socket)

    assert (frames[-1]["type"], frames[-1]["code"]) == ("RUN_ERROR", "account_inactive")
    assert peer.requests == []
    refused = [e async for e in AuditEntry.objects.all()]
    assert [(e.operation, e.decision) for e in refused] == [("llm_call", "denied")]


# -- what a check costs ---------------------------------------------------------------------------


@pytest.mark.django_db
def test_each_check_is_one_query_and_none_until_something_ends(
    plain_user, django_assert_num_queries, django_capture_on_commit_callbacks
):
    from assistant.access.credentials import Credential, of_bearer

    token, secret = tokens.issue(plain_user, name="ci")
    drf = Token.objects.create(user=plain_user)
    browser = signed_in(plain_user)
    credentials = [
        of_bearer(tokens.authenticate_bearer(secret)),
        Credential(kind="drf", user_id=plain_user.pk, key=drf.key),
        Credential(kind="session", user_id=plain_user.pk, key=browser.session.session_key),
    ]

    for credential in credentials:
        with django_assert_num_queries(1):
            assert credential.lapse() is None
    with django_assert_num_queries(0):  # found holding, and nothing ended since
        assert [credential.lapse() for credential in credentials] == [None] * 3

    with django_capture_on_commit_callbacks(execute=True):
        token.revoke()
        drf.delete()
        browser.logout()
    assert [credential.lapse().code for credential in credentials] == ["token_revoked"] * 2 + [
        "session_ended"
    ]


@pytest.mark.django_db
def test_an_oauth_tokens_check_is_one_query_and_names_its_lapse(
    clerk, django_assert_num_queries, django_capture_on_commit_callbacks
):
    from oauth2_provider.models import get_access_token_model

    from assistant.access.credentials import Credential
    from tests.oauth_tokens import issue_token

    issue_token(clerk, resource=["http://testserver/assistant/mcp/"])
    grant = get_access_token_model().objects.get()
    credential = Credential(kind="oauth", user_id=clerk.pk, token_id=grant.pk)

    with django_assert_num_queries(1):
        assert credential.lapse() is None
    grant.expires = timezone.now()
    with django_capture_on_commit_callbacks(execute=True):
        grant.save()
    assert credential.lapse().code == "token_expired"
    with django_capture_on_commit_callbacks(execute=True):
        grant.delete()  # (what django-oauth-toolkit's revocation does)
    assert credential.lapse().code == "token_revoked"
