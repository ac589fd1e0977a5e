"""MCP over Streamable HTTP: the official client against a live server, both protocol revisions."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import httpx2
import mcp_types as types
import pytest
from asgiref.sync import sync_to_async
from django.test import Client as DjangoClient
from django.utils import timezone
from rest_framework.authtoken.models import Token

from assistant.dispatch.catalog import get_catalog
from assistant.models import AuditEntry, PendingAction
from tests.mcp_clients import MODES, PATH, issue, mcp_client
from tests.race_jobs import workers as workers  # a fixture
from tests.testapp.models import Order

pytestmark = pytest.mark.django_db(transaction=True)


def approve_form(answer: bool = True) -> Any:
    """An elicitation callback: the human answers the client's form (and sees what was asked)."""
    asked: list[Any] = []

    async def callback(ctx: Any, params: Any) -> types.ElicitResult:
        asked.append(params)
        if getattr(params, "mode", "form") == "url":
            return types.ElicitResult(action="accept")
        return types.ElicitResult(action="accept", content={"approved": answer})

    callback.asked = asked  # type: ignore[attr-defined]
    return callback


def names(listed: types.ListToolsResult) -> list[str]:
    return [tool.name for tool in listed.tools]


def audit(**filters: Any) -> list[AuditEntry]:
    return list(AuditEntry.objects.filter(**filters).order_by("id"))


# -- listing --------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_each_user_lists_exactly_the_tools_the_rest_api_and_the_chat_offer(
    asgi_live_server: str, mode: str, plain_user: Any, reader: Any, clerk: Any, superuser: Any
) -> None:
    for user in (plain_user, reader, clerk, superuser):
        secret = await issue(user)
        async with mcp_client(asgi_live_server, secret, mode) as client:
            listed = await client.list_tools()
        drf = await sync_to_async(Token.objects.create)(user=user)
        async with httpx2.AsyncClient() as http:
            rest = await http.get(
                f"{asgi_live_server}/assistant/api/tools/",
                headers={"Authorization": f"Token {drf.key}"},
            )
        chat = await sync_to_async(get_catalog)(user)
        rest_names = [tool["operation"] for tool in rest.json()["tools"]]
        assert names(listed) == rest_names == [tool["function"]["name"] for tool in chat], user
    assert "cancel_order" not in names(listed) or user.is_superuser


async def test_the_server_introduces_itself_by_the_distribution_name(
    asgi_live_server: str, reader: Any
) -> None:
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"},
        },
    }
    async with httpx2.AsyncClient() as http:
        response = await http.post(
            asgi_live_server + PATH,
            json=initialize,
            headers={
                "Accept": "application/json, text/event-stream",
                "Authorization": f"Bearer {await issue(reader)}",
            },
        )

    assert response.status_code == 200
    assert '"serverInfo":{"name":"django-ops-assistant"' in response.text.replace(" ", "")


@pytest.mark.parametrize("mode", MODES)
async def test_listed_tools_carry_the_catalogs_schema_and_annotations_from_the_declaration(
    asgi_live_server: str, mode: str, superuser: Any
) -> None:
    async with mcp_client(asgi_live_server, await issue(superuser), mode) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    superusers_catalog = await sync_to_async(get_catalog)(superuser)
    catalog = {tool["function"]["name"]: tool["function"] for tool in superusers_catalog}
    assert tools["list_orders"].input_schema == catalog["list_orders"]["parameters"]
    assert tools["list_orders"].annotations.read_only_hint is True
    assert tools["approve_order"].annotations.read_only_hint is False
    assert tools["approve_order"].annotations.destructive_hint is False
    assert tools["cancel_order"].annotations.destructive_hint is True
    assert tools["cancel_order"].title == "Cancel an order for good"
    assert tools["cancel_order"].description == catalog["cancel_order"]["description"]


async def test_a_tokens_ceiling_narrows_the_list_and_refuses_calls_beyond_it(
    asgi_live_server: str, superuser: Any
) -> None:
    secret = await issue(superuser, max_risk="safe")
    async with mcp_client(asgi_live_server, secret) as client:
        listed = names(await client.list_tools())
        refused = await client.call_tool("start_job", {"kind": "count"})
    assert "list_orders" in listed
    assert "approve_order" not in listed
    assert "start_job" not in listed
    assert refused.is_error
    assert refused.structured_content["code"] == "token_scope"
    [entry] = await sync_to_async(audit)(operation="start_job")
    assert (entry.decision, entry.source) == ("denied", "mcp")


