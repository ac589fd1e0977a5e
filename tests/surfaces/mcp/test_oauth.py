"""The MCP endpoint as an OAuth 2.1 resource server, with django-oauth-toolkit as the issuer.

The official ``mcp`` client's OAuth provider registers itself (RFC 7591), signs the user in
through PKCE and asks for a token bound to the endpoint (RFC 8707), as a real MCP client does;
the user's consent is given by an HTTP client holding their session.
"""

from __future__ import annotations

import importlib.util
import re
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from asgiref.sync import sync_to_async
from django.test import Client as DjangoClient
from django.utils import timezone

from tests.conftest import REQUIRE_SERVICES

if importlib.util.find_spec("oauth2_provider") is None or importlib.util.find_spec("mcp") is None:
    reason = "needs the [oauth] and [mcp] extras (django-oauth-toolkit, mcp)"
    if REQUIRE_SERVICES:
        pytest.fail(f"ASSISTANT_REQUIRE_SERVICES=1: {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=True)

import httpx2
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)
from oauth2_provider.models import get_access_token_model, get_application_model

from assistant.checks import check_oauth
from assistant.dispatch.catalog import visible_tools
from assistant.models import AuditEntry
from tests.oauth_tokens import REDIRECT_URI, issue_token
from tests.testapp.models import Order

AccessToken = get_access_token_model()
Application = get_application_model()
METADATA_PATH = "/assistant/mcp/.well-known/oauth-protected-resource"


