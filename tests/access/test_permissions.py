"""Who sees which tool: the catalog and dispatch follow Django and guardian permissions exactly."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser, Group, Permission
from guardian.shortcuts import assign_perm, remove_perm

from assistant.access.permissions import access_for, explain, forget_access, permission_map
from assistant.core.registry import registry
from assistant.dispatch.catalog import get_catalog, visible_tools
from assistant.dispatch.door import dispatch
from assistant.models import AuditEntry, PendingAction
from assistant.surfaces.drf.serializers import OutcomeSerializer
from tests.conftest import perm
from tests.testapp.models import Order

pytestmark = pytest.mark.django_db

PUBLIC = {
    "show_capabilities",
    "ping",
    "apong",
    "explode",
    "forbid",
    "echo_types",
    "slow",
    "slow_sync",
    "get_task_status",
}


def operations(user):
    return {tool.operation for tool in visible_tools(user, site=registry)}


def catalog_names(user, style="openai"):
    catalog = get_catalog(user, style=style, site=registry)
    if style == "anthropic":
        return {spec["name"] for spec in catalog}
    return {spec["function"]["name"] for spec in catalog}


def refetch(user):
    return get_user_model().objects.get(pk=user.pk)


def test_anonymous_user_gets_nothing():
    assert visible_tools(AnonymousUser(), site=registry) == []
    assert get_catalog(AnonymousUser(), site=registry) == []


def test_inactive_user_gets_nothing_whatever_they_hold(make_user):
    inactive = make_user("gone", "testapp.view_order", is_active=False)
    inactive_root = make_user("oldroot", is_active=False, is_superuser=True)

    assert operations(inactive) == set()
    assert operations(inactive_root) == set()


def test_superuser_gets_every_registered_tool_whose_toolset_starts(superuser):
    everything = {tool.operation for tool in registry}

    assert operations(superuser) == everything - {"broken_tool", "outage_status"}
    assert everything > PUBLIC


def test_plain_user_gets_only_public_tools(plain_user):
    assert operations(plain_user) == PUBLIC


def test_catalog_names_exactly_the_visible_tools_in_both_formats(reader):
    expected = PUBLIC | {"list_orders", "show_report", "export_orders"}

    assert operations(reader) == expected
    assert catalog_names(reader) == expected
    assert catalog_names(reader, style="anthropic") == expected


def test_catalog_entries_are_openai_tool_specs(reader):
    by_name = {spec["function"]["name"]: spec for spec in get_catalog(reader, site=registry)}
    spec = by_name["show_report"]

    assert spec["type"] == "function"
    assert spec["function"]["description"] == "Show a named report"
    assert spec["function"]["parameters"]["required"] == ["name"]
    assert spec["function"]["parameters"]["properties"]["name"]["type"] == "string"


def test_pairs_map_to_model_permissions_or_to_the_apps_own():
    assert permission_map(registry)["list_orders"] == ("testapp.view_order",)
    assert permission_map(registry)["cancel_order"] == ("testapp.change_order",)
    assert permission_map(registry)["show_report"] == ("assistant.reports_read",)
    assert permission_map(registry)["store_secret"] == ("assistant.vault_write",)
    assert permission_map(registry)["approve_order"] == ("testapp.approve_order",)
    assert permission_map(registry)["ping"] == ()


def test_a_mapped_pair_grants_the_tools_that_need_it(make_user):
    viewer = make_user("viewer", "testapp.view_order")

    assert operations(viewer) == PUBLIC | {"list_orders", "export_orders"}


def test_an_unmapped_pair_is_granted_through_the_apps_permission(make_user):
    keeper = make_user("keeper", "assistant.vault_write")

    assert operations(keeper) == PUBLIC | {"store_secret", "rotate_secret"}


def test_a_plain_permission_string_is_used_as_it_is(make_user):
    approver = make_user("approver", "testapp.approve_order")

    assert operations(approver) == PUBLIC | {"approve_order"}


def test_all_of_needs_every_check(make_user):
    changer = make_user("changer", "testapp.change_order")
    merger = make_user("merger", "testapp.change_order", "testapp.delete_order")

    assert operations(changer) == PUBLIC | {"cancel_order"}
    assert operations(merger) == PUBLIC | {"cancel_order", "merge_orders"}


def test_any_of_needs_one_check(make_user):
    report_reader = make_user("analyst", "assistant.reports_read")
    order_viewer = make_user("viewer", "testapp.view_order")

    assert "export_orders" in operations(report_reader)
    assert "export_orders" in operations(order_viewer)
    assert operations(report_reader) == PUBLIC | {"show_report", "export_orders"}


def test_group_permissions_count(make_user):
    group = Group.objects.create(name="order-desk")
    group.permissions.set(
        Permission.objects.filter(
            content_type__app_label="testapp", codename__in=["view_order", "change_order"]
        )
    )
    member = make_user("member", groups=("order-desk",))

    assert operations(member) == PUBLIC | {"list_orders", "export_orders", "cancel_order"}


def test_post_migrate_creates_a_permission_for_each_unmapped_pair():
    created = set(
        Permission.objects.filter(content_type__app_label="assistant").values_list(
            "codename", flat=True
        )
    )

    assert {"reports_read", "vault_write"} <= created
    # ("orders", ...) pairs map to testapp.Order's own permissions; none is invented for them.
    assert not {"orders_read", "orders_update", "orders_delete"} & created


def test_the_created_permission_is_granted_like_any_other(make_user):
    analyst = make_user("analyst")
    analyst.user_permissions.add(
        Permission.objects.get(content_type__app_label="assistant", codename="reports_read")
    )

    assert "show_report" in operations(refetch(analyst))


def test_object_permission_shows_the_tool_and_allows_it_for_that_order_only(make_user):
    mine = Order.objects.create(reference="A-1")
    other = Order.objects.create(reference="B-2")
    olga = make_user("olga")
    assign_perm("testapp.approve_order", olga, mine)
    olga = refetch(olga)

    assert operations(olga) == PUBLIC | {"approve_order"}

    allowed = dispatch("approve_order", {"order_id": mine.pk}, user=olga)
    elsewhere = dispatch("approve_order", {"order_id": other.pk}, user=olga)
    nowhere = dispatch("approve_order", {"order_id": other.pk + 1000}, user=olga)

    assert allowed.decision == "confirmation_requested"
    assert elsewhere.code == nowhere.code == "invalid_entities"
    assert elsewhere.text == nowhere.text
    assert (
        elsewhere.error.errors
        == nowhere.error.errors
        == {"order_id": "no testapp.Order with this id that you may use"}
    )
    assert elsewhere.status == nowhere.status == 400
    assert AuditEntry.objects.get(pk=elsewhere.audit_id).decision == "denied"
    assert AuditEntry.objects.get(pk=nowhere.audit_id).decision == "invalid"
    assert list(PendingAction.objects.filter(user=olga).values_list("entities", flat=True)) == [
        {"order_id": mine.pk}
    ]


def test_a_forbidden_order_and_a_missing_one_look_the_same_to_the_user(make_user):
    """What the API returns must not tell an existing, forbidden order from a missing one."""
    mine = Order.objects.create(reference="A-1")
    other = Order.objects.create(reference="B-2")
    olga = make_user("olga")
    assign_perm("testapp.approve_order", olga, mine)
    olga = refetch(olga)

    shown = ("decision", "code", "text", "errors", "pending_action")
    elsewhere = OutcomeSerializer(dispatch("approve_order", {"order_id": other.pk}, user=olga))
    nowhere = OutcomeSerializer(dispatch("approve_order", {"order_id": 987654}, user=olga))

    assert {key: elsewhere.data[key] for key in shown} == {key: nowhere.data[key] for key in shown}


def test_group_object_permission_counts(make_user):
    order = Order.objects.create(reference="G-1")
    group = Group.objects.create(name="approvers")
    assign_perm("testapp.approve_order", group, order)
    member = make_user("member", groups=("approvers",))

    assert "approve_order" in operations(member)
    assert dispatch("approve_order", {"order_id": order.pk}, user=member).decision == (
        "confirmation_requested"
    )


def test_object_permission_on_another_model_opens_nothing(make_user):
    order = Order.objects.create(reference="C-3")
    viewer = make_user("viewer")
    assign_perm("testapp.view_order", viewer, order)
    viewer = refetch(viewer)

    # list_orders has no object check: a permission on one order is not the global one.
    assert operations(viewer) == PUBLIC


def test_catalog_costs_at_most_three_queries_for_a_fresh_user(
    make_user, django_assert_max_num_queries, django_assert_num_queries
):
    order = Order.objects.create(reference="Q-1")
    user = make_user("counted", "testapp.view_order", groups=("desk",))
    assign_perm("testapp.approve_order", user, order)
    fresh = refetch(user)

    with django_assert_max_num_queries(3):
        catalog = get_catalog(fresh, site=registry)
    with django_assert_num_queries(0):
        assert get_catalog(fresh, site=registry) == catalog

    assert {spec["function"]["name"] for spec in catalog} == PUBLIC | {
        "list_orders",
        "export_orders",
        "approve_order",
    }


def test_explain_names_the_failing_check_of_each_hidden_tool(make_user):
    changer = make_user("changer", "testapp.change_order")
    reasons = {tool.operation: why for tool, why in explain(changer, registry)}

    assert reasons["ping"] == ()
    assert reasons["cancel_order"] == ()
    assert reasons["merge_orders"] == ("missing permission testapp.delete_order",)
    assert reasons["show_report"] == ("missing permission assistant.reports_read",)
    assert reasons["export_orders"] == (
        "missing permission testapp.view_order",
        "missing permission assistant.reports_read",
    )
    assert {op for op, why in reasons.items() if not why} == operations(changer)


def test_explain_says_why_anonymous_and_inactive_users_see_nothing(make_user):
    inactive = make_user("gone", is_active=False)

    assert {why for _, why in explain(AnonymousUser(), registry)} == {("not authenticated",)}
    assert {why for _, why in explain(inactive, registry)} == {("inactive user",)}


def test_revoking_a_permission_takes_effect_after_forget_access(make_user):
    viewer = make_user("viewer", "testapp.view_order")
    assert "list_orders" in operations(viewer)

    viewer.user_permissions.remove(
        Permission.objects.get(content_type__app_label="testapp", codename="view_order")
    )
    forget_access(viewer)

    assert "list_orders" not in operations(viewer)
    # no tool of orders left: the refused tool is answered as a missing one, audited as denied
    assert dispatch("list_orders", user=viewer).code == "unknown_operation"
    assert AuditEntry.objects.get().decision == "denied"


def test_revoking_an_object_permission_takes_effect_on_a_refetched_user(make_user):
    order = Order.objects.create(reference="R-1")
    olga = make_user("olga")
    assign_perm("testapp.approve_order", olga, order)
    assert "approve_order" in operations(refetch(olga))

    remove_perm("testapp.approve_order", olga, order)
    olga = refetch(olga)

    assert "approve_order" not in operations(olga)
    assert dispatch("approve_order", {"order_id": order.pk}, user=olga).code == "unknown_operation"
    assert AuditEntry.objects.get().decision == "denied"


def test_dispatch_refuses_every_tool_the_catalog_hides(reader):
    order = Order.objects.create(reference="H-1")
    valid_entities = {
        "approve_order": {"order_id": order.pk},
        "cancel_order": {"order_id": order.pk},
        "merge_orders": {"keep": 1, "remove": 2},
        "store_secret": {"label": "x", "secret": "y"},
        "rotate_secret": {"label": "x", "secret": "y"},
        "probe_state": {},
        "broken_tool": {},
        "outage_status": {},
        "sluggish_tool": {},
        "overrun": {},
        "overrun_sync": {},
        "list_tables": {},
        "describe_table": {"table": "auth_user"},
        "run_readonly_query": {"sql": "SELECT 1"},
        "start_job": {},
        "run_llm_validation": {"target": "testapp.Order"},
        "record_call": {},
    }
    hidden = {tool.operation for tool in registry} - operations(reader)
    assert hidden == set(valid_entities)

    for operation, entities in valid_entities.items():
        outcome = dispatch(operation, entities, user=reader)
        # refused as denied where the reader works with the domain (orders), else as missing
        if operation in ("approve_order", "cancel_order", "merge_orders"):
            assert (outcome.decision, outcome.code) == ("denied", "permission_denied"), operation
        else:
            assert (outcome.decision, outcome.code) == ("unknown", "unknown_operation"), operation
    assert set(AuditEntry.objects.values_list("decision", flat=True)) == {"denied"}
    assert not PendingAction.objects.exists()
    assert Order.objects.get(pk=order.pk).status == "open"


# -- how a user's permissions are read --------------------------------------------------------


class EveryoneMayViewOrders:
    """An authentication backend of the project's own: Django asks it too."""

    def authenticate(self, request, **credentials):
        return None

    def get_all_permissions(self, user_obj, obj=None):
        return {"testapp.view_order"} if obj is None and user_obj.is_active else set()

    def has_perm(self, user_obj, perm, obj=None):
        return perm in self.get_all_permissions(user_obj, obj)


