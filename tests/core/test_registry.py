"""The ``@assistant_tool`` decorator and the ``ToolRegistry``: declaration, lookup, derived views."""

import dataclasses
import re
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import AnonymousUser
from django.test import override_settings

from assistant import AssistantTool, ToolCall, ToolResult, assistant_tool
from assistant.access.permissions import permission_map
from assistant.core.registry import RiskLevel, ToolRegistry, registry
from assistant.dispatch.catalog import get_catalog, visible_tools
from assistant.exceptions import (
    AlreadyRegistered,
    RegistryFrozen,
    ToolDefinitionError,
    UnknownOperation,
)


@pytest.fixture
def site() -> ToolRegistry:
    """A fresh registry: these tests never touch the project's own."""
    return ToolRegistry("test")


def declare(
    site: ToolRegistry, handler: Callable[..., Any] | None = None, **overrides: Any
) -> Callable[..., Any]:
    """Decorate ``handler`` (a fresh no-entity handler by default) with a valid declaration."""
    options: dict[str, Any] = {
        "operation": "do_thing",
        "domain": "things",
        "description": "Do the thing",
        "risk_level": "safe",
        "public": True,
    }
    options.update(overrides)
    if handler is None:

        def handler(call: ToolCall) -> ToolResult:
            return ToolResult(text="done")

    return assistant_tool(site=site, **options)(handler)


# --- the decorator -------------------------------------------------------------------------


def test_the_decorator_returns_the_function_unchanged_with_its_tool_attached(site):
    def greet(call: ToolCall, name: str) -> ToolResult:
        return ToolResult(text=f"hello {name}")

    decorated = declare(site, greet, operation="greet")

    assert decorated is greet
    assert decorated(None, name="Ada") == ToolResult(text="hello Ada")
    assert isinstance(greet.__assistant_tool__, AssistantTool)
    assert greet.__assistant_tool__ is site.get("greet")
    assert greet.__assistant_tool__.handler is greet


def test_the_tool_records_the_declaration(site):
    def approve(call: ToolCall, order_id: int, secret: str = "") -> ToolResult:
        return ToolResult(text="ok")

    declare(
        site,
        approve,
        operation="approve",
        domain=" orders ",
        description="Approve an order ",
        risk_level="guarded",
        requires_confirmation=True,
        public=False,
        permission_checks=[("orders", "update"), "testapp.approve_order"],
        keywords=["Approve Order", "approve"],
        sensitive_entities=["secret"],
        object_check=("order_id", "testapp.Order"),
        timeout=5,
    )
    tool = site.get("approve")

    assert tool.operation == "approve"
    assert tool.domain == "orders"
    assert tool.description == "Approve an order"
    assert tool.risk_level is RiskLevel.GUARDED
    assert tool.requires_confirmation is True
    assert tool.public is False
    assert tool.permission_checks == (("orders", "UPDATE"), "testapp.approve_order")
    assert tool.permission_mode == "all"
    assert tool.keywords == ("approve order", "approve")
    assert tool.sensitive_entities == frozenset({"secret"})
    assert tool.object_check == ("order_id", "testapp.Order")
    assert tool.timeout == 5.0
    assert [entity.name for entity in tool.entities] == ["order_id", "secret"]
    assert tool.module == __name__
    assert tool.is_safe is False


def test_a_declared_tool_cannot_be_changed_afterwards(site):
    tool = declare(site).__assistant_tool__

    with pytest.raises(dataclasses.FrozenInstanceError):
        tool.risk_level = RiskLevel.DANGEROUS


def test_an_explicit_optional_entities_that_agrees_with_the_signature_is_accepted(site):
    def search(call: ToolCall, query: str, page: int = 1) -> ToolResult:
        return ToolResult(text=query)

    declare(site, search, operation="search", optional_entities=["page", "query"])

    assert "search" in site


def test_permission_mode_any_is_recorded(site):
    declare(
        site,
        public=False,
        permission_checks=[("orders", "READ"), ("reports", "READ")],
        permission_mode="any",
    )

    assert site.get("do_thing").permission_mode == "any"


