"""Every assistant admin page passes axe-core (light and dark) and fits a 1280 px screen; a
validation task runs from its page."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Literal

import pytest
from playwright.sync_api import Browser, Page, expect

from assistant.models import AuditEntry, Message, ValidationRun
from tests.admin.pages import AUDIT, CHANGE_PAGES, CONVERSATIONS, INVENTORY, RUNS, TASKS, TOKENS
from tests.axe import described, violations
from tests.browsing import ARTIFACTS, signed_in_context

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SCREEN = {"width": 1280, "height": 800}
CHANGELISTS = [
    "/admin/assistant/",
    AUDIT,
    CONVERSATIONS,
    f"{CONVERSATIONS}usage/",
    "/admin/assistant/pendingaction/",
    "/admin/assistant/job/",
    RUNS,
    TASKS,
    f"{TASKS}add/",
    INVENTORY,
    f"{INVENTORY}?user=clerk",
    TOKENS,
]


@pytest.fixture
def open_admin(
    browser: Browser, asgi_live_server: str, superuser: Any, request: pytest.FixtureRequest
) -> Iterator[Callable[..., Page]]:
    """An admin page at 1280 by 800, signed in as the superuser through a session cookie."""
    pages: list[Page] = []

    def open_(path: str, **options: Any) -> Page:
        context = signed_in_context(
            browser, asgi_live_server, superuser, viewport=SCREEN, **options
        )
        page = context.new_page()
        pages.append(page)
        page.goto(f"{asgi_live_server}{path}")
        return page

    yield open_
    for index, page in enumerate(pages):
        page.screenshot(path=str(ARTIFACTS / f"{request.node.name}-{index}.png"), full_page=True)
        page.context.close()


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_every_assistant_admin_page_passes_axe(
    open_admin: Callable[..., Page],
    world: dict[str, Any],
    scheme: Literal["light", "dark"],
) -> None:
    Message.objects.create(
        conversation=world["conversation"], role="user", text="what broke?", status="complete"
    )
    record_pages = [f"{CHANGE_PAGES[name]}{world[name].pk}/change/" for name in CHANGE_PAGES]
    page = open_admin("/admin/", color_scheme=scheme)
    found = {}
    for path in ["/admin/", *CHANGELISTS, *record_pages]:
        page.goto(page.url.split("/admin/")[0] + path)
        expect(page.locator("#content")).to_be_visible()
        problems = described(violations(page))
        if problems:
            found[path] = problems
    assert found == {}


def scroll_width(page: Page) -> int:
    return int(page.evaluate("document.scrollingElement.scrollWidth"))


def test_the_audit_list_fits_a_1280_pixel_screen(
    open_admin: Callable[..., Page], world: dict[str, Any]
) -> None:
    long_name = "someone.with.a.long.single-sign-on.name@example.com"
    AuditEntry.objects.create(username=long_name, operation="ping", decision="executed")
    page = open_admin(AUDIT)

    rows = page.locator("#result_list tbody tr")
    expect(rows).to_have_count(7)
    cut = rows.first.locator("td.field-username")
    expect(cut).to_have_text(long_name)  # all there, shown cut short
    assert cut.evaluate("cell => cell.scrollWidth > cell.clientWidth")
    assert scroll_width(page) <= SCREEN["width"]
    # the table fits its box too (the admin scrolls a wide one inside it)
    assert page.evaluate("document.querySelector('#result_list').scrollWidth") <= page.evaluate(
        "document.querySelector('.results').clientWidth"
    )
    expect(rows.first.locator("td.field-conversation_link")).to_be_in_viewport(ratio=1)
    page.screenshot(path=str(ARTIFACTS / "admin-audit-1280.png"), full_page=True)


def test_the_tool_inventory_has_breadcrumbs_and_fits_a_1280_pixel_screen(
    open_admin: Callable[..., Page], world: dict[str, Any]
) -> None:
    page = open_admin(f"{INVENTORY}?user=clerk")

    breadcrumbs = page.get_by_role("navigation", name="Breadcrumbs")
    expect(breadcrumbs.get_by_role("link")).to_have_text(["Home", "Assistant"])
    expect(breadcrumbs).to_contain_text("Tool inventory")
    # drawn as the admin draws its own (a styled list from Django 6.0)
    expect(breadcrumbs.locator(".breadcrumbs")).to_have_css("background-color", "rgb(38, 75, 93)")
    expect(page.locator("tr.tool-row").first).to_be_visible()
    assert scroll_width(page) <= SCREEN["width"]
    page.screenshot(path=str(ARTIFACTS / "admin-inventory-1280.png"), full_page=True)


def test_a_validation_task_runs_from_its_page(
    open_admin: Callable[..., Page], world: dict[str, Any]
) -> None:
    task = world["task"]
    page = open_admin(f"{TASKS}{task.pk}/change/")

    page.get_by_role("button", name="Run now").click()

    run = ValidationRun.objects.filter(task=task).latest("pk")
    expect(page.locator(".messagelist .success")).to_have_text(f"Started run {run.pk} of “Access”.")
    expect(page).to_have_url(page.url.split("/admin/")[0] + f"{TASKS}{task.pk}/change/")
    page.screenshot(path=str(ARTIFACTS / "admin-run-now.png"), full_page=True)
    assert run.triggered_by == "user"
    assert AuditEntry.objects.filter(operation="validation_run", source="admin").count() == 1
