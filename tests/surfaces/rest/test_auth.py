"""The REST API's doors: authentication, CSRF, JSON errors, throttling, the OpenAPI schema."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.core.cache import cache
from django.middleware.csrf import get_token
from django.test import Client, RequestFactory, override_settings
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from assistant.models import AuditEntry
from tests.clients import API, PUBLIC_TOOLS, client_for, dispatch_call, operations

# --- authentication, CSRF and errors -------------------------------------------------------

PROTECTED = [
    ("get", "/tools/"),
    ("post", "/messages/"),
    ("post", "/dispatch/"),
    ("get", "/actions/"),
    ("post", f"/actions/{uuid.UUID(int=1)}/confirm/"),
    ("post", f"/actions/{uuid.UUID(int=1)}/cancel/"),
    ("get", "/conversations/"),
    ("delete", "/conversations/"),
    ("get", f"/conversations/{uuid.UUID(int=1)}/"),
    ("patch", f"/conversations/{uuid.UUID(int=1)}/"),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("method", "path"), PROTECTED)
def test_anonymous_requests_get_a_json_401_never_a_redirect(method: str, path: str) -> None:
    response = getattr(APIClient(), method)(f"{API}{path}")

    assert response.status_code == 401
    assert response["Content-Type"] == "application/json"
    assert response.json()["code"] == "not_authenticated"
    assert response["WWW-Authenticate"]
    assert AuditEntry.objects.count() == 0


@pytest.mark.django_db
def test_token_authentication_works(plain_user: Any) -> None:
    token = Token.objects.create(user=plain_user)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")

    tools = client.get(f"{API}/tools/")
    ping = dispatch_call(client, "ping")

    assert tools.status_code == 200
    assert operations(tools.json()["tools"]) == PUBLIC_TOOLS
    assert ping.status_code == 200
    assert ping.json()["text"] == "pong for plain"


@pytest.mark.django_db
def test_a_wrong_token_is_401(plain_user: Any) -> None:
    Token.objects.create(user=plain_user)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")

    response = client.get(f"{API}/tools/")

    assert response.status_code == 401
    assert response.json()["code"] == "authentication_failed"
    assert response["WWW-Authenticate"]


@pytest.mark.django_db
def test_token_requests_need_no_csrf_token(plain_user: Any) -> None:
    token = Token.objects.create(user=plain_user)
    client = Client(enforce_csrf_checks=True)

    response = client.post(
        f"{API}/dispatch/",
        {"operation": "ping"},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Token {token.key}",
    )

    assert response.status_code == 200
    assert response.json()["decision"] == "executed"


@pytest.fixture
def browser(plain_user: Any) -> Client:
    """A signed-in browser session that enforces CSRF like a real one."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(plain_user)
    return client


@pytest.mark.django_db
def test_a_session_post_without_csrf_token_is_403(browser: Client) -> None:
    response = browser.post(
        f"{API}/dispatch/", {"operation": "ping"}, content_type="application/json"
    )

    assert response.status_code == 403
    body = response.json()
    assert body["code"] == "permission_denied"
    assert "CSRF" in body["detail"]
    assert AuditEntry.objects.count() == 0


@pytest.mark.django_db
def test_a_session_post_with_the_csrf_token_is_accepted(browser: Client) -> None:
    page = RequestFactory().get("/")
    token = get_token(page)
    browser.cookies[settings.CSRF_COOKIE_NAME] = page.META["CSRF_COOKIE"]

    response = browser.post(
        f"{API}/dispatch/",
        {"operation": "ping"},
        content_type="application/json",
        HTTP_X_CSRFTOKEN=token,
    )

    assert response.status_code == 200
    assert response.json()["text"] == "pong for plain"


@pytest.mark.django_db
def test_a_session_get_needs_no_csrf_token(browser: Client) -> None:
    response = browser.get(f"{API}/tools/")

    assert response.status_code == 200


@pytest.mark.django_db
def test_malformed_json_is_400_parse_error(plain_user: Any) -> None:
    response = client_for(plain_user).post(
        f"{API}/dispatch/", '{"operation": ', content_type="application/json"
    )

    assert response.status_code == 400
    assert response.json()["code"] == "parse_error"
    assert AuditEntry.objects.count() == 0


@pytest.mark.django_db
def test_a_body_that_is_not_json_is_415(plain_user: Any) -> None:
    response = client_for(plain_user).post(
        f"{API}/dispatch/", "operation=ping", content_type="application/x-www-form-urlencoded"
    )

    assert response.status_code == 415
    assert response.json()["code"] == "unsupported_media_type"


