"""The chat page's Access tokens dialog in Debian's chromium: create (shown once), copy, revoke."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import pytest
from playwright.sync_api import Page, expect

from assistant.access.tokens import Ceiling, authenticate_bearer, issue
from assistant.core.registry import RiskLevel
from assistant.models import AccessToken
from tests.axe import assert_accessible
from tests.browsing import RECORD_VIOLATIONS, screenshots

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CLIPBOARD = ["clipboard-read", "clipboard-write"]


screenshot = screenshots("tokens-")


def dialog(page: Page) -> Any:
    return page.get_by_role("dialog", name="Access tokens")


def rows(page: Page) -> Any:
    return dialog(page).locator("#token-rows tr")


def test_a_token_is_created_from_the_keyboard_shown_once_copied_and_revoked(
    open_chat: Callable[..., Page], plain_user: Any
) -> None:
    page = open_chat(plain_user, permissions=CLIPBOARD)
    page.add_init_script(RECORD_VIOLATIONS)
    page.reload()
    expect(page.locator("#status")).to_have_text("connected")

    page.get_by_role("button", name="Access tokens").click()

    expect(dialog(page)).to_be_visible()
    expect(dialog(page).get_by_text("No tokens yet.")).to_be_visible()
    expect(page.get_by_label("Name")).to_be_focused()
    page.keyboard.type("laptop")
    page.get_by_label("Expires in days").fill("7")
    page.get_by_label("Highest risk").select_option("safe")
    page.get_by_label("Name").press("Enter")

    secret_box = page.get_by_label("New token", exact=True)
    expect(dialog(page).get_by_role("heading", name="Copy your new token now")).to_be_visible()
    expect(secret_box).to_be_focused()
    secret = secret_box.input_value()
    token = AccessToken.objects.get()
    assert secret.startswith(token.key_prefix)
    bearer = authenticate_bearer(secret)
    assert (bearer.user, bearer.name, bearer.ceiling) == (
        plain_user,
        "laptop",
        Ceiling(max_risk=RiskLevel.SAFE),
    )
    expect(rows(page)).to_have_count(1)
    row = rows(page).first
    expect(row.locator("th")).to_have_text("laptop")
    expect(row.locator("code")).to_have_text(token.key_prefix + "…")
    expect(row).to_contain_text("up to safe")
    expect(row.locator(".badge")).to_have_text("usable")
    screenshot(page, "1-created")

    page.get_by_role("button", name="Copy", exact=True).click()

    expect(dialog(page).get_by_role("status")).to_have_text("Copied.")
    assert page.evaluate("navigator.clipboard.readText()") == secret

    page.keyboard.press("Escape")

    expect(dialog(page)).to_be_hidden()
    expect(page.get_by_role("button", name="Access tokens")).to_be_focused()
    page.get_by_role("button", name="Access tokens").click()
    expect(rows(page)).to_have_count(1)
    expect(
        page.get_by_label("New token", exact=True)
    ).to_be_hidden()  # shown once: gone with the dialog
    assert secret not in page.content()

    asked: list[str] = []
    page.once("dialog", lambda question: (asked.append(question.message), question.accept()))
    page.get_by_role("button", name="Revoke laptop").click()

    expect(row.locator(".badge")).to_have_text("revoked")
    expect(page.get_by_role("button", name="Revoke laptop")).to_have_count(0)
    assert asked == ["Revoke “laptop”? Every client using it is refused from now on."]
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert page.evaluate("window.__violations") == []
    screenshot(page, "2-revoked")


def test_a_refused_token_request_says_why_in_the_dialog(
    open_chat: Callable[..., Page], plain_user: Any
) -> None:
    page = open_chat(plain_user)
    page.get_by_role("button", name="Access tokens").click()
    page.get_by_label("Name").fill("too long")
    page.get_by_label("Expires in days").evaluate("node => node.removeAttribute('max')")
    page.get_by_label("Expires in days").fill("999")

    page.get_by_role("button", name="Create token").click()

    expect(dialog(page).get_by_role("alert")).to_contain_text("expires_in_days")
    expect(page.get_by_label("New token", exact=True)).to_be_hidden()
    assert not AccessToken.objects.exists()


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_open_tokens_dialog_passes_axe(
    open_chat: Callable[..., Page],
    plain_user: Any,
    scheme: Literal["light", "dark"],
) -> None:
    issue(plain_user, name="ci", max_risk="guarded", operations=["ping"])
    revoked, _ = issue(plain_user, name="old")
    revoked.revoke()
    # axe is injected as a script tag: the chat page's CSP would refuse it
    page = open_chat(plain_user, bypass_csp=True, color_scheme=scheme)
    page.get_by_role("button", name="Access tokens").click()
    page.get_by_label("Name").fill("laptop")
    page.get_by_role("button", name="Create token").click()
    expect(page.get_by_label("New token", exact=True)).to_be_visible()
    expect(rows(page)).to_have_count(3)

    screenshot(page, f"dialog-{scheme}")
    assert_accessible(page)