# -- calling --------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_a_call_runs_through_dispatch_and_is_audited_as_mcp_with_the_client(
    asgi_live_server: str, mode: str, reader: Any
) -> None:
    await sync_to_async(Order.objects.create)(reference="ORD-1", owner=reader, amount=5)
    client_info = types.Implementation(name="inspector-test", version="9.1")
    async with mcp_client(
        asgi_live_server, await issue(reader), mode, client_info=client_info
    ) as client:
        result = await client.call_tool("list_orders", {})
    assert not result.is_error
    assert "ORD-1" in result.content[0].text
    assert result.structured_content == {"result": ["ORD-1"]}  # the ToolResult.data
    [entry] = await sync_to_async(audit)(operation="list_orders")
    assert (entry.decision, entry.source, entry.user_id) == ("executed", "mcp", reader.pk)
    assert entry.client == "inspector-test 9.1 (laptop)"
    assert entry.request_ip == "127.0.0.1"


@pytest.mark.parametrize("mode", MODES)
async def test_denials_invalid_arguments_and_unknown_tools_are_error_results_with_stable_codes(
    asgi_live_server: str, mode: str, reader: Any
) -> None:
    order = await sync_to_async(Order.objects.create)(reference="ORD-2", owner=reader)
    async with mcp_client(asgi_live_server, await issue(reader), mode) as client:
        denied = await client.call_tool("cancel_order", {"order_id": order.pk})
        invalid = await client.call_tool("echo_types", {"count": "many"})
        unknown = await client.call_tool("no_such_tool", {})
    assert denied.is_error
    assert denied.structured_content["code"] == "permission_denied"
    assert invalid.is_error
    assert invalid.structured_content["code"] == "invalid_entities"
    assert unknown.is_error
    assert unknown.structured_content["code"] == "unknown_operation"
    decisions = [(e.operation, e.decision) for e in await sync_to_async(audit)(source="mcp")]
    assert decisions == [
        ("cancel_order", "denied"),
        ("echo_types", "invalid"),
        ("no_such_tool", "unknown"),
    ]
    assert (await sync_to_async(Order.objects.get)(pk=order.pk)).status == "open"


async def test_a_failing_tool_is_an_error_result_not_a_protocol_error(
    asgi_live_server: str, reader: Any
) -> None:
    async with mcp_client(asgi_live_server, await issue(reader)) as client:
        result = await client.call_tool("explode", {})
    assert result.is_error
    assert result.structured_content["code"] == "tool_failed"
    assert "Traceback" not in result.content[0].text


@pytest.mark.parametrize("mode", MODES)
async def test_cancelling_a_call_from_the_client_fires_its_stop_token(
    asgi_live_server: str, mode: str, reader: Any
) -> None:
    async with mcp_client(asgi_live_server, await issue(reader), mode) as client:
        call = asyncio.ensure_future(client.call_tool("slow_sync", {"seconds": 20}))
        await asyncio.sleep(1.0)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        for _ in range(100):
            entries = await sync_to_async(audit)(operation="slow_sync")
            if entries:
                break
            await asyncio.sleep(0.1)
    [entry] = entries
    assert entry.decision == "cancelled"
    assert entry.duration_ms < 15_000  # stopped early, not after its 20 s


# -- confirmation ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_a_guarded_confirmation_is_answered_in_the_clients_form_and_runs_once(
    asgi_live_server: str, mode: str, clerk: Any
) -> None:
    order = await sync_to_async(Order.objects.create)(reference="ORD-3", owner=clerk)
    form = approve_form(True)
    async with mcp_client(
        asgi_live_server, await issue(clerk), mode, elicitation_callback=form
    ) as client:
        result = await client.call_tool("approve_order", {"order_id": order.pk})
    assert not result.is_error
    assert result.content[0].text == "Approved ORD-3"
    [asked] = form.asked
    action = await sync_to_async(PendingAction.objects.get)()
    assert asked.mode == "form"
    assert action.summary in asked.message
    assert (await sync_to_async(Order.objects.get)(pk=order.pk)).approvals == 1
    decisions = [e.decision for e in await sync_to_async(audit)(operation="approve_order")]
    assert decisions == ["confirmation_requested", "confirmed"]
    action = await sync_to_async(PendingAction.objects.get)()
    assert action.status == "confirmed"
    assert action.decided_by_id == clerk.pk
    assert action.summary == f"Approve an order (order_id: {order.pk})"