# --- declaration errors: raised at import, naming the tool ----------------------------------


def no_entities(call: ToolCall) -> ToolResult:
    raise AssertionError("never registered")


def takes_order(call: ToolCall, order_id: int, note: str = "") -> ToolResult:
    raise AssertionError("never registered")


def untyped_entity(call: ToolCall, order_id) -> ToolResult:
    raise AssertionError("never registered")


def star_args(call: ToolCall, *order_ids: int) -> ToolResult:
    raise AssertionError("never registered")


def star_kwargs(call: ToolCall, **filters: str) -> ToolResult:
    raise AssertionError("never registered")


def set_entity(call: ToolCall, order_ids: set[int]) -> ToolResult:
    raise AssertionError("never registered")


def union_entity(call: ToolCall, order_id: int | str) -> ToolResult:
    raise AssertionError("never registered")


def object_entity(call: ToolCall, payload: object) -> ToolResult:
    raise AssertionError("never registered")


def no_call_parameter() -> ToolResult:
    raise AssertionError("never registered")


GUARDED = {"public": False, "permission_checks": [("orders", "UPDATE")]}

DEFINITION_ERRORS = [
    pytest.param(no_entities, {"risk_level": "risky"}, "unknown risk_level", id="unknown-risk"),
    pytest.param(
        no_entities,
        {"risk_level": "dangerous", "requires_confirmation": False},
        "requires_confirmation=True",
        id="dangerous-without-confirmation",
    ),
    pytest.param(no_entities, {"public": False}, "public=True", id="no-permissions-not-public"),
    pytest.param(
        no_entities,
        {"public": True, "permission_checks": [("orders", "READ")]},
        "public tool cannot also have permission_checks",
        id="public-with-permissions",
    ),
    pytest.param(
        no_entities,
        {"optional_entities": ["order_id"]},
        "disagree",
        id="optional-entities-not-in-signature",
    ),
    pytest.param(
        takes_order,
        {"optional_entities": ["order_id"]},
        "disagree",
        id="optional-entities-missing-a-parameter",
    ),
    pytest.param(
        takes_order,
        {"sensitive_entities": ["password"]},
        "unknown entities ['password']",
        id="sensitive-entity-unknown",
    ),
    pytest.param(
        takes_order,
        {**GUARDED, "object_check": ("invoice_id", "testapp.Order")},
        "unknown entity 'invoice_id'",
        id="object-check-unknown-entity",
    ),
    pytest.param(
        takes_order,
        {**GUARDED, "object_check": ("order_id", "Order")},
        "'app_label.Model'",
        id="object-check-label-without-app",
    ),
    pytest.param(
        takes_order,
        {**GUARDED, "object_check": ("order_id", "testapp.Order.extra")},
        "'app_label.Model'",
        id="object-check-label-too-long",
    ),
    pytest.param(
        takes_order,
        {**GUARDED, "object_check": ("order_id",)},
        "object_check must be",
        id="object-check-not-a-pair",
    ),
    pytest.param(
        takes_order,
        {"public": True, "object_check": ("order_id", "testapp.Order")},
        "public tool cannot have an object_check",
        id="public-with-object-check",
    ),
    pytest.param(untyped_entity, {}, "'order_id' needs a type hint", id="missing-type-hint"),
    pytest.param(star_args, {}, "no *args/**kwargs", id="star-args"),
    pytest.param(star_kwargs, {}, "no *args/**kwargs", id="star-kwargs"),
    pytest.param(set_entity, {}, "unsupported type", id="unsupported-set"),
    pytest.param(union_entity, {}, "unsupported type", id="unsupported-union"),
    pytest.param(object_entity, {}, "unsupported type", id="unsupported-object"),
    pytest.param(no_call_parameter, {}, "first parameter must be the ToolCall", id="no-call"),
    pytest.param(no_entities, {"timeout": 0}, "timeout must be a positive", id="zero-timeout"),
    pytest.param(no_entities, {"timeout": -1.5}, "timeout must be a positive", id="neg-timeout"),
    pytest.param(no_entities, {"timeout": "30"}, "timeout must be a positive", id="text-timeout"),
    pytest.param(no_entities, {"timeout": True}, "timeout must be a positive", id="bool-timeout"),
    pytest.param(
        no_entities,
        {"public": False, "permission_checks": ["view_order"]},
        "'app_label.codename'",
        id="permission-string-without-app",
    ),
    pytest.param(
        no_entities,
        {"public": False, "permission_checks": [("orders",)]},
        "(resource, ACTION) pair",
        id="permission-pair-incomplete",
    ),
    pytest.param(
        no_entities,
        {"public": False, "permission_checks": [("auth.user", "DELETE")]},
        "'auth.user' looks like app_label.model",
        id="permission-pair-with-dotted-resource",
    ),
    pytest.param(
        no_entities,
        {**GUARDED, "permission_mode": "some"},
        "permission_mode must be",
        id="unknown-permission-mode",
    ),
    pytest.param(no_entities, {"domain": " "}, "domain", id="blank-domain"),
    pytest.param(no_entities, {"description": ""}, "description", id="blank-description"),
    pytest.param(no_entities, {"keywords": ["ok", " "]}, "keywords", id="blank-keyword"),
    pytest.param(no_entities, {"background": "yes"}, "background must be", id="text-background"),
]


