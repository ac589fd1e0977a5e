"""The tool inventory admin: every registered operation, and why a user may not see one."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest
from django.test import Client

from assistant.core.registry import registry
from tests.admin.pages import INVENTORY, page_text, strip_tags

pytestmark = pytest.mark.django_db


def inventory_rows(response: Any) -> dict[str, str]:
    """operation → the row's HTML."""
    return dict(
        re.findall(
            r'<tr class="tool-row" data-operation="([^"]+)">(.*?)</tr>',
            response.content.decode(),
            re.S,
        )
    )


def visibility(response: Any) -> dict[str, str]:
    """operation → what the "visible to" column says (empty without that column)."""
    answers = {}
    for operation, row in inventory_rows(response).items():
        cell = re.search(r'<td class="visibility">(.*?)</td>', row, re.S)
        if cell is not None:
            answers[operation] = strip_tags(cell[1])
    return answers


def test_the_inventory_lists_every_registered_operation(admin_client: Client) -> None:
    response = admin_client.get(INVENTORY)

    rows = inventory_rows(response)
    assert response.status_code == 200
    assert sorted(rows) == sorted(tool.operation for tool in registry)
    approve = html.unescape(re.sub(r"<[^>]+>", "|", rows["approve_order"]))
    assert [cell for cell in approve.split("|") if cell.strip()] == [
        "approve_order",
        "orders",
        "guarded",
        "asks first",
        "testapp.approve_order",
        "—",
        "tests.testapp.assistant_tools",
    ]
    assert "<th>visible to" not in response.content.decode()


def test_explaining_for_a_user_shows_what_they_see_and_why_not(
    admin_client: Client, reader: Any
) -> None:
    response = admin_client.get(INVENTORY, {"user": "reader"})

    seen = visibility(response)
    assert seen["ping"] == "yes"
    assert seen["list_orders"] == "yes"
    assert seen["show_report"] == "yes"
    assert seen["export_orders"] == "yes"
    assert seen["approve_order"] == "no — missing permission testapp.approve_order"
    assert seen["store_secret"] == "no — missing permission assistant.vault_write"
    assert seen["merge_orders"] == (
        "no — missing permission testapp.change_order; missing permission testapp.delete_order"
    )
    visible = sum(1 for answer in seen.values() if answer == "yes")
    assert f"{visible} of {len(seen)} tools visible to reader" in strip_tags(
        response.content.decode()
    )


def test_explaining_for_an_unknown_user_says_so(admin_client: Client) -> None:
    response = admin_client.get(INVENTORY, {"user": "ghost"})

    assert response.status_code == 200
    assert "No user named “ghost”." in page_text(response)
    assert len(inventory_rows(response)) == len(list(registry))
    assert visibility(response) == {}