def a_fresh(user):
    return get_user_model().objects.get(pk=user.pk)


def test_a_users_own_group_and_object_permissions_are_read_as_django_and_guardian_read_them(
    make_user, django_assert_num_queries
):
    olga = make_user("olga", "testapp.view_order")
    group = Group.objects.create(name="approvers")
    group.permissions.add(perm("testapp.change_order"))
    olga.groups.add(group)
    orders = [Order.objects.create(reference=f"ORD-{n}") for n in range(3)]
    for order in orders:  # (guardian keeps a row an object: the set has each permission once)
        assign_perm("testapp.approve_order", olga, order)
        assign_perm("testapp.delete_order", group, order)
    user = a_fresh(olga)

    with django_assert_num_queries(1):
        access = access_for(user)
        assert access.object_perms() == {"testapp.approve_order", "testapp.delete_order"}
        assert user.has_perm("testapp.change_order")  # (Django's own caches: no query)
        assert user.get_group_permissions() == {"testapp.change_order"}

    assert access.perms == {"testapp.view_order", "testapp.change_order"}
    assert access.perms == a_fresh(olga).get_all_permissions()
    assert "approve_order" in operations(a_fresh(olga))


def test_a_projects_own_authentication_backend_is_asked_for_permissions_too(plain_user, settings):
    settings.AUTHENTICATION_BACKENDS = [
        "django.contrib.auth.backends.ModelBackend",
        "guardian.backends.ObjectPermissionBackend",
        "tests.access.test_permissions.EveryoneMayViewOrders",
    ]

    access = access_for(a_fresh(plain_user))

    assert access.perms == {"testapp.view_order"}
    assert "list_orders" in operations(a_fresh(plain_user))


def test_a_user_model_that_answers_for_its_permissions_itself_is_asked(make_user, monkeypatch):
    olga = make_user("olga", "testapp.view_order", "testapp.change_order")
    model = type(olga)
    asked = model.get_all_permissions

    def but_suspended(self, obj=None):  # (a project's own user model, say)
        return asked(self, obj) - {"testapp.view_order"}

    monkeypatch.setattr(model, "get_all_permissions", but_suspended)

    access = access_for(a_fresh(olga))

    assert access.perms == {"testapp.change_order"}
    assert "list_orders" not in operations(a_fresh(olga))
