"""``manage.py assistant_tools``: the tool inventory, and which tools a user may use and why not."""

import json
import re
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from guardian.shortcuts import assign_perm

from assistant.core.registry import registry
from assistant.dispatch.catalog import get_catalog
from tests.testapp.models import Order

TESTAPP = "tests.testapp.assistant_tools"


def run(*args: str) -> str:
    out = StringIO()
    call_command("assistant_tools", *args, stdout=out)
    return out.getvalue()


def inventory(*args: str) -> dict[str, dict[str, Any]]:
    """The ``--json`` output, by operation."""
    rows = json.loads(run("--json", *args))
    return {row["operation"]: row for row in rows}


def table(*args: str) -> tuple[list[str], dict[str, list[str]], str]:
    """The table output as (header cells, cells by operation, closing line)."""
    lines = [line for line in run(*args).splitlines() if line.strip()]
    header, *body, total = lines

    def cells(line: str) -> list[str]:
        return re.split(r"\s{2,}", line.strip())

    return cells(header), {cells(line)[0]: cells(line) for line in body}, total


# --- the inventory ---------------------------------------------------------------------------


def test_json_lists_every_registered_tool():
    rows = json.loads(run("--json"))

    assert sorted(row["operation"] for row in rows) == sorted(tool.operation for tool in registry)
    for row in rows:
        assert {
            "operation",
            "domain",
            "risk_level",
            "requires_confirmation",
            "permissions",
            "module",
        } <= set(row)
        assert "visible" not in row


def test_json_rows_are_sorted_by_domain_then_operation():
    rows = json.loads(run("--json"))
    keys = [(row["domain"], row["operation"]) for row in rows]

    assert keys == sorted(keys)


@pytest.mark.parametrize(
    ("operation", "expected"),
    [
        (
            "cancel_order",
            {
                "domain": "orders",
                "risk_level": "dangerous",
                "requires_confirmation": True,
                "permissions": ["testapp.change_order"],
                "object_check": ["order_id", "testapp.Order"],
                "module": TESTAPP,
            },
        ),
        (
            "approve_order",
            {
                "domain": "orders",
                "risk_level": "guarded",
                "requires_confirmation": True,
                "permissions": ["testapp.approve_order"],
                "module": TESTAPP,
            },
        ),
        (
            "merge_orders",
            {
                "risk_level": "guarded",
                "requires_confirmation": False,
                "permissions": ["testapp.change_order", "testapp.delete_order"],
                "permission_mode": "all",
            },
        ),
        (
            "export_orders",
            {
                "permissions": ["testapp.view_order", "assistant.reports_read"],
                "permission_mode": "any",
            },
        ),
        ("show_report", {"domain": "reports", "permissions": ["assistant.reports_read"]}),
        (
            "ping",
            {
                "domain": "diagnostics",
                "risk_level": "safe",
                "requires_confirmation": False,
                "public": True,
                "permissions": [],
                "object_check": None,
                "module": TESTAPP,
            },
        ),
        (
            "show_capabilities",
            {
                "domain": "assistant",
                "public": True,
                "permissions": [],
                "module": "assistant.tools.capabilities",
            },
        ),
    ],
)
def test_json_describes_each_tool(operation, expected):
    row = inventory()[operation]

    assert {key: row[key] for key in expected} == expected


def test_the_table_shows_every_tool_with_its_risk_confirmation_permissions_and_module():
    header, rows, total = table()

    assert header == [
        "operation",
        "domain",
        "risk_level",
        "confirm",
        "permissions",
        "toolset",
        "module",
    ]
    assert set(rows) == {tool.operation for tool in registry}
    assert rows["cancel_order"] == [
        "cancel_order",
        "orders",
        "dangerous",
        "yes",
        "testapp.change_order",
        "-",
        TESTAPP,
    ]
    assert rows["ping"] == ["ping", "diagnostics", "safe", "no", "public", "-", TESTAPP]
    assert rows["probe_state"][5] == "probe (session)"
    assert rows["merge_orders"][4] == "testapp.change_order, testapp.delete_order"
    assert rows["export_orders"][4] == "any of testapp.view_order, assistant.reports_read"
    assert total == f"{len(registry)} tools"


