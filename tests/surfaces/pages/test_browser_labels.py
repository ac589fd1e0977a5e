"""The chat page labels endings truthfully: a timed-out query, a job that found failures."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from assistant.models import Conversation
from assistant.validation import ValidationTaskService
from tests.browsing import ARTIFACTS, send
from tests.testapp import assistant_tools as testapp_tools
from tests.validations import orders as orders  # a fixture
from tests.validations import task_for

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ENDLESS = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n"


def test_a_timed_out_query_and_a_job_with_failures_are_not_shown_as_successes(
    open_chat: Callable[..., Page],
    make_user: Callable[..., Any],
    orders: list[Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(testapp_tools.TestDatabase, "statement_timeout", 0.3)
    analyst = make_user(
        "analyst", "assistant.database_read", "assistant.database_query", "testapp.view_order"
    )
    page = open_chat(analyst)

    send(page, f'run query "{ENDLESS}"')
    page.locator(".approval").get_by_role("button", name="Approve").click()

    card = page.locator("details.tool").last
    expect(card.locator(".tool-name")).to_have_text("Run readonly query")
    expect(card).to_have_attribute("data-operation", "run_readonly_query")
    expect(card.locator(".badge")).to_have_text("timeout")
    expect(card.locator(".badge")).to_have_class("badge timeout")
    page.screenshot(path=str(ARTIFACTS / "labels-timeout.png"), full_page=True)

    page.wait_for_url("**/assistant/?c=*")
    conversation = Conversation.objects.get(pk=page.url.split("?c=", 1)[1])
    run = ValidationTaskService.trigger_run(
        task_for(owner=analyst), user=analyst, conversation=conversation
    )

    badge = page.locator(f"#j-{run.job_id} .badge")
    expect(badge).to_have_text("finished with 1 failure")
    expect(badge).to_have_class("badge with_failures")
    expect(page.locator(f"#j-{run.job_id} .job-message")).to_contain_text("1 failed")
    page.screenshot(path=str(ARTIFACTS / "labels-job-with-failures.png"), full_page=True)
