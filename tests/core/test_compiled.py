"""Queries about one row compiled once per process: every row gets its own answer, not another's."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db.models.sql.compiler import SQLCompiler
from django.utils import timezone
from django.utils.functional import SimpleLazyObject
from guardian.shortcuts import assign_perm

from assistant.access.caches import _reload_flags, access_for, reread_access
from assistant.core import compiled
from assistant.core.compiled import rows_for
from assistant.dispatch.confirmation import waiting_actions
from assistant.dispatch.door import dispatch
from assistant.models import Conversation, Message, PendingAction
from tests.conftest import perm
from tests.testapp.models import Order

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _nothing_compiled_yet():
    compiled._compiled.clear()
    yield
    compiled._compiled.clear()


def fresh(user):
    return get_user_model().objects.get(pk=user.pk)


def test_each_user_reads_their_own_permissions_from_the_one_compiled_query(make_user):
    olga = make_user("olga", "testapp.view_order")
    group = Group.objects.create(name="approvers")
    group.permissions.add(perm("testapp.change_order"))
    ivan = make_user("ivan")
    ivan.groups.add(group)
    order = Order.objects.create(reference="ORD-1")
    assign_perm("testapp.approve_order", ivan, order)
    users = [olga, ivan, make_user("nobody")]

    read = [access_for(fresh(user)) for user in users]

    assert [access.perms for access in read] == [
        {"testapp.view_order"},
        {"testapp.change_order"},
        set(),
    ]
    assert [access.object_perms() for access in read] == [set(), {"testapp.approve_order"}, set()]
    for user, access in zip(users, read, strict=True):
        assert access.perms == fresh(user).get_all_permissions()


def test_a_second_user_is_read_without_building_the_query_again(make_user, monkeypatch):
    access_for(fresh(make_user("first", "testapp.view_order")))
    second = fresh(make_user("second", "testapp.change_order"))
    compiles = []
    as_sql = SQLCompiler.as_sql

    def counted(self, *args, **kwargs):
        compiles.append(self.query.model)
        return as_sql(self, *args, **kwargs)

    monkeypatch.setattr(SQLCompiler, "as_sql", counted)

    assert access_for(second).perms == {"testapp.change_order"}
    assert compiles == []


def test_a_key_equal_to_a_constant_of_the_query_is_not_confused_with_it():
    """The permission query tags its parts 0, 1 and 2: users 1, 2 and 3 still get their own."""
    User = get_user_model()
    group = Group.objects.create(name="approvers")
    group.permissions.add(perm("testapp.change_order"))
    order = Order.objects.create(reference="ORD-1")
    for pk in (1, 2, 3):
        User.objects.filter(pk=pk).delete()
        user = User.objects.create_user(pk=pk, username=f"user-{pk}")
        user.user_permissions.add(perm("testapp.view_order"))
        user.groups.add(group)
        assign_perm("testapp.approve_order", user, order)

        access = access_for(fresh(user))

        assert access.perms == {"testapp.view_order", "testapp.change_order"}
        assert access.object_perms() == {"testapp.approve_order"}


def test_a_flag_changed_behind_the_user_objects_back_is_read(make_user):
    user = make_user("olga")
    get_user_model().objects.filter(pk=user.pk).update(is_active=False, is_staff=True)

    _reload_flags(user)

    assert (user.is_active, user.is_staff, user.is_superuser) == (False, True, False)


def test_a_deleted_user_reads_as_inactive(make_user):
    user = make_user("olga", is_staff=True)
    get_user_model().objects.filter(pk=user.pk).delete()

    _reload_flags(user)

    assert (user.is_active, user.is_staff) == (False, False)


def test_rows_with_a_uuid_key_are_their_own(make_user):
    user = make_user("olga")
    ours, theirs = (Conversation.objects.create(user=user, title=t) for t in ("ours", "theirs"))
    Message.objects.create(conversation=ours, role="user", text="hello")
    Message.objects.create(conversation=theirs, role="user", text="bye")

    def texts(conversation):
        return Message.objects.filter(conversation=conversation).values_list("text")

    assert rows_for("test.texts", ours, texts) == [("hello",)]
    assert rows_for("test.texts", theirs, texts) == [("bye",)]
    assert compiled._compiled[("test.texts", Conversation, "default")] is not None


def test_a_query_that_does_not_take_the_key_as_a_parameter_is_built_every_time(make_user):
    user = make_user("olga")

    def by_name(row):  # (the key is not in this query at all)
        return get_user_model().objects.filter(username=row.username).values_list("pk")

    assert rows_for("test.by_name", user, by_name) == [(user.pk,)]
    assert compiled._compiled[("test.by_name", get_user_model(), "default")] is None


def test_a_changed_setting_compiles_again(make_user, settings):
    access_for(fresh(make_user("olga")))
    assert compiled._compiled

    settings.GUARDIAN_RAISE_403 = False  # (any setting: what a query depends on may have changed)

    assert not compiled._compiled


def test_a_lazy_user_object_is_read_as_the_user_it_stands_for(make_user):
    olga = make_user("olga", "testapp.view_order")
    access_for(fresh(make_user("first")))  # (compiled for the user model already)

    access = access_for(SimpleLazyObject(lambda: fresh(olga)))

    assert access.perms == {"testapp.view_order"}


def test_a_query_holding_the_key_written_otherwise_is_built_every_time(make_user):
    user = make_user("olga")

    def by_name_too(row):  # (the key as text too: a second parameter that changes with it)
        return (
            get_user_model()
            .objects.filter(pk=row.pk, username__in=[str(row.pk), "olga"])
            .values_list("username")
        )

    assert rows_for("test.by_name_too", user, by_name_too) == [("olga",)]
    assert compiled._compiled[("test.by_name_too", get_user_model(), "default")] is None


def test_a_query_holding_the_clock_is_built_every_time(make_user):
    user = make_user("olga")

    def joined_by_now(row):
        return (
            get_user_model()
            .objects.filter(pk=row.pk, date_joined__lte=timezone.now())
            .values_list("username")
        )

    assert rows_for("test.joined", user, joined_by_now) == [("olga",)]
    assert rows_for("test.joined", user, joined_by_now) == [("olga",)]
    assert compiled._compiled[("test.joined", get_user_model(), "default")] is None


def test_values_are_converted_as_the_orm_converts_them(make_user):
    conversation = Conversation.objects.create(user=make_user("olga"), title="t")
    message = Message.objects.create(conversation=conversation, role="user", tool_calls=[{"a": 1}])

    def read(row):
        return Message.objects.filter(conversation=row).values_list(
            "tool_calls", "id", "created_at"
        )

    expected = list(read(conversation))

    assert rows_for("test.read", conversation, read) == expected  # (compiling)
    assert rows_for("test.read", conversation, read) == expected  # (compiled)
    assert expected == [([{"a": 1}], message.pk, message.created_at)]
    assert compiled._compiled[("test.read", Conversation, "default")] is not None


def test_a_first_turns_queries_are_compiled(make_user):
    user = fresh(make_user("olga"))
    reread_access(user)

    access_for(user)
    waiting_actions(user, None)

    User = get_user_model()
    for name in ("assistant.permissions", "assistant.flags", "assistant.may_concern"):
        assert compiled._compiled[(name, User, "default")] is not None, name


@pytest.mark.django_db(transaction=True)
def test_an_approval_is_asked_about_until_a_few_minutes_after_it_ran_out(make_user):
    from tests.testapp.models import Order

    clerk = make_user("clerk", "testapp.view_order", "testapp.change_order")
    order = Order.objects.create(reference="ORD-1")
    action = dispatch("cancel_order", {"order_id": order.pk}, user=clerk).pending_action
    may_concern = PendingAction.objects.may_concern

    assert may_concern(clerk).exists()
    PendingAction.objects.filter(pk=action.pk).update(
        expires_at=timezone.now() - timedelta(minutes=1)
    )
    assert may_concern(clerk).exists()  # (generous: nothing is hidden from a clock ahead)
    assert waiting_actions(clerk, None) == ([], {})  # (the inbox's own query is exact)
    PendingAction.objects.filter(pk=action.pk).update(
        expires_at=timezone.now() - timedelta(minutes=6)
    )
    assert not may_concern(clerk).exists()


@pytest.mark.django_db(transaction=True)
def test_without_time_zones_an_approval_is_asked_about_by_the_servers_clock(make_user, settings):
    """Stored times are then local: a database clock in UTC would miss those west of it."""
    from tests.testapp.models import Order

    settings.USE_TZ, settings.TIME_ZONE = False, "America/New_York"
    clerk = make_user("clerk", "testapp.view_order", "testapp.change_order")
    order = Order.objects.create(reference="ORD-1")
    action = dispatch("cancel_order", {"order_id": order.pk}, user=clerk).pending_action

    assert PendingAction.objects.may_concern(clerk).exists()
    assert waiting_actions(clerk, None)[1] == {"": 1}
    PendingAction.objects.filter(pk=action.pk).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert not PendingAction.objects.may_concern(clerk).exists()
