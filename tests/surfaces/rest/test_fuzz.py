"""Schemathesis over the API's own OpenAPI schema, as every kind of caller the API knows.

Each generated request is sent as anonymous, viewer, operator and admin, with a token and with a
browser session (CSRF token included): no answer may be a server error, break the schema, or be
an HTML page.
"""

from __future__ import annotations

import os
import secrets
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from django.test import Client
from hypothesis import HealthCheck, Phase, settings
from rest_framework.authtoken.models import Token
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from assistant.access.tokens import issue
from tests.testapp.models import Order

# minutes of fuzzing: run on the newest Python and Django (the code fuzzed is the same on each)
pytestmark = pytest.mark.slow

API = "/assistant/api/"
# Cases per operation: 25 operations x 12 cases x 8 callers take 1-2 minutes on 2 cores; set
# ASSISTANT_FUZZ_EXAMPLES higher for a deeper run by hand.
EXAMPLES = int(os.environ.get("ASSISTANT_FUZZ_EXAMPLES", "12"))
CASES: Counter[str] = Counter()  # requests sent and failures found, printed at the end


@dataclass(frozen=True)
class Caller:
    name: str
    headers: dict[str, str]
    cookies: dict[str, str] | None = None  # the WSGI client drops a Cookie header


@schemathesis.check
def json_error_bodies(ctx: Any, response: Any, case: Any) -> bool | None:
    """Every answer under the API's prefix is JSON, never Django's HTML error or CSRF page."""
    content_type = response.headers.get("content-type", [""])[0]
    if response.status_code != 204 and not content_type.startswith(
        ("application/json", "application/vnd.oai.openapi+json")
    ):
        raise AssertionError(f"{response.status_code} answered as {content_type!r}, not JSON")
    return None


CHECKS = [
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
    content_type_conformance,
    json_error_bodies,
]


def session_caller(name: str, user: Any) -> Caller:
    """A signed-in browser: its session cookie, and the CSRF token as cookie and header."""
    client = Client()
    client.force_login(user)
    csrf = secrets.token_hex(16)  # a 32-character secret is a valid unmasked token
    cookies = {"sessionid": client.cookies["sessionid"].value, "csrftoken": csrf}
    return Caller(f"{name} (session)", {"X-CSRFToken": csrf}, cookies)


def token_headers(user: Any) -> dict[str, str]:
    return {"Authorization": f"Token {Token.objects.create(user=user).key}"}


def bearer_headers(user: Any) -> dict[str, str]:
    """A personal access token with a ceiling (guarded at most)."""
    return {"Authorization": f"Bearer {issue(user, name='fuzz', max_risk='guarded')[1]}"}


@pytest.fixture
def callers(make_user: Any, django_user_model: Any, settings: Any, tmp_path: Path) -> list[Caller]:
    """Anonymous, then each role with a token and with a session (the operator with a personal
    access token too)."""
    settings.MEDIA_ROOT = tmp_path / "media"
    viewer = make_user("viewer", "testapp.view_order", "assistant.reports_read")
    operator = make_user(
        "operator",
        "testapp.view_order",
        "testapp.change_order",
        "testapp.approve_order",
        "assistant.view_auditentry",
        "assistant.add_validationtask",
        "assistant.view_job",
        is_staff=True,
    )
    admin = django_user_model.objects.create_superuser("admin", "admin@example.com", "pw")
    Order.objects.create(reference="A-1")
    roles = {"viewer": viewer, "operator": operator, "admin": admin}
    return [
        Caller("anonymous", {}),
        *(Caller(f"{name} (token)", token_headers(user)) for name, user in roles.items()),
        Caller("operator (bearer)", bearer_headers(operator)),
        *(session_caller(name, user) for name, user in roles.items()),
    ]


@pytest.fixture
def _connections_kept() -> Iterator[None]:
    """As Django's test client does: a request's end must not close the test's transaction."""
    for signal in (request_started, request_finished):
        signal.disconnect(close_old_connections)
    yield
    for signal in (request_started, request_finished):
        signal.connect(close_old_connections)


@pytest.fixture(scope="module", autouse=True)
def _report_counts() -> Iterator[None]:
    yield
    print(f"\nschemathesis: {CASES['requests']} requests, {CASES['failures']} failures")


# Loaded at collection (the schema view needs no database); schemathesis' lazy fixture loader
# reads a pytest node attribute pytest 9 no longer has.
schema = schemathesis.openapi.from_wsgi(f"{API}schema/?format=json", get_wsgi_application())


@pytest.mark.django_db
@pytest.mark.usefixtures("_connections_kept")
@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize="ASSISTANT_FUZZ_EXAMPLES" not in os.environ,  # the same cases in every CI run
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)
def test_every_caller_gets_a_documented_json_answer(case: Any, callers: list[Caller]) -> None:
    for caller in callers:
        CASES["requests"] += 1
        try:
            case.call_and_validate(headers=caller.headers, cookies=caller.cookies, checks=CHECKS)
        except BaseException:  # schemathesis' FailureGroup
            CASES["failures"] += 1
            print(f"as {caller.name}:")
            raise


@pytest.mark.django_db
@pytest.mark.usefixtures("_connections_kept")
def test_the_fuzzing_callers_are_really_signed_in_and_pass_the_csrf_check(
    callers: list[Caller],
) -> None:
    operation = schema[f"{API}dispatch/"]["POST"]
    statuses = {}
    for caller in callers:
        case = operation.Case(body={"operation": "ping", "entities": {}})
        statuses[caller.name] = case.call(
            headers=caller.headers, cookies=caller.cookies
        ).status_code

    assert statuses == {"anonymous": 401} | {
        caller.name: 200 for caller in callers if caller.name != "anonymous"
    }


@pytest.mark.django_db
@pytest.mark.usefixtures("_connections_kept")
def test_a_session_caller_without_the_csrf_header_is_refused(callers: list[Caller]) -> None:
    session = next(caller for caller in callers if caller.name == "operator (session)")
    case = schema[f"{API}dispatch/"]["POST"].Case(body={"operation": "ping", "entities": {}})

    response = case.call(cookies=session.cookies)

    assert response.status_code == 403
    assert response.json()["code"] == "permission_denied"
    assert "CSRF" in response.json()["detail"]
