"""What every browser test shares: Debian's chromium (never a downloaded one) and where pictures go."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from playwright.sync_api import Browser, BrowserContext, Page

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts" / "browser"
WAIT = 10_000  # ms: the longest any step may take before the test fails


def send(page: Page, text: str) -> None:
    page.get_by_placeholder("Message the assistant…").fill(text)
    page.get_by_role("button", name="Send").click()


def signed_in_context(browser: Browser, server: str, user: Any, **options: Any) -> BrowserContext:
    """A browser context (``options`` as for ``new_context``) holding ``user``'s session cookie."""
    from django.test import Client

    client = Client()
    client.force_login(user)
    context = browser.new_context(**options)
    context.set_default_timeout(WAIT)
    cookie = {"name": "sessionid", "value": client.cookies["sessionid"].value, "url": server}
    context.add_cookies([cookie])
    return context