@pytest.mark.parametrize(("handler", "overrides", "problem"), DEFINITION_ERRORS)
def test_an_unsafe_or_incomplete_declaration_raises_naming_the_tool(
    site, handler, overrides, problem
):
    with pytest.raises(ToolDefinitionError, match=rf"^bad_tool: .*{re.escape(problem)}") as excinfo:
        declare(site, handler, operation="bad_tool", **overrides)

    assert excinfo.value.code == "tool_definition"
    assert "bad_tool" not in site
    assert len(site) == 0
    assert not hasattr(handler, "__assistant_tool__")


@pytest.mark.parametrize(
    "operation", ["", "do thing", "1st_tool", "_private", "tool.name", "x" * 65, None]
)
def test_a_malformed_operation_name_raises_naming_it(site, operation):
    with pytest.raises(ToolDefinitionError, match=re.escape(repr(operation))):
        declare(site, operation=operation)

    assert len(site) == 0


@pytest.mark.parametrize("operation", ["a", "search_dashboards", "Tool-2", "x" * 64])
def test_well_formed_operation_names_are_accepted(site, operation):
    declare(site, operation=operation)

    assert operation in site


def test_a_keyword_already_used_by_another_tool_raises_naming_both(site):
    declare(site, operation="list_orders", keywords=["orders", "list orders"])

    with pytest.raises(ToolDefinitionError, match=r"^count_orders: keyword 'orders'.*list_orders"):
        declare(site, operation="count_orders", keywords=["count orders", "Orders"])

    assert "count_orders" not in site
    assert site.keyword_map == {"orders": "list_orders", "list orders": "list_orders"}


def test_a_tool_repeating_its_own_keyword_is_fine(site):
    declare(site, keywords=["ping", "PING", "ping "])

    assert site.get("do_thing").keywords == ("ping",)


# --- registration ----------------------------------------------------------------------------


def test_registering_an_operation_twice_raises_already_registered(site):
    first = declare(site, operation="ping")

    def second(call: ToolCall) -> ToolResult:
        return ToolResult(text="other")

    with pytest.raises(AlreadyRegistered, match=rf"^ping: already registered by {__name__}\."):
        declare(site, second, operation="ping")

    assert issubclass(AlreadyRegistered, ToolDefinitionError)
    assert site.get("ping").handler is first
    assert not hasattr(second, "__assistant_tool__")


def test_lookup_membership_length_and_order(site):
    declare(site, operation="first")
    declare(site, operation="second")
    declare(site, operation="third")

    assert [tool.operation for tool in site] == ["first", "second", "third"]
    assert len(site) == 3
    assert "second" in site
    assert "fourth" not in site
    assert site.get("third").operation == "third"