class MemoryStorage:
    """The client's token storage, in memory (one client run)."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


def session_cookie(user: Any) -> str:
    client = DjangoClient()
    client.force_login(user)
    return client.cookies["sessionid"].value


def hidden_inputs(html: str) -> dict[str, str]:
    fields = {}
    for tag in re.findall(r"<input[^>]*>", html):
        name = re.search(r'name="([^"]*)"', tag)
        value = re.search(r'value="([^"]*)"', tag)
        if name and 'type="hidden"' in tag:
            fields[name.group(1)] = (value.group(1) if value else "").replace("&amp;", "&")
    return fields


class SignedInBrowser:
    """The user at the authorization page: sees the consent form, approves it, hands the code on."""

    def __init__(self, server: str, user: Any) -> None:
        self.server = server
        self.user = user
        self.consent_pages: list[str] = []
        self.asked: dict[str, list[str]] = {}  # the authorization request's parameters
        self.result: AuthorizationCodeResult | None = None

    async def redirect_handler(self, authorization_url: str) -> None:
        self.asked = parse_qs(urlsplit(authorization_url).query)
        cookie = await sync_to_async(session_cookie)(self.user)
        async with httpx2.AsyncClient(cookies={"sessionid": cookie}) as browser:
            page = await browser.get(authorization_url)
            assert page.status_code == 200, page.text
            self.consent_pages.append(page.text)
            answer = await browser.post(
                authorization_url, data={**hidden_inputs(page.text), "allow": "Authorize"}
            )
        assert answer.status_code == 302, answer.text
        location = answer.headers["Location"]
        assert location.startswith(REDIRECT_URI)
        query = parse_qs(urlsplit(location).query)
        self.result = AuthorizationCodeResult(code=query["code"][0], state=query["state"][0])

    async def callback_handler(self) -> AuthorizationCodeResult:
        assert self.result is not None
        return self.result


def provider_for(url: str, browser: SignedInBrowser) -> Any:
    return OAuthClientProvider(
        server_url=url,
        client_metadata=OAuthClientMetadata(
            client_name="Test MCP client",
            redirect_uris=[REDIRECT_URI],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="none",
        ),
        storage=MemoryStorage(),
        redirect_handler=browser.redirect_handler,
        callback_handler=browser.callback_handler,
    )


async def list_and_call(url: str, key: str, operation: str, arguments: dict[str, Any]) -> Any:
    headers = {"Authorization": f"Bearer {key}"}
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        listed = await client.list_tools()
        called = await client.call_tool(operation, arguments)
    return [tool.name for tool in listed.tools], called


META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


def mcp_post(key: str | None = None) -> Any:
    headers = {"HTTP_AUTHORIZATION": f"Bearer {key}"} if key else {}
    return DjangoClient().post(
        "/assistant/mcp/",
        data={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/list",
            "params": {"_meta": META},
        },
        content_type="application/json",
        HTTP_ACCEPT="application/json, text/event-stream",
        HTTP_MCP_PROTOCOL_VERSION="2026-07-28",
        HTTP_MCP_METHOD="tools/list",
        **headers,
    )


# -- discovery ------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_request_without_a_token_is_told_where_the_resource_metadata_is() -> None:
    response = mcp_post()

    assert response.status_code == 401
    assert response.json()["code"] == "not_authenticated"
    assert response.headers["WWW-Authenticate"] == (
        'Bearer realm="assistant", '
        f'resource_metadata="http://testserver{METADATA_PATH}", scope="assistant"'
    )


def test_the_metadata_names_this_endpoint_and_the_toolkit_as_its_authorization_server() -> None:
    client = DjangoClient()

    document = client.get(METADATA_PATH)
    issuer = client.get("/.well-known/oauth-authorization-server/o").json()

    assert document.status_code == 200
    assert document.headers["Access-Control-Allow-Origin"] == "*"
    assert document.json() == {
        "resource": "http://testserver/assistant/mcp/",
        "authorization_servers": ["http://testserver/o"],
        "scopes_supported": ["assistant", "assistant:write", "assistant:read"],
        "bearer_methods_supported": ["header"],
        "resource_name": "django-ops-assistant (MCP)",
    }
    assert issuer["issuer"] == "http://testserver/o"
    assert issuer["registration_endpoint"] == "http://testserver/o/register/"
    assert "S256" in issuer["code_challenge_methods_supported"]


def test_a_browser_may_read_the_metadata_cross_origin() -> None:
    response = DjangoClient().options(
        METADATA_PATH,
        HTTP_ORIGIN="https://inspector.example",
        HTTP_ACCESS_CONTROL_REQUEST_METHOD="GET",
        HTTP_ACCESS_CONTROL_REQUEST_HEADERS="mcp-protocol-version",
    )

    assert response.status_code == 204
    assert response.headers["Access-Control-Allow-Origin"] == "*"
    assert "GET" in response.headers["Access-Control-Allow-Methods"]


def test_the_metadata_is_read_only() -> None:
    response = DjangoClient().post(METADATA_PATH)

    assert response.status_code == 405
    assert response.json()["code"] == "method_not_allowed"


def test_without_the_toolkit_there_is_no_metadata_and_no_pointer_to_it(settings: Any) -> None:
    settings.INSTALLED_APPS = [app for app in settings.INSTALLED_APPS if app != "oauth2_provider"]

    document = DjangoClient().get(METADATA_PATH)

    assert document.status_code == 404
    assert document.json()["code"] == "oauth_not_installed"


@pytest.mark.django_db
def test_without_the_toolkit_the_challenge_is_a_plain_bearer_one(settings: Any) -> None:
    settings.INSTALLED_APPS = [app for app in settings.INSTALLED_APPS if app != "oauth2_provider"]

    response = mcp_post()

    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"] == 'Bearer realm="assistant"'


# -- the whole flow, as an MCP client runs it -----------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_an_mcp_client_registers_signs_the_user_in_and_lists_their_tools(
    asgi_live_server: str, clerk: Any
) -> None:
    url = f"{asgi_live_server}/assistant/mcp/"
    browser = SignedInBrowser(asgi_live_server, clerk)

    async with (
        httpx2.AsyncClient(auth=provider_for(url, browser)) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        listed = await client.list_tools()
        pinged = await client.call_tool("ping", {})

    expected = await sync_to_async(visible_tools)(clerk)
    assert [tool.name for tool in listed.tools] == [tool.operation for tool in expected]
    assert "cancel_order" in {tool.name for tool in listed.tools}  # "assistant": the whole catalog
    assert pinged.is_error is False
    assert pinged.content[0].text == "pong for clerk"
    assert "Authorize Test MCP client?" in browser.consent_pages[0]
    assert browser.asked["code_challenge_method"] == ["S256"]  # PKCE
    assert browser.asked["resource"] == [url]  # RFC 8707, from the resource metadata
    assert browser.asked["scope"] == ["assistant"]  # from the 401's challenge

    token = await AccessToken.objects.select_related("application").aget(user=clerk)
    assert token.resource == [url]
    assert token.scope == "assistant"
    assert token.application.name == "Test MCP client"  # registered dynamically
    assert token.application.client_type == Application.CLIENT_PUBLIC
    entry = await AuditEntry.objects.filter(operation="ping").alatest("pk")
    assert entry.source == "mcp"
    assert "(Test MCP client)" in entry.client


# -- what a token may reach -----------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("scope", "reaches_guarded", "reaches_dangerous"),
    [("assistant:read", False, False), ("assistant:write", True, False), ("assistant", True, True)],
)
async def test_scopes_are_a_ceiling_on_the_listing_and_on_calls(
    asgi_live_server: str, clerk: Any, scope: str, reaches_guarded: bool, reaches_dangerous: bool
) -> None:
    url = f"{asgi_live_server}/assistant/mcp/"
    key = await sync_to_async(issue_token)(clerk, resource=[url], scope=scope)
    order = await Order.objects.acreate(reference="A-1")

    names, called = await list_and_call(url, key, "cancel_order", {"order_id": order.pk})

    assert ("approve_order" in names) is reaches_guarded
    assert ("cancel_order" in names) is reaches_dangerous
    assert "list_orders" in names
    if not reaches_dangerous:
        assert called.is_error is True
        assert called.structured_content["code"] == "token_scope"
        await order.arefresh_from_db()
        assert order.status != "cancelled"
        entry = await AuditEntry.objects.filter(operation="cancel_order").alatest("pk")
        assert (entry.decision, entry.source) == ("denied", "mcp")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("resource", "why"),
    [
        (["http://testserver/assistant/api/"], "bound to another resource on this site"),
        (["https://elsewhere.example/assistant/mcp/"], "bound to another site"),
        ([], "bound to no resource, which the toolkit would take anywhere"),
    ],
)
def test_a_token_not_bound_to_this_endpoint_is_refused(
    clerk: Any, resource: list[str], why: str
) -> None:
    key = issue_token(clerk, resource=resource)

    response = mcp_post(key)

    assert response.status_code == 401, why
    assert response.json()["code"] == "token_resource"
    assert 'error="invalid_token"' in response.headers["WWW-Authenticate"]
    assert "resource_metadata=" in response.headers["WWW-Authenticate"]


@pytest.mark.django_db
def test_a_token_bound_to_this_endpoint_is_accepted(clerk: Any) -> None:
    key = issue_token(clerk, resource=["http://testserver/assistant/mcp/"])

    response = mcp_post(key)

    assert response.status_code == 200, response.content
    assert "ping" in {tool["name"] for tool in response.json()["result"]["tools"]}


@pytest.mark.django_db
def test_an_inactive_users_token_is_refused(make_user: Any) -> None:
    former = make_user("former", "testapp.view_order", is_active=False)
    key = issue_token(former, resource=["http://testserver/assistant/mcp/"])

    response = mcp_post(key)

    assert response.status_code == 401
    assert response.json()["code"] == "account_inactive"


@pytest.mark.django_db
def test_an_expired_token_is_refused(clerk: Any) -> None:
    key = issue_token(
        clerk,
        resource=["http://testserver/assistant/mcp/"],
        expires=timezone.now() - timedelta(seconds=1),
    )

    response = mcp_post(key)

    assert response.status_code == 401
    assert response.json()["code"] == "token_expired"


@pytest.mark.django_db
def test_a_token_with_none_of_the_assistants_scopes_is_refused(clerk: Any) -> None:
    key = issue_token(clerk, resource=["http://testserver/assistant/mcp/"], scope="read write")

    response = mcp_post(key)

    assert response.status_code == 401
    assert response.json()["code"] == "token_scope"


@pytest.mark.django_db
def test_an_unknown_token_is_refused(clerk: Any) -> None:
    response = mcp_post("no-such-token")

    assert response.status_code == 401
    assert response.json()["code"] == "invalid_token"


# -- the project's configuration ------------------------------------------------------------------


@pytest.mark.django_db
def test_the_test_project_is_configured_as_mcp_clients_need() -> None:
    assert check_oauth() == []


def test_e015_pkce_is_not_required(settings: Any) -> None:
    settings.OAUTH2_PROVIDER = {**settings.OAUTH2_PROVIDER, "PKCE_REQUIRED": False}

    assert [message.id for message in check_oauth()] == ["assistant.E015"]


def test_e016_the_toolkit_does_not_offer_the_assistants_scopes(settings: Any) -> None:
    settings.OAUTH2_PROVIDER = {
        **settings.OAUTH2_PROVIDER,
        "SCOPES": {"read": "Read", "write": "Write"},
        "DEFAULT_SCOPES": ["read"],
    }

    messages = check_oauth()

    assert [message.id for message in messages] == ["assistant.E016"]
    assert "'assistant:read'" in messages[0].msg
    assert "OAUTH2_PROVIDER['SCOPES']" in messages[0].hint


@pytest.mark.parametrize(
    "changed",
    [{"REFRESH_TOKEN_REUSE_PROTECTION": False}, {"ROTATE_REFRESH_TOKEN": False}],
)
def test_w012_a_reused_refresh_token_would_not_end_its_family(
    settings: Any, changed: dict[str, bool]
) -> None:
    settings.OAUTH2_PROVIDER = {**settings.OAUTH2_PROVIDER, **changed}

    messages = check_oauth()

    assert [message.id for message in messages] == ["assistant.W012"]
    assert "REFRESH_TOKEN_REUSE_PROTECTION" in messages[0].hint


def test_w011_the_toolkit_without_its_urls(settings: Any) -> None:
    settings.ROOT_URLCONF = "tests.urls_without_admin"

    assert [message.id for message in check_oauth()] == ["assistant.W011"]


def test_w011_the_issuers_metadata_not_where_mcp_clients_look(settings: Any) -> None:
    settings.ROOT_URLCONF = "tests.urls_oauth_prefixed_only"

    messages = check_oauth()

    assert [message.id for message in messages] == ["assistant.W011"]
    assert "/.well-known/oauth-authorization-server/o" in messages[0].msg


def test_w011_not_when_the_issuer_is_named_outright(settings: Any) -> None:
    settings.ROOT_URLCONF = "tests.urls_without_admin"
    settings.OAUTH2_PROVIDER = {
        **settings.OAUTH2_PROVIDER,
        "OAUTH2_PROTECTED_RESOURCE_AUTHORIZATION_SERVERS": ["https://login.example.com"],
    }

    assert check_oauth() == []


@pytest.mark.django_db(transaction=True)
async def test_a_refreshed_token_stays_bound_to_the_endpoint(
    asgi_live_server: str, clerk: Any
) -> None:
    url = f"{asgi_live_server}/assistant/mcp/"
    browser = SignedInBrowser(asgi_live_server, clerk)
    provider = provider_for(url, browser)
    async with (
        httpx2.AsyncClient(auth=provider) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        await client.list_tools()
    first = await AccessToken.objects.aget(user=clerk)

    await AccessToken.objects.filter(pk=first.pk).aupdate(expires=timezone.now())
    provider.context.token_expiry_time = 1.0  # the client sees it expire too, and refreshes
    async with (
        httpx2.AsyncClient(auth=provider) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        listed = await client.list_tools()

    assert "ping" in {tool.name for tool in listed.tools}
    assert len(browser.consent_pages) == 1  # a refresh, not a second sign-in
    latest = await AccessToken.objects.filter(user=clerk).alatest("pk")
    assert latest.pk != first.pk
    assert latest.resource == [url]


@pytest.mark.django_db(transaction=True)
async def test_a_refresh_token_used_twice_ends_every_token_of_its_sign_in(
    asgi_live_server: str, clerk: Any
) -> None:
    url = f"{asgi_live_server}/assistant/mcp/"
    provider = provider_for(url, SignedInBrowser(asgi_live_server, clerk))
    async with (
        httpx2.AsyncClient(auth=provider) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        await client.list_tools()
    stolen = provider.context.current_tokens
    assert stolen is not None
    assert provider.context.client_info is not None
    refresh = {
        "grant_type": "refresh_token",
        "refresh_token": stolen.refresh_token,
        "client_id": provider.context.client_info.client_id,
    }

    async with httpx2.AsyncClient() as http:
        first = await http.post(f"{asgi_live_server}/o/token/", data=refresh)  # the thief
        again = await http.post(f"{asgi_live_server}/o/token/", data=refresh)  # the client
        listed = await http.post(
            url,
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": META}},
            headers={
                "Authorization": f"Bearer {first.json()['access_token']}",
                "Accept": "application/json, text/event-stream",
                "MCP-Protocol-Version": "2026-07-28",
                "Mcp-Method": "tools/list",
            },
        )

    assert first.status_code == 200
    assert (again.status_code, again.json()["error"]) == (400, "invalid_grant")
    assert (listed.status_code, listed.json()["code"]) == (401, "invalid_token")