@pytest.mark.django_db
@pytest.mark.parametrize("signed_in", [True, False])
def test_an_unknown_api_url_is_a_json_404(plain_user: Any, signed_in: bool) -> None:
    client = client_for(plain_user) if signed_in else APIClient()

    response = client.get(f"{API}/no-such-endpoint/")

    assert response.status_code == 404
    assert response["Content-Type"].startswith("application/json")
    assert response.json()["code"] == "not_found"


@pytest.mark.django_db
def test_a_method_the_endpoint_lacks_is_405(plain_user: Any) -> None:
    response = client_for(plain_user).get(f"{API}/dispatch/")

    assert response.status_code == 405
    assert response.json()["code"] == "method_not_allowed"


@pytest.fixture
def empty_cache() -> Iterator[None]:
    cache.clear()
    yield
    cache.clear()


@pytest.mark.django_db
@pytest.mark.usefixtures("empty_cache")
def test_requests_over_the_rate_are_429_with_retry_after(plain_user: Any, reader: Any) -> None:
    client = client_for(plain_user)
    with override_settings(ASSISTANT={**settings.ASSISTANT, "THROTTLE_RATE": "3/min"}):
        allowed = [client.get(f"{API}/tools/").status_code for _ in range(3)]
        throttled = client.get(f"{API}/tools/")
        someone_else = client_for(reader).get(f"{API}/tools/")

    assert allowed == [200, 200, 200]
    assert throttled.status_code == 429
    assert throttled.json()["code"] == "throttled"
    assert 0 < int(throttled["Retry-After"]) <= 60
    assert someone_else.status_code == 200


HOST_REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.AllowAny"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.BrowsableAPIRenderer"],
    "EXCEPTION_HANDLER": "rest_framework.views.exception_handler",
}


@pytest.mark.django_db
def test_the_hosts_rest_framework_settings_do_not_change_our_responses(plain_user: Any) -> None:
    from rest_framework.settings import api_settings
    from rest_framework.views import exception_handler as drf_exception_handler

    token = Token.objects.create(user=plain_user)
    with override_settings(REST_FRAMEWORK=HOST_REST_FRAMEWORK):
        assert api_settings.EXCEPTION_HANDLER is drf_exception_handler
        anonymous = APIClient().get(f"{API}/tools/")
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
        tools = client.get(f"{API}/tools/")
        unknown = dispatch_call(client, "launch_rockets")
        bad_style = client.get(f"{API}/tools/", {"style": "yaml"})
        session = client_for(plain_user).get(f"{API}/tools/")

    assert anonymous.status_code == 401
    assert anonymous["Content-Type"] == "application/json"
    assert anonymous.json()["code"] == "not_authenticated"
    assert tools.status_code == 200
    assert tools["Content-Type"] == "application/json"
    assert operations(tools.json()["tools"]) == PUBLIC_TOOLS
    assert unknown.status_code == 404
    assert unknown.json()["code"] == "unknown_operation"
    assert bad_style.status_code == 400
    assert bad_style.json()["code"] == "invalid"
    assert session.status_code == 200


# --- the OpenAPI schema --------------------------------------------------------------------

API_PATHS = [
    "/assistant/api/tools/",
    "/assistant/api/messages/",
    "/assistant/api/dispatch/",
    "/assistant/api/actions/",
    "/assistant/api/actions/{action_id}/confirm/",
    "/assistant/api/actions/{action_id}/cancel/",
    "/assistant/api/conversations/",
    "/assistant/api/conversations/{conversation_id}/",
    "/assistant/api/admin/conversations/",
    "/assistant/api/admin/conversations/{conversation_id}/",
    "/assistant/api/admin/conversations/{conversation_id}/history/",
    "/assistant/api/admin/audit/",
]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("query", "headers"),
    [
        ({"format": "json"}, {}),
        ({}, {"HTTP_ACCEPT": "application/vnd.oai.openapi+json"}),
    ],
)
def test_the_openapi_schema_lists_our_endpoints(
    query: dict[str, str], headers: dict[str, str]
) -> None:
    response = APIClient().get(f"{API}/schema/", query, **headers)

    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/vnd.oai.openapi+json")
    document = response.json()
    assert document["openapi"].startswith("3.")
    assert set(API_PATHS) <= set(document["paths"])
    assert set(document["paths"]["/assistant/api/dispatch/"]) == {"post"}
    assert set(document["paths"]["/assistant/api/conversations/{conversation_id}/"]) == {
        "get",
        "patch",
        "delete",
    }
