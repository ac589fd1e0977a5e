"""What the dashboards browser tests share: a desktop window, the assistant's reply holding a
text, a tool's latest card, and waiting until the chat can be sent to again."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import Page, expect

DESKTOP = {"viewport": {"width": 1100, "height": 900}}


def reply(page: Page, text: str) -> Any:
    """The assistant's message holding this text (job completions arrive as messages too)."""
    return page.locator("#messages .bubble.assistant .text").filter(has_text=text)


def tool_card(page: Page, operation: str) -> Any:
    return page.locator(f'details.tool[data-operation="{operation}"]').last


def idle(page: Page) -> None:
    expect(page.get_by_role("button", name="Send")).to_be_visible()
