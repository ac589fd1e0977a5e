"""Every answer under the API's prefix is JSON, whatever the path or the method."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from tests.clients import API

UNSAFE = ["post", "put", "patch", "delete"]
UNKNOWN_PATHS = [
    f"{API}/nothing-here/",
    f"{API}/actions/not-a-uuid/confirm/",
    f"{API}/validation-tasks/abc/run/",
    f"{API}/jobs/x/cancel",
    f"{API}/admin/conversations/%F3%90%93%B8%0A/",  # a newline in the path
    f"{API}/%0A",
]


@pytest.mark.django_db
@pytest.mark.parametrize("method", ["get", "head", "options", *UNSAFE])
@pytest.mark.parametrize("path", UNKNOWN_PATHS)
def test_any_method_on_an_unknown_path_is_a_json_404(method: str, path: str) -> None:
    client = Client(enforce_csrf_checks=True)
    body = {"data": "{}", "content_type": "application/json"} if method in UNSAFE else {}

    response = getattr(client, method)(path, **body)

    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    if method != "head":
        assert response.json() == {"code": "not_found", "detail": "No such API endpoint."}


@pytest.mark.django_db
@pytest.mark.parametrize("method", UNSAFE)
def test_a_signed_in_browser_without_a_csrf_token_also_gets_the_json_404(
    method: str, plain_user: Any
) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(plain_user)

    response = getattr(client, method)(f"{API}/nothing-here/")

    assert response.status_code == 404
    assert response.json()["code"] == "not_found"