@pytest.mark.parametrize("operation", ["missing", None, ["ping"]])
def test_looking_up_an_unknown_operation_raises_unknown_operation(site, operation):
    declare(site, operation="ping")

    with pytest.raises(UnknownOperation) as excinfo:
        site.get(operation)

    assert excinfo.value.code == "unknown_operation"


def test_unregister_removes_the_tool(site):
    declare(site, operation="ping")
    declare(site, operation="pong")

    site.unregister("ping")

    assert [tool.operation for tool in site] == ["pong"]
    with pytest.raises(UnknownOperation):
        site.get("ping")
    with pytest.raises(UnknownOperation):
        site.unregister("ping")


def test_a_frozen_registry_refuses_registration_and_unregistration(site):
    declare(site, operation="early")
    site.freeze()

    def late(call: ToolCall) -> ToolResult:
        return ToolResult(text="late")

    with pytest.raises(RegistryFrozen, match=r"^late: .*frozen.*assistant_tools"):
        declare(site, late, operation="late")
    with pytest.raises(RegistryFrozen, match=r"^early: "):
        site.unregister("early")

    assert site.frozen
    assert [tool.operation for tool in site] == ["early"]
    assert not hasattr(late, "__assistant_tool__")


def test_the_project_registry_is_frozen_once_django_has_started():
    assert registry.frozen  # checked first: the attempts below must never change the real one

    def late(call: ToolCall) -> ToolResult:
        return ToolResult(text="late")

    with pytest.raises(RegistryFrozen):
        assistant_tool(
            operation="late_tool",
            domain="x",
            description="Too late",
            risk_level="safe",
            public=True,
        )(late)
    with pytest.raises(RegistryFrozen):
        registry.unregister("ping")

    assert "late_tool" not in registry
    assert "ping" in registry


def test_autodiscovery_registered_the_test_apps_tools_and_the_built_in_one():
    from tests.testapp import assistant_tools

    testapp_operations = {
        "ping",
        "apong",
        "list_orders",
        "show_report",
        "approve_order",
        "cancel_order",
        "merge_orders",
        "export_orders",
        "store_secret",
        "explode",
        "forbid",
        "echo_types",
    }
    assert testapp_operations <= {tool.operation for tool in registry}
    for operation in testapp_operations:
        tool = registry.get(operation)
        assert tool.module == "tests.testapp.assistant_tools"
        assert getattr(assistant_tools, operation).__assistant_tool__ is tool

    capabilities = registry.get("show_capabilities")
    assert capabilities.module == "assistant.tools.capabilities"
    assert capabilities.public is True
    assert capabilities.is_safe


# --- derived views ---------------------------------------------------------------------------


def test_safe_operations_are_exactly_the_safe_tools(site):
    declare(site, operation="look")
    declare(site, operation="touch", risk_level="guarded")
    declare(site, operation="break", risk_level="dangerous", requires_confirmation=True)

    assert site.safe_operations == frozenset({"look"})


def test_safe_operations_follow_registration_and_unregistration(site):
    declare(site, operation="look")
    assert site.safe_operations == {"look"}

    declare(site, operation="peek")
    assert site.safe_operations == {"look", "peek"}

    site.unregister("look")
    assert site.safe_operations == {"peek"}


def test_the_project_registry_derives_safe_operations():
    assert {"ping", "list_orders", "show_capabilities"} <= registry.safe_operations
    assert {"approve_order", "cancel_order", "merge_orders"}.isdisjoint(registry.safe_operations)


def test_the_keyword_map_sends_each_lowercased_keyword_to_its_tool(site):
    declare(site, operation="list_orders", keywords=["List Orders", "orders"])
    declare(site, operation="ping", keywords=["ping"])
    declare(site, operation="silent")

    assert site.keyword_map == {
        "list orders": "list_orders",
        "orders": "list_orders",
        "ping": "ping",
    }


def test_the_keyword_map_follows_registration_and_unregistration(site):
    declare(site, operation="ping", keywords=["ping"])
    assert site.keyword_map == {"ping": "ping"}

    site.unregister("ping")
    assert site.keyword_map == {}

    declare(site, operation="ping_again", keywords=["ping"])
    assert site.keyword_map == {"ping": "ping_again"}


