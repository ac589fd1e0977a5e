"""Saying no usefully: a refused tool names what it needs (when its existence is no secret), a
deactivated account is told so, and a tool's or a job's ending is labelled as it happened."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.test import Client
from guardian.shortcuts import assign_perm
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from assistant.access.permissions import permission_name
from assistant.dispatch.door import dispatch
from assistant.jobs import completion_text, job_event
from assistant.models import AuditEntry, Job
from assistant.turns.planners import Intent
from assistant.turns.planners.keywords import plan
from assistant.turns.runs import run_turn
from tests.clients import API, client_for, dispatch_call
from tests.openai_peer import call, text, tool_calls
from tests.openai_peer import openai_peer as openai_peer  # the fixtures
from tests.openai_peer import use_llm as use_llm
from tests.sockets import WAIT, outcomes, receive, receive_run, send
from tests.testapp import assistant_tools as testapp_tools
from tests.testapp.models import Order
from tests.turns.reading import read_told
from tests.validations import orders as orders  # a fixture
from tests.validations import run_now as run_now  # a fixture
from tests.validations import task_for

CANCEL_REFUSED = "You can't use cancel_order: it needs “Can change order”. Ask an operator for it."
DEACTIVATED = "Your account has been deactivated. Ask an operator to reactivate it."


# -- the permission, in human words ----------------------------------------------------------


@pytest.mark.parametrize(
    ("perm", "name"),
    [
        ("testapp.change_order", "Can change order"),  # a model's default permission
        ("testapp.approve_order", "Can approve order"),  # one of Meta.permissions
        ("auth.change_user", "Can change user"),
        ("assistant.vault_write", "Can write vault (assistant)"),  # a tool pair's own
        ("assistant.nothing_here", "assistant.nothing_here"),  # nothing defines it: as spelt
        ("nowhere.view_thing", "nowhere.view_thing"),
    ],
)
@pytest.mark.django_db
def test_a_permission_is_named_as_django_stores_it(perm: str, name: str) -> None:
    from django.contrib.auth.models import Permission

    assert permission_name(perm) == name
    app_label, codename = perm.split(".")
    stored = Permission.objects.filter(content_type__app_label=app_label, codename=codename)
    assert list(stored.values_list("name", flat=True)) in ([name], [])


# -- the keyword planner and dispatch ---------------------------------------------------------


@pytest.mark.django_db
def test_asking_for_a_tool_of_a_domain_one_works_in_names_the_missing_permission(reader):
    order = Order.objects.create(reference="ORD-1")

    intents = plan(f"cancel order {order.pk}", reader)
    outcome = dispatch("cancel_order", {}, user=reader)

    assert intents == [Intent(operation="cancel_order", source="keywords", refusal=True)]
    assert (outcome.decision, outcome.code, outcome.status) == ("denied", "permission_denied", 403)
    assert outcome.text == CANCEL_REFUSED
    assert AuditEntry.objects.get().decision == "denied"
    assert Order.objects.get().status == "open"


@pytest.mark.django_db
def test_a_tool_needing_several_permissions_names_only_those_missing(clerk):
    # merge_orders needs change and delete; clerk may change orders
    outcome = dispatch("merge_orders", {}, user=clerk)

    assert outcome.text == (
        "You can't use merge_orders: it needs “Can delete order”. Ask an operator for it."
    )


@pytest.mark.django_db
def test_a_tool_of_a_domain_the_user_has_no_part_in_stays_unnamed(reader, plain_user):
    # reader works with orders and reports, not the vault; plain works with nothing
    assert plan("store secret label=a secret=b", reader) == [
        Intent(operation="show_capabilities", source="keywords")
    ]
    assert plan("cancel order 4", plain_user) == [
        Intent(operation="show_capabilities", source="keywords")
    ]
    refused = dispatch("store_secret", {"label": "a", "secret": "b"}, user=reader)
    assert (refused.code, refused.text) == ("unknown_operation", "Unknown operation 'store_secret'")


@pytest.mark.django_db
def test_a_refused_call_is_refused_before_its_entities_are_read(reader):
    refused = dispatch_call(client_for(reader), "cancel_order", order_id="not a number")

    assert refused.status_code == 403
    body = refused.json()
    assert (body["code"], body["detail"], body["errors"]) == (
        "permission_denied",
        CANCEL_REFUSED,
        None,
    )
    assert AuditEntry.objects.get().decision == "denied"


@pytest.mark.django_db
def test_an_order_the_user_may_not_approve_still_looks_missing(make_user):
    mine, theirs = Order.objects.bulk_create([Order(reference="A"), Order(reference="B")])
    olga = make_user("olga", "testapp.view_order")
    assign_perm("testapp.approve_order", olga, mine)
    olga = get_user_model().objects.get(pk=olga.pk)

    forbidden = dispatch("approve_order", {"order_id": theirs.pk}, user=olga)
    missing = dispatch("approve_order", {"order_id": 999_999}, user=olga)

    assert (forbidden.decision, forbidden.code) == (missing.decision, missing.code)
    assert forbidden.text == missing.text
    assert "Can approve" not in forbidden.text


@pytest.mark.django_db(transaction=True)
async def test_over_the_websocket_the_reply_says_what_the_tool_needs(open_socket, reader):
    order = await Order.objects.acreate(reference="ORD-1")
    socket = await open_socket(reader)

    await send(socket, type="message", text=f"cancel order {order.pk}")
    frames = await receive_run(socket)

    (outcome,) = outcomes(frames)
    assert (outcome["operation"], outcome["decision"], outcome["code"]) == (
        "cancel_order",
        "denied",
        "permission_denied",
    )
    assert outcome["text"] == CANCEL_REFUSED
    result = [frame for frame in frames if frame["type"] == "TOOL_CALL_RESULT"]
    assert [frame["content"] for frame in result] == [CANCEL_REFUSED]
    assert CANCEL_REFUSED in "".join(
        frame["delta"] for frame in frames if frame["type"] == "TEXT_MESSAGE_CONTENT"
    )


@pytest.mark.django_db
def test_a_tool_the_model_calls_outside_the_catalog_is_answered_with_what_it_needs(use_llm, reader):
    peer = use_llm()
    peer.script(tool_calls(call("cancel_order", {"order_id": 1})), text("Ask an operator."))

    run_turn(reader, "cancel order 1")

    (fed,) = [m for m in peer.requests[1]["messages"] if m["role"] == "tool"]
    assert read_told(fed["content"])["text"] == CANCEL_REFUSED


# -- a deactivated account ------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_a_deactivated_user_is_told_so_when_the_chat_connects(open_socket, make_user):
    gone = await sync_to_async(make_user)("gone", "testapp.view_order", is_active=False)
    socket = await open_socket(gone)

    error = await receive(socket)
    closed = await socket.receive_output(timeout=WAIT)

    assert (error["name"], error["value"]) == (
        "assistant.error",
        {"code": "account_inactive", "message": DEACTIVATED},
    )
    assert closed == {"type": "websocket.close", "code": 4403}


@pytest.mark.django_db(transaction=True)
async def test_a_session_of_a_user_deactivated_since_is_told_so_not_just_signed_out(
    open_socket, reader
):
    browser = Client()
    await sync_to_async(browser.force_login)(reader)
    await get_user_model().objects.filter(pk=reader.pk).aupdate(is_active=False)
    socket = await open_socket(cookie=f"sessionid={browser.cookies['sessionid'].value}")

    error = await receive(socket)
    closed = await socket.receive_output(timeout=WAIT)

    assert error["value"]["code"] == "account_inactive"
    assert closed["code"] == 4403


@pytest.mark.django_db(transaction=True)
async def test_a_user_deactivated_while_chatting_is_told_so_on_the_next_turn(open_socket, reader):
    socket = await open_socket(reader)
    await get_user_model().objects.filter(pk=reader.pk).aupdate(is_active=False)
    await sync_to_async(lambda: get_user_model().objects.get(pk=reader.pk).save())()

    await send(socket, type="message", text="list orders")
    frames = await receive_run(socket)

    (outcome,) = outcomes(frames)
    assert (outcome["decision"], outcome["code"], outcome["text"]) == (
        "denied",
        "account_inactive",
        DEACTIVATED,
    )


@pytest.mark.django_db
def test_over_rest_a_deactivated_users_token_is_refused_with_account_inactive(reader):
    token = Token.objects.create(user=reader)
    get_user_model().objects.filter(pk=reader.pk).update(is_active=False)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")

    refused = client.get(f"{API}/tools/")
    unknown = APIClient(HTTP_AUTHORIZATION="Token not-a-token").get(f"{API}/tools/")

    assert refused.status_code == 401
    assert refused.json() == {"code": "account_inactive", "detail": DEACTIVATED}
    assert (unknown.status_code, unknown.json()["code"]) == (401, "authentication_failed")


@pytest.mark.django_db
def test_over_rest_a_deactivated_users_session_is_refused_with_account_inactive(reader):
    client = client_for(reader)
    get_user_model().objects.filter(pk=reader.pk).update(is_active=False)

    refused = client.get(f"{API}/tools/")
    anonymous = APIClient().get(f"{API}/tools/")

    assert refused.status_code == 401
    assert refused.json() == {"code": "account_inactive", "detail": DEACTIVATED}
    assert (anonymous.status_code, anonymous.json()["code"]) == (401, "not_authenticated")


# -- a validation job that found failures ----------------------------------------------------


@pytest.mark.django_db
def test_a_validation_run_that_found_failures_is_a_job_that_says_how_many(
    run_now, make_user, orders
):
    alice = make_user("alice", "testapp.view_order")
    run = run_now(task_for(owner=alice), user=alice)
    job = Job.objects.get(pk=run.job_id)

    event = job_event(job)

    assert (event["status"], event["failures"]) == ("succeeded", 1)
    assert job.result_data == {
        "run": run.pk,
        "status": "failed",
        "passed": 2,
        "failures": 1,
        "warnings": 0,
    }
    assert completion_text(job).startswith("Validation run finished with 1 failure: ")
    assert client_for(alice).get(f"{API}/jobs/{job.pk}/").json()["failures"] == 1


@pytest.mark.django_db
def test_a_validation_run_with_no_failures_is_a_plain_success(run_now, make_user):
    Order.objects.create(reference="ORD-1", amount=5)
    alice = make_user("alice", "testapp.view_order")
    run = run_now(task_for(owner=alice), user=alice)
    job = Job.objects.get(pk=run.job_id)

    assert (job_event(job)["status"], job_event(job)["failures"]) == ("succeeded", 0)
    assert completion_text(job).startswith("Validation run finished: ")


# -- a statement timeout -------------------------------------------------------------------

ENDLESS_SQLITE = (
    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n"
)


@pytest.mark.django_db(transaction=True)
async def test_a_query_stopped_by_the_statement_timeout_reaches_the_chat_as_timeout(
    open_socket, make_user, monkeypatch
):
    monkeypatch.setattr(testapp_tools.TestDatabase, "statement_timeout", 0.3)
    analyst = await sync_to_async(make_user)(
        "analyst", "assistant.database_read", "assistant.database_query"
    )
    socket = await open_socket(analyst)
    for _ in range(50):  # the socket's database toolset may still be starting (not_ready)
        await send(socket, type="message", text=f'run query "{ENDLESS_SQLITE}"')
        asked = await receive_run(socket)
        if "not_ready" not in {outcome["decision"] for outcome in outcomes(asked)}:
            break
        await asyncio.sleep(0.1)
    assert asked[-1]["type"] == "RUN_FINISHED", asked[-1]
    (interrupt,) = asked[-1]["outcome"]["interrupts"]

    await send(socket, type="confirm", action=interrupt["id"])
    answered = await receive_run(socket)

    (outcome,) = outcomes(answered)
    assert (outcome["operation"], outcome["decision"], outcome["code"]) == (
        "run_readonly_query",
        "timeout",
        "timeout",
    )
    assert outcome["text"].startswith("The query took longer than 0.3 s and was stopped")
    entry = await AuditEntry.objects.filter(operation="run_readonly_query").alatest("pk")
    assert entry.decision == AuditEntry.Decision.TIMEOUT
