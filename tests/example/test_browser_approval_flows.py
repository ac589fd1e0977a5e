"""Approvals on the dashboards domain in Debian's chromium: a deploy is prepared before anyone is
asked (its card says what will happen), and a refusal or an ambiguous reference never asks at all."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from playwright.sync_api import Page, expect

from assistant.models import AuditEntry, Job, PendingAction
from dashboards.models import Dashboard
from tests.browsing import screenshots, send
from tests.example.dashboard_pages import DESKTOP, idle, reply, tool_card
from tests.example.dashboards_world import World

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


screenshot = screenshots("approval-flows-")


def test_a_deploy_is_prepared_then_asked_and_runs_once_its_name_is_typed(
    open_chat: Callable[..., Page], world: World
) -> None:
    target = world.dashboard("sales-overview", "prod")
    page = open_chat(world.admin, **DESKTOP)

    send(page, "deploy dashboard=sales-overview source=staging target=prod")

    card = page.locator(".approval")
    expect(card.locator(".approval-summary")).to_have_text(
        "Deploy Sales overview v2 from Staging to Production, replacing v1"
    )
    expect(card.locator(".risk")).to_have_text("dangerous")
    expect(card.locator(".requester")).to_have_text("requested by admin")
    expect(card.locator(".expiry")).to_have_text("expires in 10 minutes")
    expect(card.locator("table tr")).to_have_text(
        [
            "FieldBeforeAfter",
            "version12",
            "databaseprod_warehouseunchanged",  # (a value that stays is not struck through)
            "charts3unchanged",
        ]
    )
    approve = card.get_by_role("button", name="Approve")
    phrase = card.get_by_label("Type Sales overview to approve")
    expect(approve).to_be_disabled()
    screenshot(page, "1-asked")
    assert Dashboard.objects.get(pk=target.pk).version == 1
    assert not Job.objects.exists()

    phrase.fill("Sales")
    expect(approve).to_be_disabled()
    phrase.fill("Sales overview")
    expect(approve).to_be_enabled()
    screenshot(page, "1-typed")
    approve.click()

    expect(card).to_have_count(0)
    expect(reply(page, "Deploying #")).to_be_visible()
    expect(tool_card(page, "deploy_dashboard").locator(".badge")).to_have_text("confirmed")
    idle(page)
    screenshot(page, "1-deploying")
    assert Job.objects.filter(operation="deploy_dashboard").count() == 1
    assert list(
        AuditEntry.objects.filter(operation="deploy_dashboard")
        .order_by("pk")
        .values_list("decision", flat=True)
    ) == ["confirmation_requested", "confirmed"]


def test_the_operator_is_refused_production_before_anyone_is_asked(
    open_chat: Callable[..., Page], world: World
) -> None:
    target = world.dashboard("web-traffic", "prod")
    page = open_chat(world.operator, **DESKTOP)

    send(page, "deploy dashboard=web-traffic source=staging target=prod")

    expect(reply(page, "You may not change the Production environment.")).to_be_visible()
    expect(tool_card(page, "deploy_dashboard").locator(".badge")).to_have_text("denied")
    idle(page)
    expect(page.locator(".approval")).to_have_count(0)
    screenshot(page, "2-refused")
    assert not PendingAction.objects.exists()
    assert Dashboard.objects.get(pk=target.pk).version == 1
    assert not Job.objects.exists()


def test_an_ambiguous_dashboard_is_asked_about_not_approved(
    open_chat: Callable[..., Page], world: World
) -> None:
    page = open_chat(world.admin, **DESKTOP)

    send(page, "deploy dashboard=sales target=prod")

    expect(
        reply(page, "“sales” matches several dashboards you may view — which one?")
    ).to_be_visible()
    idle(page)
    expect(page.locator(".approval")).to_have_count(0)
    screenshot(page, "3-which-one")
    assert not PendingAction.objects.exists()
    assert not Job.objects.exists()
