"""The access token admin: staff see everyone's tokens and revoke them, never their secrets."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from assistant.access.tokens import issue
from assistant.models import AccessToken, AuditEntry
from tests.admin.pages import TOKENS, page_text, result_rows
from tests.clients import client_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def tokens(plain_user: Any, reader: Any) -> dict[str, tuple[AccessToken, str]]:
    laptop = issue(plain_user, name="laptop", max_risk="safe", operations=["ping"])
    ci = issue(reader, name="ci", expires_at=timezone.now() + timedelta(days=3))
    old = issue(reader, name="old")
    old[0].revoke()
    return {"laptop": laptop, "ci": ci, "old": old}


def test_the_token_list_shows_owner_prefix_dates_and_ceiling_never_a_secret(
    admin_client: Client, tokens: dict[str, tuple[AccessToken, str]]
) -> None:
    response = admin_client.get(TOKENS)

    assert response.status_code == 200
    rows = {row.text("name"): row for row in result_rows(response)}
    assert set(rows) == {"laptop", "ci", "old"}
    laptop, _ = tokens["laptop"]
    assert rows["laptop"].text("user") == "plain"
    assert rows["laptop"].text("key_prefix") == laptop.key_prefix
    assert rows["laptop"].text("ceiling") == "up to safe; ping"
    assert rows["laptop"].text("state") == "usable"
    assert rows["old"].text("state") == "revoked"
    assert rows["ci"].text("ceiling") == "-"
    page = page_text(response)
    for token, secret in tokens.values():
        assert secret not in page
        assert token.digest not in page


def test_tokens_are_searched_by_user_and_name_and_filtered_by_state(
    admin_client: Client, tokens: dict[str, tuple[AccessToken, str]]
) -> None:
    def names(**query: str) -> set[str]:
        return {row.text("name") for row in result_rows(admin_client.get(TOKENS, query))}

    assert names(q="reader") == {"ci", "old"}
    assert names(q="laptop") == {"laptop"}
    assert names(state="revoked") == {"old"}
    assert names(state="usable") == {"laptop", "ci"}
    assert names(max_risk__exact="safe") == {"laptop"}


def test_a_tokens_page_shows_no_digest_and_nothing_to_edit(
    admin_client: Client, tokens: dict[str, tuple[AccessToken, str]]
) -> None:
    token, secret = tokens["laptop"]

    page = admin_client.get(f"{TOKENS}{token.pk}/change/")
    added = admin_client.get(f"{TOKENS}add/")

    assert page.status_code == 200
    assert token.digest not in page_text(page)
    assert secret not in page_text(page)
    assert 'name="name"' not in page_text(page)
    assert added.status_code == 403


def test_revoking_selected_tokens_stops_them_and_is_audited(
    admin_client: Client, superuser: Any, tokens: dict[str, tuple[AccessToken, str]]
) -> None:
    laptop, ci, old = (tokens[name][0] for name in ("laptop", "ci", "old"))
    revoked_before = old.revoked_at

    response = admin_client.post(
        TOKENS,
        {"action": "revoke_tokens", "_selected_action": [laptop.pk, ci.pk, old.pk]},
        follow=True,
    )

    assert "Revoked 2 tokens." in page_text(response)
    for token in (laptop, ci, old):
        token.refresh_from_db()
    assert laptop.revoked_at is not None
    assert ci.revoked_at is not None
    assert old.revoked_at == revoked_before
    entries = AuditEntry.objects.filter(operation="revoke_access_token").order_by("id")
    assert sorted(
        (entry.entities["name"], entry.entities["owner"], entry.source, entry.decision)
        for entry in entries
    ) == [("ci", "reader", "admin", "executed"), ("laptop", "plain", "admin", "executed")]
    assert {(entry.domain, entry.user_id) for entry in entries} == {("tokens", superuser.pk)}


def test_staff_who_may_only_view_tokens_are_not_offered_revoke(
    make_user: Any, tokens: dict[str, tuple[AccessToken, str]]
) -> None:
    viewer = make_user("tokenviewer", "assistant.view_accesstoken", is_staff=True)
    laptop, _ = tokens["laptop"]
    client = client_for(viewer, Client)

    page = client.get(TOKENS)
    client.post(TOKENS, {"action": "revoke_tokens", "_selected_action": [laptop.pk]})

    assert page.status_code == 200
    assert "revoke_tokens" not in page.content.decode()
    laptop.refresh_from_db()
    assert laptop.revoked_at is None
    assert not AuditEntry.objects.filter(operation="revoke_access_token").exists()