@pytest.mark.parametrize("mode", MODES)
async def test_declining_in_the_form_refuses_the_action_and_changes_nothing(
    asgi_live_server: str, mode: str, clerk: Any
) -> None:
    order = await sync_to_async(Order.objects.create)(reference="ORD-4", owner=clerk)
    async with mcp_client(
        asgi_live_server, await issue(clerk), mode, elicitation_callback=approve_form(False)
    ) as client:
        result = await client.call_tool("approve_order", {"order_id": order.pk})
    assert result.is_error
    assert result.structured_content["code"] == "cancelled"
    assert (await sync_to_async(Order.objects.get)(pk=order.pk)).approvals == 0
    action = await sync_to_async(PendingAction.objects.get)()
    assert action.status == "cancelled"


async def test_the_form_is_not_offered_when_settings_send_every_confirmation_to_the_page(
    asgi_live_server: str, clerk: Any, settings: Any
) -> None:
    settings.ASSISTANT = {**settings.ASSISTANT, "MCP_ELICITATION": "never"}
    order = await sync_to_async(Order.objects.create)(reference="ORD-5", owner=clerk)
    form = approve_form(True)
    async with mcp_client(
        asgi_live_server, await issue(clerk), elicitation_callback=form
    ) as client:
        result = await client.call_tool("approve_order", {"order_id": order.pk})
    assert not result.is_error
    assert result.structured_content["status"] == "confirmation_requested"
    assert [asked.mode for asked in form.asked] == ["url"]  # pointed at the approvals page
    assert (await sync_to_async(Order.objects.get)(pk=order.pk)).approvals == 0


def confirm_over_rest(base_url: str, user: Any, action_id: str) -> httpx2.Response:
    """Another HTTP client: the user, signed in, approving on the product's own API."""
    django = DjangoClient()
    django.force_login(user)
    session = django.cookies["sessionid"].value
    csrf = "x" * 32  # the double-submit pair a browser would hold
    with httpx2.Client(base_url=base_url) as http:
        http.cookies.set("sessionid", session)
        http.cookies.set("csrftoken", csrf)
        page = http.get(f"/assistant/approvals/?action={action_id}")
        assert page.status_code == 200
        assert action_id in page.text
        return http.post(
            f"/assistant/api/actions/{action_id}/confirm/",
            json={},
            headers={"X-CSRFToken": csrf, "Referer": base_url + "/"},
        )


@pytest.mark.parametrize("mode", MODES)
async def test_a_dangerous_action_is_approved_on_our_page_and_the_retry_returns_its_one_run(
    asgi_live_server: str, mode: str, superuser: Any
) -> None:
    order = await sync_to_async(Order.objects.create)(reference="ORD-6", owner=superuser)
    form = approve_form(True)  # a form would say yes at once: it must never be asked
    secret = await issue(superuser)
    async with mcp_client(asgi_live_server, secret, mode, elicitation_callback=form) as client:
        first = await client.call_tool("cancel_order", {"order_id": order.pk})
        assert not first.is_error
        waiting = first.structured_content
        assert waiting["status"] == "confirmation_requested"
        assert waiting["approval_url"] == (
            f"{asgi_live_server}/assistant/approvals/?action={waiting['action_id']}"
        )
        assert [asked.mode for asked in form.asked] == ["url"]
        assert form.asked[0].url == waiting["approval_url"]
        again = await client.call_tool("cancel_order", {"order_id": order.pk})
        assert again.structured_content["action_id"] == waiting["action_id"]  # no second action
        assert (await sync_to_async(Order.objects.get)(pk=order.pk)).status == "open"

        approved = await sync_to_async(confirm_over_rest)(
            asgi_live_server, superuser, waiting["action_id"]
        )
        assert approved.status_code == 200, approved.text

        retried = await client.call_tool("cancel_order", {"order_id": order.pk})
        assert not retried.is_error
        assert retried.content[0].text == f"Cancelled order {order.pk}"
        # asked once more, later: a new request, not the delivered one
        fresh = await client.call_tool("cancel_order", {"order_id": order.pk})
        assert fresh.structured_content["action_id"] != waiting["action_id"]
    decisions = [e.decision for e in await sync_to_async(audit)(operation="cancel_order")]
    assert decisions == ["confirmation_requested", "confirmed", "confirmation_requested"]
    assert await sync_to_async(PendingAction.objects.count)() == 2