def test_the_project_keyword_map():
    assert registry.keyword_map["ping"] == "ping"
    assert registry.keyword_map["help"] == "show_capabilities"
    assert registry.keyword_map["approve order"] == "approve_order"


@pytest.mark.parametrize(
    ("check", "permission"),
    [
        # ASSISTANT["RESOURCES"] maps "orders" to testapp.Order in the test settings.
        (("orders", "READ"), "testapp.view_order"),
        (("orders", "LIST"), "testapp.view_order"),
        (("orders", "CREATE"), "testapp.add_order"),
        (("orders", "UPDATE"), "testapp.change_order"),
        (("orders", "delete"), "testapp.delete_order"),
        (("orders", "APPROVE"), "testapp.approve_order"),
        (("reports", "READ"), "assistant.reports_read"),
        (("Reports", "Export"), "assistant.reports_export"),
        ("testapp.approve_order", "testapp.approve_order"),
        ("auth.change_user", "auth.change_user"),
    ],
)
def test_each_permission_check_maps_to_one_django_permission(site, check, permission):
    declare(site, operation="guarded", public=False, permission_checks=[check])

    assert permission_map(site) == {"guarded": (permission,)}


def test_the_permission_map_lists_every_check_in_order_and_nothing_for_public_tools(site):
    declare(
        site,
        operation="merge",
        public=False,
        permission_checks=[("orders", "UPDATE"), ("orders", "DELETE"), "auth.view_user"],
    )
    declare(site, operation="ping")

    assert permission_map(site) == {
        "merge": ("testapp.change_order", "testapp.delete_order", "auth.view_user"),
        "ping": (),
    }


def test_the_permission_map_follows_registration_and_unregistration(site):
    declare(site, operation="read", public=False, permission_checks=[("orders", "READ")])
    assert permission_map(site) == {"read": ("testapp.view_order",)}

    declare(site, operation="report", public=False, permission_checks=[("reports", "READ")])
    assert permission_map(site) == {
        "read": ("testapp.view_order",),
        "report": ("assistant.reports_read",),
    }

    site.unregister("read")
    assert permission_map(site) == {"report": ("assistant.reports_read",)}


def test_the_permission_map_follows_the_resources_setting(site):
    declare(site, operation="read", public=False, permission_checks=[("orders", "READ")])
    assert permission_map(site) == {"read": ("testapp.view_order",)}

    with override_settings(ASSISTANT={"RESOURCES": {}}):
        assert permission_map(site) == {"read": ("assistant.orders_read",)}

    assert permission_map(site) == {"read": ("testapp.view_order",)}


def test_the_project_permission_map():
    permissions = permission_map(registry)

    assert permissions["ping"] == ()
    assert permissions["list_orders"] == ("testapp.view_order",)
    assert permissions["show_report"] == ("assistant.reports_read",)
    assert permissions["approve_order"] == ("testapp.approve_order",)
    assert permissions["merge_orders"] == ("testapp.change_order", "testapp.delete_order")
    assert permissions["store_secret"] == ("assistant.vault_write",)


# --- catalog ---------------------------------------------------------------------------------


def declare_catalog_tools(site: ToolRegistry) -> None:
    def ping(call: ToolCall) -> ToolResult:
        return ToolResult(text="pong")

    def list_orders(call: ToolCall, page: int = 1) -> ToolResult:
        return ToolResult(text="orders")

    def approve(call: ToolCall, order_id: int) -> ToolResult:
        return ToolResult(text="approved")

    declare(site, ping, operation="ping", description="Answer pong")
    declare(
        site,
        list_orders,
        operation="list_orders",
        domain="orders",
        description="List orders",
        public=False,
        permission_checks=[("orders", "READ")],
    )
    declare(
        site,
        approve,
        operation="approve",
        domain="orders",
        description="Approve an order",
        risk_level="guarded",
        public=False,
        permission_checks=["testapp.approve_order"],
    )


