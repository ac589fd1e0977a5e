"""The chat page sends a Content-Security-Policy that allows its own script only, and still works."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from tests.browsing import RECORD_VIOLATIONS, send


def directives(policy: str) -> dict[str, str]:
    return dict(part.strip().split(" ", 1) for part in policy.split(";"))


@pytest.mark.django_db
def test_the_chat_page_allows_scripts_from_its_own_origin_only(plain_user: Any) -> None:
    client = Client()
    client.force_login(plain_user)

    response = client.get("/assistant/")

    assert response.status_code == 200
    policy = directives(response["Content-Security-Policy"])
    assert policy["script-src"] == "'self'"
    assert policy["object-src"] == "'none'"
    assert policy["frame-ancestors"] == "'none'"
    assert "<script>" not in response.content.decode()  # no inline script for the policy to refuse


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_under_its_policy_the_chat_page_connects_and_answers_and_refuses_inline_script(
    open_chat: Callable[..., Any], plain_user: Any
) -> None:
    from playwright.sync_api import expect

    page = open_chat(plain_user)
    page.add_init_script(RECORD_VIOLATIONS)
    page.reload()
    expect(page.locator("#status")).to_have_text("connected")

    send(page, "ping")

    expect(page.locator("#messages .bubble.assistant .text")).to_have_text("pong for plain")
    assert page.evaluate("window.__violations") == []
    injected = page.evaluate(
        """() => {
          const script = document.createElement("script");
          script.textContent = "window.__inline_ran = true";
          document.body.appendChild(script);
          return window.__inline_ran === true;
        }"""
    )
    assert injected is False
    page.wait_for_function("window.__violations.length > 0")
    assert page.evaluate("window.__violations")[0].startswith("script-src")
