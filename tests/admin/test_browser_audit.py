"""Staff use the audit in the admin with Debian's chromium, driven by Playwright, over ASGI."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from assistant.dispatch.door import dispatch
from tests.admin.pages import SECRET
from tests.browsing import ARTIFACTS, WAIT, screenshots

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def page(browser: Browser, request: pytest.FixtureRequest) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    context.set_default_timeout(WAIT)
    page = context.new_page()
    yield page
    # The page as the test left it: a failure's evidence.
    page.screenshot(path=str(ARTIFACTS / f"{request.node.name}.png"), full_page=True)
    context.close()


@pytest.fixture
def auditor(make_user: Callable[..., Any]) -> Any:
    """Staff who may read the audit trail (password "pw")."""
    return make_user("auditor", "assistant.view_auditentry", is_staff=True)


@pytest.fixture
def history(make_user: Callable[..., Any]) -> None:
    """A ping (executed), an explosion (failed) and a stored secret (executed, redacted)."""
    plain = make_user("plain")
    keeper = make_user("keeper", "assistant.vault_write")
    dispatch("ping", user=plain, source="rest")
    dispatch("explode", user=plain, source="websocket")
    dispatch("store_secret", {"label": "wifi", "secret": SECRET}, user=keeper, source="cli")


screenshot = screenshots("")


def test_staff_log_in_filter_the_audit_by_decision_and_open_an_entry(
    page: Page, asgi_live_server: str, auditor: Any, history: None
) -> None:
    page.goto(f"{asgi_live_server}/admin/")

    expect(page).to_have_url(f"{asgi_live_server}/admin/login/?next=/admin/")
    page.get_by_label("Username:").fill("auditor")
    page.get_by_label("Password:").fill("pw")
    page.get_by_role("button", name="Log in").click()

    expect(page.get_by_role("heading", name="Site administration")).to_be_visible()
    expect(page.locator("#header")).to_have_css("display", "flex")  # the admin's CSS loaded
    page.get_by_role("link", name="Audit entries", exact=True).click()

    rows = page.locator("#result_list tbody tr")
    expect(rows.locator("td.field-operation")).to_have_text(["store_secret", "explode", "ping"])

    page.locator("#changelist-filter details[data-filter-title=decision]").get_by_role(
        "link", name="Executed", exact=True
    ).click()

    expect(page).to_have_url(
        f"{asgi_live_server}/admin/assistant/auditentry/?decision__exact=executed"
    )
    expect(rows.locator("td.field-operation")).to_have_text(["store_secret", "ping"])
    expect(rows.locator("td.field-coloured_decision")).to_have_text(["executed", "executed"])
    expect(
        page.locator("#changelist-filter details[data-filter-title=decision] li.selected")
    ).to_have_text("Executed")
    screenshot(page, "admin-1-filtered")

    rows.filter(has_text="store_secret").locator("th a").click()

    expect(page.get_by_role("heading", name="store_secret → executed")).to_be_visible()
    entities = page.locator(".field-entities_json pre")
    expect(entities).to_contain_text('"secret": "[redacted]"')
    expect(entities).to_contain_text('"label": "wifi"')
    expect(page.locator(".field-username .readonly")).to_have_text("keeper")
    expect(page.locator("input[name=_save]")).to_have_count(0)
    screenshot(page, "admin-2-entry")
    assert SECRET not in page.content()