@pytest.mark.django_db
def test_the_openai_catalog_format(site, superuser):
    declare_catalog_tools(site)

    assert get_catalog(superuser, site=site) == [
        {
            "type": "function",
            "function": {
                "name": "ping",
                "description": "Answer pong",
                "parameters": {
                    "type": "object",
                    "properties": {},
                    "required": [],
                    "additionalProperties": False,
                },
            },
        },
        {
            "type": "function",
            "function": {
                "name": "list_orders",
                "description": "List orders",
                "parameters": {
                    "type": "object",
                    "properties": {"page": {"type": "integer", "default": 1}},
                    "required": [],
                    "additionalProperties": False,
                },
            },
        },
        {
            "type": "function",
            "function": {
                "name": "approve",
                "description": "Approve an order",
                "parameters": {
                    "type": "object",
                    "properties": {"order_id": {"type": "integer"}},
                    "required": ["order_id"],
                    "additionalProperties": False,
                },
            },
        },
    ]


@pytest.mark.django_db
def test_the_anthropic_catalog_format(site, superuser):
    declare_catalog_tools(site)

    catalog = get_catalog(superuser, style="anthropic", site=site)

    assert catalog[2] == {
        "name": "approve",
        "description": "Approve an order",
        "input_schema": {
            "type": "object",
            "properties": {"order_id": {"type": "integer"}},
            "required": ["order_id"],
            "additionalProperties": False,
        },
    }
    assert [tool["name"] for tool in catalog] == ["ping", "list_orders", "approve"]
    assert [set(tool) for tool in catalog] == [{"name", "description", "input_schema"}] * 3


@pytest.mark.django_db
def test_the_catalog_holds_only_what_the_user_may_use(site, reader, clerk, plain_user):
    declare_catalog_tools(site)

    def names(user: Any) -> list[str]:
        return [tool["function"]["name"] for tool in get_catalog(user, site=site)]

    assert names(plain_user) == ["ping"]
    assert names(reader) == ["ping", "list_orders"]
    assert names(clerk) == ["ping", "list_orders", "approve"]


@pytest.mark.django_db
def test_anonymous_and_inactive_users_get_an_empty_catalog(site, make_user):
    declare_catalog_tools(site)
    inactive = make_user("retired", "testapp.view_order", is_active=False)

    assert get_catalog(AnonymousUser(), site=site) == []
    assert get_catalog(inactive, site=site) == []
    assert get_catalog(inactive, style="anthropic", site=site) == []


@pytest.mark.django_db
def test_a_users_catalog_follows_tools_registered_and_removed_after_it_was_read(site, reader):
    declare(site, operation="ping")
    assert [tool.operation for tool in visible_tools(reader, site=site)] == ["ping"]

    declare(site, operation="pong")
    declare(site, operation="orders_only", public=False, permission_checks=[("orders", "VIEW")])
    assert [tool.operation for tool in visible_tools(reader, site=site)] == [
        "ping",
        "pong",
        "orders_only",
    ]

    site.unregister("ping")
    assert [tool.operation for tool in visible_tools(reader, site=site)] == [
        "pong",
        "orders_only",
    ]


@pytest.mark.django_db
def test_a_users_catalog_follows_a_change_of_what_a_resource_stands_for(site, reader, settings):
    declare(site, operation="orders_only", public=False, permission_checks=[("orders", "VIEW")])
    assert [tool.operation for tool in visible_tools(reader, site=site)] == ["orders_only"]

    # the same user object (its access snapshot kept): "orders" now names another model
    settings.ASSISTANT = {**settings.ASSISTANT, "RESOURCES": {"orders": "auth.Group"}}
    assert visible_tools(reader, site=site) == []


# --- sync and async handlers -----------------------------------------------------------------


def test_sync_and_async_handlers_are_told_apart(site):
    def sync_handler(call: ToolCall) -> ToolResult:
        return ToolResult(text="sync")

    async def async_handler(call: ToolCall) -> ToolResult:
        return ToolResult(text="async")

    declare(site, sync_handler, operation="sync_tool")
    declare(site, async_handler, operation="async_tool")

    assert site.get("sync_tool").is_async is False
    assert site.get("async_tool").is_async is True
    assert registry.get("apong").is_async is True
    assert registry.get("ping").is_async is False
