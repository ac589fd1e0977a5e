"""The offline planner: keywords pick one of the user's own tools, the message fills its entities."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest

from assistant.core.registry import registry
from assistant.dispatch.catalog import visible_tools
from assistant.dispatch.door import dispatch
from assistant.turns.planners import Intent
from assistant.turns.planners.keywords import extract_entities, match_tool, plan

pytestmark = pytest.mark.django_db


def matched(text, user):
    tool = match_tool(text, visible_tools(user, site=registry))
    return tool.operation if tool else None


def planned(text, user):
    return [(intent.operation, intent.entities) for intent in plan(text, user)]


@pytest.fixture
def manager(make_user):
    """May read, change and delete orders."""
    return make_user(
        "manager", "testapp.view_order", "testapp.change_order", "testapp.delete_order"
    )


def test_the_longest_matching_keyword_wins(reader):
    # "orders" belongs to list_orders, "export orders" to export_orders.
    assert matched("export orders for the auditors", reader) == "export_orders"
    assert matched("show me the orders", reader) == "list_orders"


def test_only_tools_the_user_can_see_are_matched(reader, clerk, manager):
    message = "merge orders 4 and 7"

    assert matched(message, manager) == "merge_orders"
    # clerk may change but not delete orders: the longer keyword is not theirs to match.
    assert matched(message, clerk) == "list_orders"
    assert matched("cancel order 4 from my orders", reader) == "list_orders"
    assert matched("cancel order 4 from my orders", clerk) == "cancel_order"


def test_a_user_without_permission_never_gets_a_tool_they_cannot_see(plain_user):
    for message in ("list orders", "store secret label=a secret=b", "approve order 3"):
        assert planned(message, plain_user) == [("show_capabilities", {})], message


def test_an_unmatched_message_gets_the_capabilities(reader):
    assert plan("make me a sandwich", reader) == [
        Intent(operation="show_capabilities", source="keywords")
    ]


def test_keywords_match_whole_words_only(reader):
    assert matched("the reporters are shipping", reader) is None
    assert matched("ping", reader) == "ping"
    assert matched("pinging", reader) is None


def test_the_operation_name_also_names_the_tool(reader):
    assert matched("show_report name=q1", reader) == "show_report"
    assert matched("please show report q1", reader) == "show_report"


def test_matching_ignores_case_and_spacing(reader):
    assert matched("EXPORT    Orders", reader) == "export_orders"


def test_plan_extracts_entities_for_the_matched_tool(reader):
    assert planned("list orders status=shipped page=2", reader) == [
        ("list_orders", {"status": "shipped", "page": 2})
    ]


def entities(text, operation):
    return extract_entities(text, registry.get(operation))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("show report name=sales", {"name": "sales"}),
        ('show report name="q1 sales"', {"name": "q1 sales"}),
        ("show report name='q2 sales'", {"name": "q2 sales"}),
        ('show report "monthly sales"', {"name": "monthly sales"}),
        ("show report 'weekly sales'", {"name": "weekly sales"}),
    ],
)
def test_key_value_pairs_and_quoted_strings(text, expected):
    assert entities(text, "show_report") == expected


def test_bare_numbers_fill_integer_and_number_entities():
    assert entities("echo types 3 2.5", "echo_types") == {"count": 3, "ratio": 2.5}
    assert entities("echo types 2.5", "echo_types") == {"ratio": 2.5}
    assert entities("echo types -4", "echo_types") == {"count": -4}
    assert entities("list orders 3", "list_orders") == {"page": 3}


def test_bare_booleans_fill_boolean_entities():
    assert entities("echo types 1 yes", "echo_types") == {"count": 1, "flag": True}
    assert entities("echo types 1 false", "echo_types") == {"count": 1, "flag": False}


def test_values_are_parsed_to_the_declared_types():
    found = entities(
        "echo types count=4 ratio=0.5 flag=true when=2024-05-01 kind=B tags=a,b "
        "ident=6f1c1d0e-0000-4000-8000-000000000000",
        "echo_types",
    )

    assert found == {
        "count": 4,
        "ratio": 0.5,
        "flag": True,
        "when": dt.date(2024, 5, 1),
        "kind": "b",
        "tags": ["a", "b"],
        "ident": uuid.UUID("6f1c1d0e-0000-4000-8000-000000000000"),
    }
    assert type(found["count"]) is int
    assert type(found["ratio"]) is float


@pytest.mark.parametrize(
    ("message", "data"),
    [
        ("echo types 3 2.5 yes", {"count": 3, "ratio": 2.5, "flag": True}),
        ("echo types count=2 kind=b tags=x,y", {"count": 2, "kind": "b", "tags": ["x", "y"]}),
        (
            "echo types count=1 ident=6f1c1d0e-0000-4000-8000-000000000000",
            {"count": 1, "ident": "6f1c1d0e-0000-4000-8000-000000000000"},
        ),
        ('echo types count=1 meta={"a":1}', {"count": 1, "meta": {"a": 1}}),
        ("echo types count=1 when=2024-05-01", {"count": 1, "when": "2024-05-01"}),
    ],
    ids=["numbers-and-bool", "enum-and-list", "uuid", "json-object", "date"],
)
def test_planned_entities_are_accepted_by_dispatch(plain_user, message, data):
    (intent,) = plan(message, plain_user)

    outcome = dispatch(intent.operation, intent.entities, user=plain_user)

    assert outcome.decision == "executed", outcome.text
    assert {key: value for key, value in outcome.result.data.items() if key in data} == data


def test_an_unparseable_value_is_left_as_text_for_dispatch_to_refuse(plain_user):
    (intent,) = plan("echo types count=many", plain_user)

    assert intent.entities == {"count": "many"}
    outcome = dispatch(intent.operation, intent.entities, user=plain_user)
    assert outcome.code == "invalid_entities"
    assert outcome.error.errors == {"count": "expected an integer"}


def test_an_unknown_choice_is_left_as_text_for_dispatch_to_refuse(reader):
    (intent,) = plan("list orders status=lost", reader)

    assert intent.entities == {"status": "lost"}
    outcome = dispatch(intent.operation, intent.entities, user=reader)
    assert outcome.error.errors == {"status": "expected one of 'open', 'shipped', 'cancelled'"}
