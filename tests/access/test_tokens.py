"""Personal access tokens: issued hashed, shown once, revocable, bounded by a ceiling everywhere."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from assistant.access.tokens import Ceiling, authenticate_bearer, ceiling_of, issue
from assistant.core.registry import RiskLevel, registry
from assistant.dispatch.catalog import get_catalog, visible_tools
from assistant.dispatch.door import dispatch
from assistant.exceptions import AccountInactive, InvalidToken
from assistant.models import AccessToken, AuditEntry, PendingAction
from assistant.turns.runs import run_turn
from tests.clients import API, PUBLIC_TOOLS, client_for, dispatch_call, operations
from tests.openai_peer import openai_peer as openai_peer  # the fixtures
from tests.openai_peer import text
from tests.openai_peer import use_llm as use_llm
from tests.testapp.models import Order

pytestmark = pytest.mark.django_db

SAFE_ONLY = Ceiling(max_risk=RiskLevel.SAFE)


def bearer_client(secret: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


def session_client(user: Any) -> APIClient:
    return client_for(user)


def create_token(user: Any, **fields: Any) -> Any:
    return session_client(user).post(f"{API}/tokens/", {"name": "ci", **fields}, format="json")


@pytest.fixture
def order() -> Order:
    return Order.objects.create(reference="A-1")


# --- issuing and the stored row ------------------------------------------------------------


def test_a_token_is_stored_as_its_digest_and_a_prefix_never_as_its_secret(plain_user: Any) -> None:
    token, secret = issue(plain_user, name="laptop")

    token.refresh_from_db()
    assert secret.startswith("dop_")
    assert secret.startswith(token.key_prefix)
    assert token.digest == AccessToken.digest_of(secret)
    assert secret not in {token.digest, token.key_prefix, token.name}
    assert str(token) == f"laptop ({token.key_prefix}…)"
    assert token.is_usable


def test_two_tokens_never_share_a_secret(plain_user: Any) -> None:
    _, first = issue(plain_user, name="a")
    _, second = issue(plain_user, name="a")

    assert first != second


def test_a_token_without_risk_or_operations_has_no_ceiling(plain_user: Any) -> None:
    bare, _ = issue(plain_user, name="bare")
    bounded, _ = issue(plain_user, name="b", max_risk="guarded", operations=["ping", "ping"])

    assert ceiling_of(bare) is None
    assert ceiling_of(bounded) == Ceiling(
        max_risk=RiskLevel.GUARDED, operations=frozenset({"ping"})
    )
    assert bounded.operations == ["ping"]


def test_a_ceiling_allows_tools_up_to_its_risk_and_among_its_operations() -> None:
    only_ping = Ceiling(operations=frozenset({"ping"}))

    assert SAFE_ONLY.allows(registry.get("list_orders"))
    assert not SAFE_ONLY.allows(registry.get("approve_order"))
    assert not SAFE_ONLY.allows(registry.get("cancel_order"))
    assert Ceiling(max_risk=RiskLevel.GUARDED).allows(registry.get("approve_order"))
    assert only_ping.allows(registry.get("ping"))
    assert not only_ping.allows(registry.get("apong"))


# --- authenticate_bearer -------------------------------------------------------------------


def test_a_personal_token_signs_in_its_user_under_its_ceiling(clerk: Any) -> None:
    token, secret = issue(clerk, name="deploy bot", max_risk="safe")

    bearer = authenticate_bearer(secret)

    assert (bearer.user, bearer.kind, bearer.name, bearer.token_id) == (
        clerk,
        "personal",
        "deploy bot",
        token.pk,
    )
    assert bearer.ceiling == SAFE_ONLY


def test_a_drf_token_key_signs_in_its_user_with_no_ceiling(plain_user: Any) -> None:
    key = Token.objects.create(user=plain_user).key

    bearer = authenticate_bearer(key)

    assert (bearer.user, bearer.kind, bearer.name, bearer.ceiling) == (
        plain_user,
        "drf",
        "DRF token",
        None,
    )


@pytest.mark.parametrize("key", ["", "   ", "nonsense", "dop_not-a-token", "dop_\x00", "x" * 600])
def test_an_unknown_key_is_an_invalid_token(plain_user: Any, key: str) -> None:
    issue(plain_user, name="real")

    with pytest.raises(InvalidToken) as refused:
        authenticate_bearer(key)

    assert refused.value.code == "invalid_token"
    assert refused.value.status == 401


def test_a_revoked_token_is_refused_as_revoked(plain_user: Any) -> None:
    token, secret = issue(plain_user, name="old")
    assert token.revoke()
    assert not token.revoke()  # once

    with pytest.raises(InvalidToken) as refused:
        authenticate_bearer(secret)

    assert refused.value.code == "token_revoked"


def test_an_expired_token_is_refused_as_expired(plain_user: Any) -> None:
    _, secret = issue(plain_user, name="old", expires_at=timezone.now() - timedelta(seconds=1))

    with pytest.raises(InvalidToken) as refused:
        authenticate_bearer(secret)

    assert refused.value.code == "token_expired"


def test_an_inactive_users_tokens_are_refused(plain_user: Any) -> None:
    _, secret = issue(plain_user, name="laptop")
    key = Token.objects.create(user=plain_user).key
    plain_user.is_active = False
    plain_user.save()

    for credential in (secret, key):
        with pytest.raises(AccountInactive):
            authenticate_bearer(credential)


def test_using_a_token_records_when_it_was_last_used(plain_user: Any) -> None:
    token, secret = issue(plain_user, name="laptop")
    assert token.last_used_at is None

    authenticate_bearer(secret)

    token.refresh_from_db()
    assert token.last_used_at is not None
    long_ago = timezone.now() - timedelta(hours=1)
    AccessToken.objects.filter(pk=token.pk).update(last_used_at=long_ago)
    authenticate_bearer(secret)
    token.refresh_from_db()
    assert token.last_used_at > long_ago


# --- the ceiling in the catalog and in dispatch --------------------------------------------


def test_the_catalog_under_a_ceiling_holds_only_what_it_allows(clerk: Any) -> None:
    everything = operations([{"operation": tool.operation} for tool in visible_tools(clerk)])
    safe = [tool.operation for tool in visible_tools(clerk, ceiling=SAFE_ONLY)]

    assert {"approve_order", "cancel_order", "list_orders"} <= set(everything)
    assert "list_orders" in safe
    assert "approve_order" not in safe
    assert "cancel_order" not in safe
    assert [spec["function"]["name"] for spec in get_catalog(clerk, ceiling=SAFE_ONLY)] == safe


def test_dispatch_refuses_a_tool_outside_the_ceiling_and_audits_the_client(
    clerk: Any, order: Order
) -> None:
    outcome = dispatch(
        "approve_order",
        {"order_id": order.pk},
        user=clerk,
        source="rest",
        ceiling=SAFE_ONLY,
        client="deploy bot",
    )

    assert (outcome.decision, outcome.code, outcome.status) == ("denied", "token_scope", 403)
    entry = AuditEntry.objects.get(pk=outcome.audit_id)
    assert (entry.operation, entry.decision, entry.client) == (
        "approve_order",
        "denied",
        "deploy bot",
    )
    assert not PendingAction.objects.exists()


# --- the REST API with a bearer token ------------------------------------------------------


def test_the_api_takes_a_personal_token_as_bearer(plain_user: Any) -> None:
    _, secret = issue(plain_user, name="laptop")

    tools = bearer_client(secret).get(f"{API}/tools/")
    ping = dispatch_call(bearer_client(secret), "ping")

    assert tools.status_code == 200
    assert operations(tools.json()["tools"]) == PUBLIC_TOOLS
    assert (ping.status_code, ping.json()["text"]) == (200, "pong for plain")
    assert AuditEntry.objects.get().client == "laptop"


def test_the_api_takes_a_drf_token_key_as_bearer_and_as_token(plain_user: Any) -> None:
    key = Token.objects.create(user=plain_user).key
    as_token = APIClient()
    as_token.credentials(HTTP_AUTHORIZATION=f"Token {key}")

    assert dispatch_call(bearer_client(key), "ping").status_code == 200
    assert dispatch_call(as_token, "ping").status_code == 200


def test_the_tool_list_over_a_bounded_token_holds_only_what_it_allows(clerk: Any) -> None:
    _, secret = issue(clerk, name="bot", max_risk="safe")
    _, only_ping = issue(clerk, name="pinger", operations=["ping"])

    inventory = bearer_client(secret).get(f"{API}/tools/").json()["tools"]
    openai = bearer_client(secret).get(f"{API}/tools/", {"style": "openai"}).json()["tools"]
    pinger = bearer_client(only_ping).get(f"{API}/tools/").json()["tools"]
    session = session_client(clerk).get(f"{API}/tools/").json()["tools"]

    assert "approve_order" in operations(session)
    assert operations(inventory) == sorted(
        tool.operation for tool in visible_tools(clerk, ceiling=SAFE_ONLY)
    )
    assert "approve_order" not in operations(inventory)
    assert sorted(spec["function"]["name"] for spec in openai) == operations(inventory)
    assert operations(pinger) == ["ping"]


def test_a_call_outside_the_tokens_ceiling_is_refused_and_audited(clerk: Any, order: Order) -> None:
    _, secret = issue(clerk, name="deploy bot", max_risk="safe")

    response = dispatch_call(bearer_client(secret), "approve_order", order_id=order.pk)

    assert response.status_code == 403
    assert (response.json()["code"], response.json()["decision"]) == ("token_scope", "denied")
    entry = AuditEntry.objects.get()
    assert (entry.operation, entry.decision, entry.source, entry.client, entry.user) == (
        "approve_order",
        "denied",
        "rest",
        "deploy bot",
        clerk,
    )
    assert not PendingAction.objects.exists()


def test_a_turn_over_a_bounded_token_cannot_reach_past_it(clerk: Any, order: Order) -> None:
    _, secret = issue(clerk, name="bot", max_risk="safe")
    client = bearer_client(secret)

    approve = client.post(
        f"{API}/messages/", {"message": f"approve order {order.pk}"}, format="json"
    )
    help_ = client.post(f"{API}/messages/", {"message": "what can you do"}, format="json")

    assert approve.status_code == 201
    [refused] = approve.json()["outcomes"]
    assert (refused["operation"], refused["decision"], refused["code"]) == (
        "approve_order",
        "denied",
        "token_scope",
    )
    assert approve.json()["pending_actions"] == []
    [capabilities] = help_.json()["outcomes"]
    offered = sorted(tool["operation"] for tool in capabilities["data"])
    assert offered == sorted(tool.operation for tool in visible_tools(clerk, ceiling=SAFE_ONLY))
    assert set(AuditEntry.objects.values_list("client", flat=True)) == {"bot"}


def test_the_language_model_is_offered_only_what_the_ceiling_allows(
    use_llm: Any, clerk: Any
) -> None:
    peer = use_llm()
    peer.script(text("Hi."), text("Hi."))

    run_turn(clerk, "hello")
    run_turn(clerk, "hello", ceiling=SAFE_ONLY, client="bot")

    everything, bounded = (
        [tool["function"]["name"] for tool in request["tools"]] for request in peer.requests
    )
    assert "approve_order" in everything
    assert bounded == [tool.operation for tool in visible_tools(clerk, ceiling=SAFE_ONLY)]


def test_confirming_over_a_bounded_token_is_refused_past_its_ceiling(
    clerk: Any, order: Order
) -> None:
    _, secret = issue(clerk, name="bot", max_risk="safe")
    asked = dispatch_call(session_client(clerk), "approve_order", order_id=order.pk).json()
    action = asked["pending_action"]["id"]

    response = bearer_client(secret).post(f"{API}/actions/{action}/confirm/", {}, format="json")

    assert response.status_code == 403
    assert response.json()["code"] == "token_scope"
    order.refresh_from_db()
    assert order.approvals == 0
    assert PendingAction.objects.get().status == "pending"


@pytest.mark.parametrize(
    ("make", "code"),
    [
        (lambda user: "dop_unknown", "invalid_token"),
        (lambda user: issue(user, name="x")[1] + "x", "invalid_token"),
        (lambda user: _revoked(user), "token_revoked"),
        (lambda user: issue(user, name="x", expires_at=timezone.now())[1], "token_expired"),
    ],
)
def test_a_refused_bearer_token_is_a_401_naming_why(plain_user: Any, make: Any, code: str) -> None:
    response = bearer_client(make(plain_user)).get(f"{API}/tools/")

    assert response.status_code == 401
    assert response.json()["code"] == code
    assert response["WWW-Authenticate"] == 'Bearer realm="assistant"'


def _revoked(user: Any) -> str:
    token, secret = issue(user, name="x")
    token.revoke()
    return secret


def test_anonymous_requests_are_told_to_bring_a_bearer_token() -> None:
    response = APIClient().get(f"{API}/tools/")

    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="assistant"'


def test_an_inactive_users_bearer_token_is_a_401_account_inactive(plain_user: Any) -> None:
    _, secret = issue(plain_user, name="laptop")
    plain_user.is_active = False
    plain_user.save()

    response = bearer_client(secret).get(f"{API}/tools/")

    assert response.status_code == 401
    assert response.json()["code"] == "account_inactive"
    assert AuditEntry.objects.count() == 0


def test_a_malformed_bearer_header_is_a_401() -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer two words")

    response = client.get(f"{API}/tools/")

    assert (response.status_code, response.json()["code"]) == (401, "invalid_token")


# --- managing your tokens ------------------------------------------------------------------


def test_a_created_token_shows_its_secret_once_and_works(plain_user: Any) -> None:
    created = create_token(plain_user, name="laptop", expires_in_days=30, max_risk="safe")

    assert created.status_code == 201
    body = created.json()
    secret = body["token"]
    assert secret.startswith(body["key_prefix"])
    assert (body["name"], body["max_risk"], body["operations"], body["usable"]) == (
        "laptop",
        "safe",
        [],
        True,
    )
    assert body["revoked_at"] is None
    assert body["last_used_at"] is None
    stored = AccessToken.objects.get()
    assert stored.user == plain_user
    assert timedelta(days=29) < stored.expires_at - timezone.now() <= timedelta(days=30)
    listed = session_client(plain_user).get(f"{API}/tokens/").json()["results"]
    assert [row["id"] for row in listed] == [body["id"]]
    assert "token" not in listed[0]
    assert secret not in str(listed)
    assert dispatch_call(bearer_client(secret), "ping").status_code == 200


def test_a_token_may_be_limited_to_some_of_your_operations(reader: Any) -> None:
    created = create_token(reader, operations=["list_orders", "ping", "list_orders"])

    assert created.status_code == 201
    assert created.json()["operations"] == ["list_orders", "ping"]
    assert created.json()["max_risk"] is None
    assert created.json()["expires_at"] is None


@pytest.mark.parametrize("wanted", [["no_such_tool"], ["ping", "approve_order"]])
def test_a_ceiling_naming_operations_you_cannot_use_is_refused_alike(
    plain_user: Any, wanted: list[str]
) -> None:
    response = create_token(plain_user, operations=wanted)

    assert response.status_code == 400
    assert response.json()["code"] == "unknown_operation"
    assert "operations" in response.json()["errors"]
    assert not AccessToken.objects.exists()


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"name": ""}, "name"),
        ({"name": "x" * 101}, "name"),
        ({"expires_in_days": 0}, "expires_in_days"),
        ({"expires_in_days": 367}, "expires_in_days"),
        ({"max_risk": "extreme"}, "max_risk"),
        ({"expires_at": "2000-01-01T00:00:00Z"}, "expires_at"),
        ({"expires_in_days": 3, "expires_at": "2999-01-01T00:00:00Z"}, "expires_at"),
    ],
)
def test_a_bad_token_request_is_a_400_naming_the_field(
    plain_user: Any, fields: dict[str, Any], field: str
) -> None:
    response = create_token(plain_user, **fields)

    assert response.status_code == 400
    assert response.json()["code"] == "invalid"
    assert field in response.json()["errors"]
    assert not AccessToken.objects.exists()


def test_a_token_cannot_mint_tokens(plain_user: Any) -> None:
    _, secret = issue(plain_user, name="laptop")
    key = Token.objects.create(user=plain_user).key
    as_token = APIClient()
    as_token.credentials(HTTP_AUTHORIZATION=f"Token {key}")

    for client in (bearer_client(secret), bearer_client(key), as_token):
        response = client.post(f"{API}/tokens/", {"name": "child"}, format="json")
        assert response.status_code == 403
        assert response.json()["code"] == "session_required"
    assert AccessToken.objects.count() == 1


def test_you_list_only_your_own_tokens(plain_user: Any, reader: Any) -> None:
    mine, _ = issue(plain_user, name="mine")
    issue(reader, name="theirs")

    listed = session_client(plain_user).get(f"{API}/tokens/").json()["results"]

    assert [row["name"] for row in listed] == ["mine"]
    assert listed[0]["id"] == mine.pk


def test_revoking_a_token_stops_it_at_once(plain_user: Any) -> None:
    token, secret = issue(plain_user, name="laptop")

    revoked = session_client(plain_user).delete(f"{API}/tokens/{token.pk}/")
    again = session_client(plain_user).delete(f"{API}/tokens/{token.pk}/")

    assert revoked.status_code == 200
    assert revoked.json()["usable"] is False
    assert revoked.json()["revoked_at"] is not None
    assert again.status_code == 200
    assert again.json()["revoked_at"] == revoked.json()["revoked_at"]
    assert bearer_client(secret).get(f"{API}/tools/").json()["code"] == "token_revoked"


def test_a_token_may_revoke_itself(plain_user: Any) -> None:
    token, secret = issue(plain_user, name="leaked")

    response = bearer_client(secret).delete(f"{API}/tokens/{token.pk}/")

    assert response.status_code == 200
    token.refresh_from_db()
    assert token.revoked_at is not None


def test_someone_elses_token_is_as_missing_as_no_token(plain_user: Any, reader: Any) -> None:
    theirs, _ = issue(reader, name="theirs")
    client = session_client(plain_user)

    foreign = client.delete(f"{API}/tokens/{theirs.pk}/")
    missing = client.delete(f"{API}/tokens/{theirs.pk + 1000}/")
    huge = client.delete(f"{API}/tokens/{2**70}/")

    assert foreign.status_code == missing.status_code == huge.status_code == 404
    assert foreign.json() == missing.json() == huge.json()
    theirs.refresh_from_db()
    assert theirs.revoked_at is None


def test_creating_and_revoking_a_token_is_audited_without_its_secret(plain_user: Any) -> None:
    body = create_token(plain_user, name="laptop").json()
    session_client(plain_user).delete(f"{API}/tokens/{body['id']}/")

    entries = list(
        AuditEntry.objects.order_by("id").values_list(
            "operation", "decision", "source", "domain", "user", "entities"
        )
    )
    assert entries == [
        (
            "create_access_token",
            "executed",
            "rest",
            "tokens",
            plain_user.pk,
            {"token": body["id"], "name": "laptop"},
        ),
        (
            "revoke_access_token",
            "executed",
            "rest",
            "tokens",
            plain_user.pk,
            {"token": body["id"], "name": "laptop"},
        ),
    ]
    assert body["token"] not in str(list(AuditEntry.objects.values()))


def test_a_bounded_token_reads_anything_but_changes_things_only_through_its_tools(
    plain_user: Any,
) -> None:
    from assistant.models import Conversation

    conversation = Conversation.objects.create(user=plain_user, title="keep me")
    other, _ = issue(plain_user, name="other")
    _, secret = issue(plain_user, name="read-only", max_risk="safe")
    client = bearer_client(secret)

    assert client.get(f"{API}/conversations/").status_code == 200
    assert dispatch_call(client, "ping").status_code == 200  # a tool within its ceiling
    for response in (
        client.delete(f"{API}/conversations/{conversation.pk}/"),
        client.patch(f"{API}/conversations/{conversation.pk}/", {"title": "x"}, format="json"),
        client.delete(f"{API}/tokens/{other.pk}/"),
    ):
        assert response.status_code == 403
        assert response.json()["code"] == "token_scope"
    assert Conversation.objects.get(pk=conversation.pk).title == "keep me"
    assert AccessToken.objects.get(pk=other.pk).revoked_at is None

    _, full = issue(plain_user, name="full")  # no ceiling: the user's whole credential
    assert bearer_client(full).delete(f"{API}/tokens/{other.pk}/").status_code == 200


def test_a_bounded_token_may_still_revoke_itself(plain_user: Any) -> None:
    token, secret = issue(plain_user, name="leaked", max_risk="safe")

    assert bearer_client(secret).delete(f"{API}/tokens/{token.pk}/").status_code == 200
    token.refresh_from_db()
    assert token.revoked_at is not None
