"""Conversation basics in Debian's chromium: times, the tab's title, rename, delete, search, links."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from assistant.models import AuditEntry, Conversation, Message
from tests.browsing import screenshots, send

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


screenshot = screenshots("conversations-")


def sidebar(page: Page) -> Any:
    return page.get_by_role("navigation", name="Conversations")


def start(page: Page, text: str, reply: str) -> str:
    """A new conversation with one turn; its id."""
    page.get_by_role("button", name="+ New").click()
    send(page, text)
    expect(page.locator("#messages .bubble.assistant .text").last).to_have_text(reply)
    page.wait_for_url("**/assistant/?c=*")
    return page.url.split("?c=", 1)[1]


def test_a_conversation_is_titled_timed_renamed_found_and_deleted(
    open_chat: Callable[..., Page], make_user: Callable[..., Any]
) -> None:
    user = make_user("planner")
    page = open_chat(user)
    expect(page).to_have_title("Assistant")

    first = start(page, "ping the server now. Then tell me more about it", "pong for planner")

    expect(page.locator("#title")).to_have_text("ping the server now")  # its first sentence
    expect(page).to_have_title("ping the server now · Assistant")
    row = sidebar(page).locator(".conversation").filter(has_text="ping the server now")
    expect(row.locator("time")).to_have_text("now")  # Intl.RelativeTimeFormat, in English
    updated = Conversation.objects.get(pk=first).updated_at.astimezone(UTC)
    shown = updated.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    expect(row.locator("time")).to_have_attribute("datetime", shown)
    expect(row.locator("time")).to_have_attribute("title", re.compile(r"\d\d:\d\d"))
    bubbles = page.locator("#messages .bubble")
    expect(bubbles).to_have_count(2)
    for bubble in bubbles.all():
        expect(bubble.locator("time.when")).to_have_attribute("datetime", re.compile(r"^\d{4}-"))
        expect(bubble.locator("time.when")).to_have_text(re.compile(r"now|\d+ minutes? ago"))
    screenshot(page, "1-titled")

    page.get_by_role("button", name="Rename").click()
    title = page.get_by_label("Title", exact=True)
    expect(title).to_have_value("ping the server now")
    title.fill("Weekly checks")
    page.get_by_role("button", name="Save").click()

    expect(page.locator("#title")).to_have_text("Weekly checks")
    expect(page.get_by_role("button", name="Rename")).to_be_focused()
    expect(page).to_have_title("Weekly checks · Assistant")
    expect(sidebar(page).locator("a[aria-current=true]")).to_have_text("Weekly checks")
    assert Conversation.objects.get(pk=first).title == "Weekly checks"
    screenshot(page, "2-renamed")

    page.reload()  # the stored messages come back as a snapshot, with their times

    expect(page).to_have_title("Weekly checks · Assistant")
    expect(bubbles).to_have_count(2)
    for bubble in bubbles.all():
        expect(bubble.locator("time.when")).to_have_text(re.compile(r"now|\d+ minutes? ago"))
    sent = page.locator(".bubble.user time.when").get_attribute("datetime")
    stored = Message.objects.get(conversation_id=first, role="user").created_at.astimezone(UTC)
    assert sent == stored.isoformat(timespec="milliseconds").replace("+00:00", "Z")

    second = start(page, "async ping", "pong")
    expect(sidebar(page).get_by_role("link")).to_have_text(["async ping", "Weekly checks"])
    search = page.get_by_label("Search conversations")

    search.fill("weekly")
    expect(sidebar(page).get_by_role("link")).to_have_text(["Weekly checks"])
    search.fill("pong for planner")  # the first conversation's reply
    expect(sidebar(page).get_by_role("link")).to_have_text(["Weekly checks"])
    screenshot(page, "3-found")
    search.fill("nothing like it")
    expect(sidebar(page).get_by_role("link")).to_have_count(0)
    expect(page.get_by_text("No conversation matches.")).to_be_visible()
    search.fill("")
    expect(sidebar(page).get_by_role("link")).to_have_text(["async ping", "Weekly checks"])

    sidebar(page).get_by_role("link", name="Weekly checks").click()
    expect(page.locator("#title")).to_have_text("Weekly checks")
    asked: list[str] = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
    page.get_by_role("button", name="Delete").click()

    expect(sidebar(page).get_by_role("link")).to_have_text(["async ping"])
    expect(page.locator("#title")).to_have_text("New conversation")
    expect(page).to_have_title("Assistant")
    expect(page.get_by_role("button", name="Delete")).to_be_hidden()
    assert "Weekly checks" in asked[0]
    assert "?c=" not in page.url
    assert [str(pk) for pk in Conversation.objects.values_list("pk", flat=True)] == [second]
    assert AuditEntry.objects.filter(operation="ping", conversation=None).count() == 1
    screenshot(page, "4-deleted")


def test_the_header_links_to_the_admin_for_staff_and_signs_out(
    open_chat: Callable[..., Page], make_user: Callable[..., Any], asgi_live_server: str
) -> None:
    plain = open_chat(make_user("plain"))
    links = plain.get_by_role("navigation", name="Site")
    expect(links.get_by_role("link", name="Home")).to_have_count(0)  # the project sets no HOME_URL
    expect(links.get_by_role("link", name="Admin")).to_have_count(0)

    page = open_chat(make_user("operator", is_staff=True))
    links = page.get_by_role("navigation", name="Site")
    expect(links.get_by_role("link", name="Admin")).to_have_attribute("href", "/admin/")
    screenshot(page, "5-header")

    links.get_by_role("button", name="Sign out").click()

    page.wait_for_url("**/assistant/login/")
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    page.goto(f"{asgi_live_server}/assistant/")
    page.wait_for_url(re.compile(r"login/\?next=/assistant/"))  # settings.LOGIN_URL: signed out


def test_going_back_to_an_earlier_conversation_shows_its_messages_again(
    open_chat: Callable[..., Page], make_user: Callable[..., Any]
) -> None:
    """The page cleared A's messages to show B: going back asks for them again, not only for
    what came after the events it had seen."""
    user = make_user("switcher")
    page = open_chat(user)
    first = start(page, "ping", "pong for switcher")
    start(page, "ping again", "pong for switcher")
    expect(page.locator("#messages .bubble")).to_have_count(2)

    sidebar(page).locator(f"a[data-id='{first}']").click()

    expect(page.locator("#messages .bubble.user .text")).to_have_text(["ping"])
    expect(page.locator("#messages .bubble.assistant .text")).to_have_text(["pong for switcher"])
