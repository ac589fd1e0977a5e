"""What every browser test shares: Debian's chromium (never a downloaded one) and where pictures go."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from playwright.sync_api import Browser, BrowserContext, Locator, Page

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
PHONE = {"width": 390, "height": 844}  # a phone's viewport
WAIT = 10_000  # ms: the longest any step may take before the test fails
# an init script: what the page's Content-Security-Policy refused lands in window.__violations
RECORD_VIOLATIONS = """
window.__violations = [];
document.addEventListener("securitypolicyviolation", (event) => {
  window.__violations.push(event.violatedDirective + " " + event.blockedURI);
});
"""


def record_frames(page: Page) -> tuple[list[dict[str, Any]], list[Any]]:
    """The AG-UI events the page's sockets receive from now on, and the messages they came in
    (the chat page asks for a run's events in bursts: one JSON array a burst)."""
    frames: list[dict[str, Any]] = []
    messages: list[Any] = []

    def received(data: str) -> None:
        message = json.loads(data)
        messages.append(message)
        frames.extend(message if isinstance(message, list) else [message])

    page.on("websocket", lambda socket: socket.on("framereceived", received))
    return frames, messages


def send(page: Page, text: str) -> None:
    page.get_by_placeholder("Message the assistant…").fill(text)
    page.get_by_role("button", name="Send").click()


def approve(page: Page, approval: Locator) -> None:
    """Approve as a person would: type the phrase when asked, hold a dangerous action's button."""
    approval.locator("button.primary").wait_for()
    phrase = approval.locator("label.phrase")
    if phrase.count():
        phrase.locator("input").fill(phrase.locator("code").inner_text())
    held = approval.get_by_role("button", name="Hold to approve")
    if held.count():
        held.hover()
        page.mouse.down()
        page.wait_for_timeout(1200)
        page.mouse.up()
    else:
        approval.get_by_role("button", name="Approve").click()


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


def go(page: Page, url: str) -> None:
    """Open the chat page at ``url`` and wait until its socket is connected."""
    from playwright.sync_api import expect

    page.goto(url)
    expect(page.locator("#status")).to_have_text("connected")


def tool_card(page: Page, operation: str) -> Any:
    return page.locator(f'details.tool[data-operation="{operation}"]')


def screenshots(prefix: str) -> Callable[[Page, str], None]:
    """``screenshot(page, name)``: the whole page saved as ``ARTIFACTS/{prefix}{name}.png``."""

    def screenshot(page: Page, name: str) -> None:
        page.screenshot(path=str(ARTIFACTS / f"{prefix}{name}.png"), full_page=True)

    return screenshot