async def test_a_client_without_elicitation_is_told_where_to_approve(
    asgi_live_server: str, clerk: Any
) -> None:
    order = await sync_to_async(Order.objects.create)(reference="ORD-7", owner=clerk)
    async with mcp_client(asgi_live_server, await issue(clerk)) as client:
        result = await client.call_tool("approve_order", {"order_id": order.pk})
    assert not result.is_error
    text = result.content[0].text
    assert "Waiting for approval: " in text
    assert "/assistant/approvals/?action=" in text
    action = await sync_to_async(PendingAction.objects.get)()
    assert result.structured_content["action_id"] == str(action.pk)
    assert result.structured_content["expires_at"] == action.expires_at.isoformat()


async def test_a_rejected_action_is_what_the_retry_returns(
    asgi_live_server: str, clerk: Any
) -> None:
    from assistant.dispatch.confirmation import cancel_action

    order = await sync_to_async(Order.objects.create)(reference="ORD-8", owner=clerk)
    async with mcp_client(asgi_live_server, await issue(clerk)) as client:
        waiting = await client.call_tool("approve_order", {"order_id": order.pk})
        await sync_to_async(cancel_action)(
            waiting.structured_content["action_id"], user=clerk, source="rest"
        )
        retried = await client.call_tool("approve_order", {"order_id": order.pk})
    assert retried.is_error
    assert retried.structured_content["code"] == "cancelled"
    assert (await sync_to_async(Order.objects.get)(pk=order.pk)).approvals == 0


async def test_another_tokens_retry_does_not_reach_the_action(
    asgi_live_server: str, clerk: Any
) -> None:
    from assistant.dispatch.confirmation import confirm_action

    order = await sync_to_async(Order.objects.create)(reference="ORD-9", owner=clerk)
    async with mcp_client(asgi_live_server, await issue(clerk, name="one")) as client:
        waiting = await client.call_tool("approve_order", {"order_id": order.pk})
    await sync_to_async(confirm_action)(
        waiting.structured_content["action_id"], user=clerk, source="rest"
    )
    async with mcp_client(asgi_live_server, await issue(clerk, name="two")) as other:
        result = await other.call_tool("approve_order", {"order_id": order.pk})
    assert result.structured_content["status"] == "confirmation_requested"
    assert result.structured_content["action_id"] != waiting.structured_content["action_id"]


# -- jobs -----------------------------------------------------------------------------------------


async def test_a_call_that_starts_a_job_reports_progress_and_ends_with_the_jobs_result(
    asgi_live_server: str, diagnostician: Any
) -> None:
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message))

    async with mcp_client(asgi_live_server, await issue(diagnostician)) as client:
        result = await client.call_tool(
            "start_job", {"kind": "count", "steps": 2}, progress_callback=on_progress
        )
    assert not result.is_error
    assert result.content[0].text == "0 orders"
    assert result.structured_content["status"] == "succeeded"
    assert progress
    assert progress[-1][:2] == (100.0, 100.0)


# -- authentication -------------------------------------------------------------------------------