# --- visibility for one user -----------------------------------------------------------------


@pytest.mark.django_db
def test_as_user_shows_what_they_may_use_and_why_the_rest_is_hidden(reader):
    rows = inventory("--as", "reader")

    for operation in ("ping", "show_capabilities", "list_orders", "show_report", "export_orders"):
        assert rows[operation]["visible"] is True, operation
        assert rows[operation]["hidden_because"] == []
    assert rows["approve_order"]["visible"] is False
    assert rows["approve_order"]["hidden_because"] == ["missing permission testapp.approve_order"]
    assert rows["cancel_order"]["hidden_because"] == ["missing permission testapp.change_order"]
    assert rows["merge_orders"]["hidden_because"] == [
        "missing permission testapp.change_order",
        "missing permission testapp.delete_order",
    ]
    assert rows["store_secret"]["hidden_because"] == ["missing permission assistant.vault_write"]


@pytest.mark.django_db
def test_a_tool_needing_several_permissions_names_only_the_missing_one(clerk):
    rows = inventory("--as", "clerk")

    assert rows["approve_order"]["visible"] is True
    assert rows["cancel_order"]["visible"] is True
    assert rows["merge_orders"]["visible"] is False
    assert rows["merge_orders"]["hidden_because"] == ["missing permission testapp.delete_order"]


@pytest.mark.django_db
def test_visibility_agrees_with_the_users_catalog(reader, clerk, plain_user):
    for user in (reader, clerk, plain_user):
        rows = inventory("--as", user.username)
        catalog = {tool["function"]["name"] for tool in get_catalog(user, site=registry)}

        assert {operation for operation, row in rows.items() if row["visible"]} == catalog


@pytest.mark.django_db
def test_an_object_permission_on_one_order_makes_an_object_checked_tool_visible(make_user):
    approver = make_user("approver")
    order = Order.objects.create(reference="A-1")
    assign_perm("testapp.approve_order", approver, order)

    rows = inventory("--as", "approver")

    assert rows["approve_order"]["visible"] is True
    assert rows["cancel_order"]["visible"] is False


@pytest.mark.django_db
def test_a_superuser_sees_every_tool_whose_toolset_starts(superuser):
    rows = inventory("--as", "root")
    hidden = {operation for operation, row in rows.items() if not row["visible"]}

    assert hidden == {"broken_tool", "outage_status"}  # the test toolsets that fail to start
    assert all(row["hidden_because"] == [] for row in rows.values() if row["visible"])


@pytest.mark.django_db
def test_an_inactive_user_sees_nothing_not_even_public_tools(make_user):
    make_user("retired", "testapp.view_order", is_active=False)

    rows = inventory("--as", "retired")

    assert {row["visible"] for row in rows.values()} == {False}
    assert rows["ping"]["hidden_because"] == ["inactive user"]
    assert rows["list_orders"]["hidden_because"] == ["inactive user"]


@pytest.mark.django_db
def test_the_table_as_a_user_adds_a_visibility_column_with_reasons(reader):
    header, rows, _ = table("--as", "reader")

    assert header[-1] == "visible to reader"
    assert rows["list_orders"][-1] == "yes"
    assert rows["approve_order"][-1] == "no — missing permission testapp.approve_order"
    assert rows["merge_orders"][-1] == (
        "no — missing permission testapp.change_order; missing permission testapp.delete_order"
    )


@pytest.mark.django_db
@pytest.mark.parametrize("args", [("--as", "ghost"), ("--as", "ghost", "--json")])
def test_an_unknown_user_is_a_command_error(reader, args):
    with pytest.raises(CommandError, match="No user named 'ghost'"):
        run(*args)


def test_json_names_a_toolset_tool_s_toolset_and_lifecycle():
    row = inventory()["list_tables"]

    assert row["toolset"] == "test_database"
    assert row["lifecycle"] == "per call (starts for each call, holds nothing between calls)"
    assert inventory()["overrun"]["timeout"] == 0.2
    assert inventory()["ping"]["lifecycle"] == "none"
