"""What the chat page shows of replies and tool results: Markdown, data tables, each once, inert."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.browsing import screenshots, send, tool_card
from tests.openai_peer import call, text, tool_calls
from tests.openai_peer import openai_peer as openai_peer  # the fixtures
from tests.openai_peer import use_llm as use_llm
from tests.testapp.models import Order

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

MARKDOWN = (
    "# Deploy plan\n",
    "Steps:\n\n- build the **image**\n",
    "- roll it out\n\n",
    "| env | hosts |\n|---|---|\n| prod | 3 |\n| staging | 1 |\n\n",
    "```sh\nmake deploy ENV=prod\n",
    "```\n\n",
    "See [the runbook](https://example.org/runbook) or [this](javascript:alert(1)).\n\n",
    "![load chart](/static/chart.png)",
)
# Each payload, if it ran, would set window.__xss or open a dialog.
IMG = "<img src=x onerror=alert(1)>"
SCRIPT = "<script>window.__xss=2</script>"
SVG = '"><svg onload=window.__xss=1>'
JS_LINK = "javascript:alert(1)"
WATCH_FOR_SCRIPTS = "window.__xss = undefined;"
TALL = {"viewport": {"width": 1100, "height": 1500}}  # the whole conversation in a screenshot


screenshot = screenshots("render-")


def reply(page: Page) -> Any:
    return page.locator("#messages .bubble.assistant").last


def test_a_reply_renders_as_markdown_and_its_code_block_copies(
    open_chat: Callable[..., Page], plain_user: Any, use_llm: Callable[..., Any]
) -> None:
    use_llm().script(text(*MARKDOWN))
    page = open_chat(plain_user, **TALL)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])

    send(page, "plan the deploy")

    answer = reply(page).locator(".text")
    expect(answer.get_by_role("heading", level=1)).to_have_text("Deploy plan")
    expect(answer.locator("ul > li")).to_have_text(["build the image", "roll it out"])
    expect(answer.locator("strong")).to_have_text("image")
    expect(answer.locator("table tbody tr")).to_have_count(2)
    expect(answer.locator("table tbody tr").first.locator("td")).to_have_text(["prod", "3"])
    expect(answer.locator("pre code")).to_have_text("make deploy ENV=prod\n")
    runbook = answer.get_by_role("link", name="the runbook")
    expect(runbook).to_have_attribute("href", "https://example.org/runbook")
    expect(runbook).to_have_attribute("rel", "noopener noreferrer")
    expect(runbook).to_have_attribute("target", "_blank")
    unsafe = answer.locator("a", has_text="this")
    expect(unsafe).not_to_have_attribute("href", JS_LINK)
    assert unsafe.get_attribute("href") is None
    # an image is a link to it: a reply makes the browser fetch nothing by itself
    expect(answer.get_by_role("link", name="load chart")).to_have_attribute(
        "href", "/static/chart.png"
    )
    expect(answer.locator("img")).to_have_count(0)
    expect(reply(page)).not_to_contain_class("streaming")
    screenshot(page, "markdown")

    copy = answer.get_by_role("button", name="Copy code")
    copy.click()

    expect(copy).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == "make deploy ENV=prod\n"

    # More text after the code block repaints the reply, but the finished block (and its
    # button) stays the same element.
    kept = page.evaluate(
        """() => {
          const text = document.querySelector("#messages .bubble.assistant:last-child .text");
          const button = text.querySelector(".code-block .copy");
          window.assistantRender.append(text, "\\n\\nOne more line.");
          window.assistantRender.flush();
          return button.isConnected && text.querySelector(".code-block .copy") === button;
        }"""
    )
    assert kept
    expect(answer).to_contain_text("One more line.")

    # a reader at the bottom follows a growing reply; one who scrolled up stays where they are
    followed, stayed = page.evaluate(
        """() => {
          const box = document.getElementById("messages");
          const text = box.querySelector(".bubble.assistant:last-child .text");
          const grow = () => {
            window.assistantRender.append(text, "\\n\\nline".repeat(40));
            window.assistantRender.flush();
          };
          grow();
          box.scrollTop = box.scrollHeight;
          grow();
          const followed = box.scrollHeight - box.scrollTop - box.clientHeight < 2;
          box.scrollTop = 0;
          grow();
          return [followed, box.scrollTop];
        }"""
    )
    assert (followed, stayed) == (True, 0)


def test_a_tool_s_rows_show_once_as_a_table_that_sorts_and_caps(
    open_chat: Callable[..., Page], clerk: Any
) -> None:
    Order.objects.bulk_create(Order(reference=f"ORD-{n:02}") for n in range(1, 26))
    page = open_chat(clerk, **TALL)

    send(page, "list orders")

    expect(reply(page).locator(".text")).to_contain_text("ORD-01, ORD-02")
    table = page.locator(".data-table")
    expect(table).to_have_count(1)
    rows = table.locator("tbody tr")
    expect(rows).to_have_count(20)
    header = table.get_by_role("columnheader", name="value")
    expect(header).to_have_attribute("aria-sort", "none")
    # the card, opened, shows the call but not its text a second time (the reply says it)
    card = tool_card(page, "list_orders")
    card.locator("summary").click()
    expect(card.locator(".args")).to_be_visible()
    expect(card.locator(".result")).to_be_hidden()

    header.get_by_role("button").click()
    expect(header).to_have_attribute("aria-sort", "ascending")
    expect(rows.first).to_have_text("ORD-01")
    header.get_by_role("button").click()
    expect(header).to_have_attribute("aria-sort", "descending")
    expect(rows.first).to_have_text("ORD-25")
    expect(rows).to_have_count(20)
    screenshot(page, "table-capped")

    table.get_by_role("button", name="Show all 25 rows").click()

    expect(rows).to_have_count(25)
    expect(rows.last).to_have_text("ORD-01")
    expect(table.get_by_role("button", name="Show all 25 rows")).to_be_hidden()

    page.reload()  # the stored conversation shows the same, from its snapshot
    expect(page.locator(".data-table tbody tr")).to_have_count(20)
    expect(page.locator(".data-table tbody tr").first).to_have_text("ORD-01")
    card = tool_card(page, "list_orders")
    card.locator("summary").click()
    expect(card.locator(".result")).to_be_hidden()
    expect(reply(page).locator(".text")).to_contain_text("ORD-24, ORD-25")
    page.set_viewport_size({"width": 390, "height": 844})
    screenshot(page, "table-phone")


def test_with_the_llm_planner_the_card_keeps_the_tool_s_text_the_reply_does_not_say(
    open_chat: Callable[..., Page], plain_user: Any, use_llm: Callable[..., Any]
) -> None:
    use_llm().script(tool_calls(call("ping", {})), text("The server answered."))
    page = open_chat(plain_user)

    send(page, "is it up?")

    expect(reply(page).locator(".text")).to_have_text("The server answered.")
    card = tool_card(page, "ping")
    card.locator("summary").click()
    expect(card.locator(".result")).to_have_text("pong for plain")
    expect(card.locator(".result")).to_be_visible()


def test_payloads_in_every_field_stay_inert_and_show_as_text(
    open_chat: Callable[..., Page], make_user: Callable[..., Any]
) -> None:
    dialogs: list[str] = []
    user = make_user(IMG, "testapp.view_order", "assistant.reports_read")
    Order.objects.bulk_create(
        Order(reference=reference)
        for reference in (IMG, SVG, JS_LINK, "/admin/", "https://example.org/o/1")
    )
    page = open_chat(user, **TALL)
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.add_init_script(WATCH_FOR_SCRIPTS)
    page.reload()
    expect(page.locator("#status")).to_have_text("connected")

    send(page, f"{SVG} ping")  # the message and the conversation's title
    expect(reply(page).locator(".text")).to_have_text(
        "Invalid entities for ping: onload: unknown entity"
    )
    expect(page.locator("#title")).to_have_text(f"{SVG} ping")
    expect(page.locator("#conversations a").first).to_have_text(f"{SVG} ping")
    expect(page.locator(".bubble.user .text").first).to_have_text(f"{SVG} ping")

    send(page, "ping")  # the username, in a reply
    expect(reply(page).locator(".text")).to_have_text(f"pong for {IMG}")

    send(page, f"show report name='{SCRIPT}'")  # a reply's text and a call's arguments
    expect(reply(page).locator(".text")).to_have_text(f"report {SCRIPT}")
    expect(tool_card(page, "show_report").locator(".args")).to_contain_text("<script>")

    send(page, "list orders")  # table cells and what looks like links
    cells = page.locator(".data-table tbody td")
    expect(cells).to_have_count(5)
    expect(cells.filter(has_text=IMG)).to_have_count(1)
    expect(cells.filter(has_text=SVG)).to_have_count(1)
    expect(cells.filter(has_text=JS_LINK).locator("a")).to_have_count(0)
    admin = cells.get_by_role("link", name="/admin/")
    expect(admin).to_have_attribute("rel", "noopener noreferrer")
    expect(cells.get_by_role("link", name="https://example.org/o/1")).to_have_count(1)
    screenshot(page, "payloads")

    page.reload()  # the same, rebuilt from the stored conversation
    expect(page.locator(".data-table tbody td")).to_have_count(5)
    expect(page.locator("#messages .bubble.assistant").nth(1).locator(".text")).to_have_text(
        f"pong for {IMG}"
    )
    expect(page.locator("#title")).to_have_text(f"{SVG} ping")

    assert page.evaluate("window.__xss") is None
    assert dialogs == []
    assert page.locator("#messages img, #messages svg, #messages script").count() == 0
    assert page.locator("#messages a[href^='javascript']").count() == 0


def test_an_object_s_list_is_a_captioned_table_and_its_urls_safe_links(
    open_chat: Callable[..., Page], plain_user: Any
) -> None:
    page = open_chat(plain_user)
    page.add_init_script(WATCH_FOR_SCRIPTS)
    page.reload()

    # the shape the example's tools return: a few fields, one list of rows, maybe a page's URL
    page.evaluate(
        """(payload) => {
          const box = window.assistantRender.dataTable({
            url: "/dashboards/7/documentation/", admin: payload.link, job: "42",
            plan: [{step: 2, what: payload.img}, {step: 10, what: "deploy"}, {step: 1, what: "b"}],
          });
          box.id = "shown";
          document.getElementById("messages").append(box);
        }""",
        {"link": JS_LINK, "img": IMG},
    )

    shown = page.locator("#shown")
    expect(shown.locator("caption")).to_have_text("plan")
    expect(shown.get_by_role("link")).to_have_count(1)
    documentation = shown.get_by_role("link", name="/dashboards/7/documentation/")
    expect(documentation).to_have_attribute("rel", "noopener noreferrer")
    expect(shown.locator("tbody td").nth(1)).to_have_text(IMG)
    step = shown.get_by_role("columnheader", name="step")
    step.get_by_role("button").click()
    expect(shown.locator("tbody tr td:first-child")).to_have_text(["1", "2", "10"])
    assert page.evaluate("window.__xss") is None
    assert shown.locator("img").count() == 0