async def post(base_url: str, headers: dict[str, str] | None = None, **options: Any) -> Any:
    """A stateless (2026-07-28) tools/list, as raw HTTP."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/list",
        "params": {
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            }
        },
    }
    async with httpx2.AsyncClient() as http:
        return await http.post(
            base_url + PATH,
            json=body,
            headers={
                "Accept": "application/json, text/event-stream",
                "MCP-Protocol-Version": "2026-07-28",
                "MCP-Method": "tools/list",
                **(headers or {}),
            },
            **options,
        )


async def test_a_request_without_a_token_is_401_never_an_empty_list(asgi_live_server: str) -> None:
    response = await post(asgi_live_server)
    assert response.status_code == 401
    assert response.json()["code"] == "not_authenticated"
    assert response.headers["WWW-Authenticate"].startswith('Bearer realm="assistant"')


async def test_a_session_cookie_is_not_a_credential_here(
    asgi_live_server: str, superuser: Any
) -> None:
    django = await sync_to_async(DjangoClient)()
    await sync_to_async(django.force_login)(superuser)
    cookie = f"sessionid={django.cookies['sessionid'].value}"
    response = await post(asgi_live_server, {"Cookie": cookie})
    assert response.status_code == 401


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"revoked_at": timezone.now()}, "token_revoked"),
        ({"expires_at": timezone.now() - timedelta(seconds=1)}, "token_expired"),
        ({"digest": "0" * 64}, "invalid_token"),
    ],
)
async def test_revoked_expired_and_unknown_tokens_are_refused(
    asgi_live_server: str, reader: Any, change: dict[str, Any], code: str
) -> None:
    from assistant.models import AccessToken

    secret = await issue(reader)
    await sync_to_async(AccessToken.objects.update)(**change)
    response = await post(asgi_live_server, {"Authorization": f"Bearer {secret}"})
    assert response.status_code == 401
    assert response.json()["code"] == code
    assert 'error="invalid_token"' in response.headers["WWW-Authenticate"]


async def test_an_inactive_users_token_is_refused(asgi_live_server: str, reader: Any) -> None:
    secret = await issue(reader)
    reader.is_active = False
    await sync_to_async(reader.save)()
    response = await post(asgi_live_server, {"Authorization": f"Bearer {secret}"})
    assert response.status_code == 401
    assert response.json()["code"] == "account_inactive"


async def test_a_drf_token_is_a_bearer_token(asgi_live_server: str, reader: Any) -> None:
    drf = await sync_to_async(Token.objects.create)(user=reader)
    async with mcp_client(asgi_live_server, drf.key) as client:
        listed = names(await client.list_tools())
    assert "list_orders" in listed
    assert "cancel_order" not in listed


async def test_a_cross_site_origin_is_refused_and_the_same_origin_is_not(
    asgi_live_server: str, reader: Any
) -> None:
    auth = {"Authorization": f"Bearer {await issue(reader)}"}
    evil = await post(asgi_live_server, {**auth, "Origin": "https://evil.example"})
    same = await post(asgi_live_server, {**auth, "Origin": asgi_live_server})
    assert evil.status_code == 403
    assert evil.json()["code"] == "origin_not_allowed"
    assert same.status_code == 200


async def test_a_host_outside_allowed_hosts_is_refused(asgi_live_server: str, reader: Any) -> None:
    auth = {"Authorization": f"Bearer {await issue(reader)}"}
    response = await post(asgi_live_server, {**auth, "Host": "attacker.example"})
    assert response.status_code == 400


async def test_a_session_belongs_to_the_token_that_opened_it(
    asgi_live_server: str, reader: Any, clerk: Any
) -> None:
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"},
        },
    }
    accept = {"Accept": "application/json, text/event-stream"}
    async with httpx2.AsyncClient() as http:
        opened = await http.post(
            asgi_live_server + PATH,
            json=init,
            headers={**accept, "Authorization": f"Bearer {await issue(reader)}"},
        )
        session = opened.headers["mcp-session-id"]
        hijack = await http.post(
            asgi_live_server + PATH,
            json={"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}},
            headers={
                **accept,
                "Authorization": f"Bearer {await issue(clerk)}",
                "Mcp-Session-Id": session,
                "MCP-Protocol-Version": "2025-11-25",
            },
        )
    assert opened.status_code == 200
    assert hijack.status_code == 404  # as if the session did not exist


@pytest.mark.postgres
async def test_progress_arrives_while_a_real_worker_runs_the_job(
    asgi_live_server: str, diagnostician: Any, workers: Any
) -> None:
    await sync_to_async(workers.start)()
    progress: list[tuple[float, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, message))

    async with mcp_client(asgi_live_server, await issue(diagnostician)) as client:
        result = await client.call_tool(
            "start_job", {"kind": "wait", "seconds": 2}, progress_callback=on_progress
        )
    assert result.content[0].text == "waited"
    assert (10.0, "waiting") in progress  # reported by the worker while the call was open
    assert result.structured_content["status"] == "succeeded"


async def test_a_request_state_replayed_with_other_arguments_approves_nothing(
    asgi_live_server: str, clerk: Any
) -> None:
    first = await sync_to_async(Order.objects.create)(reference="ORD-10", owner=clerk)
    other = await sync_to_async(Order.objects.create)(reference="ORD-11", owner=clerk)
    approved = {"approval": types.ElicitResult(action="accept", content={"approved": True})}
    async with mcp_client(
        asgi_live_server, await issue(clerk), "2026-07-28", elicitation_callback=approve_form()
    ) as client:
        asked = await client.session.call_tool(
            "approve_order", {"order_id": first.pk}, allow_input_required=True
        )
        assert isinstance(asked, types.InputRequiredResult)
        replayed = await client.session.call_tool(
            "approve_order",
            {"order_id": other.pk},
            input_responses=approved,
            request_state=asked.request_state,
        )
    assert replayed.is_error
    assert replayed.structured_content["code"] == "invalid_request_state"
    assert [o.approvals for o in await sync_to_async(list)(Order.objects.order_by("pk"))] == [0, 0]
    action = await sync_to_async(PendingAction.objects.get)()
    assert action.status == "pending"
