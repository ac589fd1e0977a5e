"""An open chat follows permission changes: the next turn on the same socket sees them.

A websocket keeps its user's access snapshot between turns; a change made through the ORM
(users, groups, permissions, guardian's object permissions) makes every snapshot stale, and a
change that bypasses the ORM's signals is seen once the snapshot is older than
``ASSISTANT["ACCESS_MAX_AGE"]``.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connection, connections
from django.test import Client
from guardian.shortcuts import assign_perm, remove_perm

from assistant.access import permissions
from assistant.access.permissions import (
    access_changed,
    access_for,
    can_use_tool,
    refresh_access,
    reread_access,
)
from assistant.core.registry import registry
from assistant.models import AuditEntry, PendingAction
from tests import sockets
from tests.conftest import perm
from tests.sockets import WAIT, Socket, only, receive_run, send
from tests.testapp.models import Order

User = get_user_model()


async def ask(socket: Socket, text: str, conversation: str | None = None) -> list[dict[str, Any]]:
    """Send one message (to a conversation, or a new one); the whole run it starts."""
    frame: dict[str, Any] = {"type": "message", "text": text}
    if conversation is not None:
        frame["conversation"] = conversation
    await send(socket, **frame)
    return await receive_run(socket)


def calls(frames: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The tools a run used, each with what was decided."""
    return [
        (frame["value"]["operation"], frame["value"]["decision"])
        for frame in frames
        if frame["type"] == "CUSTOM" and frame["name"] == "assistant.outcome"
    ]


def reply(frames: list[dict[str, Any]]) -> str:
    """The assistant's answer, as the chat shows it."""
    message_id = only(frames, "TEXT_MESSAGE_START assistant")["messageId"]
    return "".join(
        frame["delta"]
        for frame in frames
        if frame["type"] == "TEXT_MESSAGE_CONTENT" and frame["messageId"] == message_id
    )


def thread(frames: list[dict[str, Any]]) -> str:
    return frames[0]["threadId"]


def fetch(user: Any) -> Any:
    """The same user loaded again, as the admin or a shell would: not the socket's object."""
    return User.objects.get(pk=user.pk)


def change_flags(user: Any, **flags: Any) -> None:
    """Edit the user and save it, as the admin's change form does."""
    other = fetch(user)
    for name, value in flags.items():
        setattr(other, name, value)
    other.save()


# -- revoking --------------------------------------------------------------------------------

VIEW = "testapp.view_order"
DESK = "order-desk"


def desk() -> Group:
    return Group.objects.get(name=DESK)


# How the user holds testapp.view_order ("directly" or through the group), and how it goes.
REVOCATIONS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "removed from the user": (
        "directly",
        lambda user: fetch(user).user_permissions.remove(perm(VIEW)),
    ),
    "the user's permissions cleared": (
        "directly",
        lambda user: fetch(user).user_permissions.clear(),
    ),
    "the user left the group": ("group", lambda user: fetch(user).groups.remove(desk())),
    "the group dropped the user": ("group", lambda user: desk().user_set.remove(user.pk)),
    "removed from the group": ("group", lambda user: desk().permissions.remove(perm(VIEW))),
    "the group deleted": ("group", lambda user: desk().delete()),
    "the permission deleted": ("directly", lambda user: perm(VIEW).delete()),
}


@pytest.mark.parametrize("how", list(REVOCATIONS))
@pytest.mark.django_db(transaction=True)
async def test_a_permission_revoked_while_the_chat_is_open_is_gone_on_the_next_turn(
    open_socket, make_user, how
):
    holds, revoke = REVOCATIONS[how]
    await Order.objects.acreate(reference="ORD-1")
    group = await Group.objects.acreate(name=DESK)
    await sync_to_async(group.permissions.add)(await sync_to_async(perm)(VIEW))
    viewer = await sync_to_async(make_user)(
        "viewer",
        *([VIEW] if holds == "directly" else []),
        groups=(DESK,) if holds == "group" else (),
    )
    socket = await open_socket(viewer)
    first = await ask(socket, "list orders")
    assert calls(first) == [("list_orders", "executed")]
    assert reply(first) == "ORD-1"

    await sync_to_async(revoke)(viewer)
    second = await ask(socket, "list orders", thread(first))

    assert calls(second) == [("show_capabilities", "executed")]
    assert "list_orders" not in reply(second)
    assert "ORD-1" not in reply(second)
    assert await AuditEntry.objects.filter(operation="list_orders").acount() == 1


@pytest.mark.django_db(transaction=True)
async def test_a_superuser_demoted_while_the_chat_is_open_loses_what_only_that_gave(
    open_socket, superuser
):
    await Order.objects.acreate(reference="ORD-1")
    socket = await open_socket(superuser)
    first = await ask(socket, "list orders")
    assert calls(first) == [("list_orders", "executed")]

    await sync_to_async(change_flags)(superuser, is_superuser=False)
    second = await ask(socket, "list orders", thread(first))

    assert calls(second) == [("show_capabilities", "executed")]
    assert "list_orders" not in reply(second)


@pytest.mark.django_db(transaction=True)
async def test_a_user_deactivated_while_the_chat_is_open_is_refused_every_tool_on_the_next_turn(
    open_socket, reader
):
    socket = await open_socket(reader)
    first = await ask(socket, "list orders")
    assert calls(first) == [("list_orders", "executed")]

    await sync_to_async(change_flags)(reader, is_active=False)
    refused = await ask(socket, "list orders", thread(first))
    public = await ask(socket, "ping", thread(first))

    assert calls(refused) == [("show_capabilities", "denied")]
    assert calls(public) == [("show_capabilities", "denied")]
    assert "pong" not in reply(public)

    await sync_to_async(change_flags)(reader, is_active=True)
    again = await ask(socket, "list orders", thread(first))

    assert calls(again) == [("list_orders", "executed")]


@pytest.mark.django_db(transaction=True)
async def test_an_object_permission_removed_with_guardian_hides_the_tool_on_the_next_turn(
    open_socket, make_user
):
    order = await Order.objects.acreate(reference="ORD-1")
    olga = await sync_to_async(make_user)("olga")
    await sync_to_async(lambda: assign_perm("testapp.approve_order", fetch(olga), order))()
    socket = await open_socket(olga)
    first = await ask(socket, f"approve order {order.pk}")
    assert calls(first) == [("approve_order", "confirmation_requested")]

    await sync_to_async(lambda: remove_perm("testapp.approve_order", fetch(olga), order))()
    second = await ask(socket, f"approve order {order.pk}", thread(first))

    assert calls(second) == [("show_capabilities", "executed")]
    assert "approve_order" not in reply(second)


@pytest.mark.django_db(transaction=True)
async def test_a_pending_approval_confirmed_after_the_user_was_deactivated_is_refused(
    open_socket, clerk
):
    order = await Order.objects.acreate(reference="ORD-1")
    socket = await open_socket(clerk)
    asked = await ask(socket, f"approve order {order.pk}")
    (interrupt,) = asked[-1]["outcome"]["interrupts"]

    await sync_to_async(change_flags)(clerk, is_active=False)
    await send(socket, type="confirm", action=interrupt["id"])
    answered = await receive_run(socket)

    assert calls(answered) == [("approve_order", "denied")]
    assert (await Order.objects.aget()).approvals == 0


@pytest.mark.django_db(transaction=True)
async def test_a_pending_approval_refused_after_the_user_was_deactivated_is_refused_too(
    open_socket, clerk
):
    order = await Order.objects.acreate(reference="ORD-1")
    socket = await open_socket(clerk)
    asked = await ask(socket, f"approve order {order.pk}")
    (interrupt,) = asked[-1]["outcome"]["interrupts"]

    await sync_to_async(change_flags)(clerk, is_active=False)
    await send(socket, type="reject", action=interrupt["id"])
    answered = await receive_run(socket)

    assert calls(answered) == [("approve_order", "denied")]
    assert (await PendingAction.objects.aget()).status == "pending"


# -- granting --------------------------------------------------------------------------------

GRANTS: dict[str, Callable[[Any], Any]] = {
    "given to the user": lambda user: fetch(user).user_permissions.add(perm(VIEW)),
    "the user joined a group that has it": lambda user: fetch(user).groups.add(desk()),
    "the group took the user in": lambda user: desk().user_set.add(user.pk),
}


@pytest.mark.parametrize("how", list(GRANTS))
@pytest.mark.django_db(transaction=True)
async def test_a_permission_granted_while_the_chat_is_open_is_usable_on_the_next_turn(
    open_socket, plain_user, how
):
    await Order.objects.acreate(reference="ORD-1")
    group = await Group.objects.acreate(name=DESK)
    await sync_to_async(group.permissions.add)(await sync_to_async(perm)(VIEW))
    socket = await open_socket(plain_user)
    first = await ask(socket, "list orders")
    assert calls(first) == [("show_capabilities", "executed")]

    await sync_to_async(GRANTS[how])(plain_user)
    second = await ask(socket, "list orders", thread(first))

    assert calls(second) == [("list_orders", "executed")]
    assert reply(second) == "ORD-1"


@pytest.mark.django_db(transaction=True)
async def test_a_permission_given_to_the_users_group_is_usable_on_the_next_turn(
    open_socket, make_user
):
    await Order.objects.acreate(reference="ORD-1")
    member = await sync_to_async(make_user)("member", groups=(DESK,))
    socket = await open_socket(member)
    first = await ask(socket, "list orders")
    assert calls(first) == [("show_capabilities", "executed")]

    await sync_to_async(lambda: desk().permissions.add(perm(VIEW)))()
    second = await ask(socket, "list orders", thread(first))

    assert calls(second) == [("list_orders", "executed")]


@pytest.mark.django_db(transaction=True)
async def test_an_object_permission_assigned_with_guardian_is_usable_on_the_next_turn(
    open_socket, make_user
):
    order = await Order.objects.acreate(reference="ORD-1")
    olga = await sync_to_async(make_user)("olga")
    socket = await open_socket(olga)
    first = await ask(socket, f"approve order {order.pk}")
    assert calls(first) == [("show_capabilities", "executed")]

    await sync_to_async(lambda: assign_perm("testapp.approve_order", fetch(olga), order))()
    second = await ask(socket, f"approve order {order.pk}", thread(first))

    assert calls(second) == [("approve_order", "confirmation_requested")]


@pytest.mark.django_db(transaction=True)
async def test_a_bulk_guardian_grant_sends_no_signal_so_it_is_seen_once_the_snapshot_ages_out(
    settings, open_socket, make_user
):
    # guardian's assign_perm on a queryset uses bulk_create, which sends no post_save (README:
    # like queryset.update(), it is seen within ACCESS_MAX_AGE); here the limit is 0.
    settings.ASSISTANT = {**settings.ASSISTANT, "ACCESS_MAX_AGE": 0}
    first_order = await Order.objects.acreate(reference="ORD-1")
    await Order.objects.acreate(reference="ORD-2")
    olga = await sync_to_async(make_user)("olga")
    socket = await open_socket(olga)
    first = await ask(socket, f"approve order {first_order.pk}")
    assert calls(first) == [("show_capabilities", "executed")]

    await sync_to_async(
        lambda: assign_perm("testapp.approve_order", fetch(olga), Order.objects.all())
    )()
    second = await ask(socket, f"approve order {first_order.pk}", thread(first))

    assert calls(second) == [("approve_order", "confirmation_requested")]


# -- what bypasses the ORM's signals -------------------------------------------------------------

# Changes that send no model signal, and what the user's next turn gets once they are seen.
BYPASSES: dict[str, tuple[Callable[[Any], Any], tuple[str, str]]] = {
    "the user deactivated with queryset.update()": (
        lambda user: User.objects.filter(pk=user.pk).update(is_active=False),
        ("show_capabilities", "denied"),
    ),
    "the permission swapped in the through table": (
        lambda user: User.user_permissions.through.objects.filter(
            user_id=user.pk, permission=perm(VIEW)
        ).update(permission=perm("testapp.add_order")),
        ("list_orders", "denied"),  # still in the orders domain: told what list_orders needs
    ),
}


@pytest.mark.parametrize("how", list(BYPASSES))
@pytest.mark.django_db(transaction=True)
async def test_a_change_that_sends_no_signal_is_not_seen_while_the_snapshot_is_fresh(
    open_socket, reader, how
):
    bypass, _ = BYPASSES[how]
    socket = await open_socket(reader)
    first = await ask(socket, "list orders")
    assert calls(first) == [("list_orders", "executed")]

    await sync_to_async(bypass)(reader)
    second = await ask(socket, "list orders", thread(first))

    assert calls(second) == [("list_orders", "executed")]


@pytest.mark.parametrize("how", list(BYPASSES))
@pytest.mark.django_db(transaction=True)
async def test_with_access_max_age_0_every_turn_sees_even_a_change_that_sends_no_signal(
    settings, open_socket, reader, how
):
    settings.ASSISTANT = {**settings.ASSISTANT, "ACCESS_MAX_AGE": 0}
    bypass, seen = BYPASSES[how]
    socket = await open_socket(reader)
    first = await ask(socket, "list orders")
    assert calls(first) == [("list_orders", "executed")]

    await sync_to_async(bypass)(reader)
    second = await ask(socket, "list orders", thread(first))

    assert calls(second) == [seen]


# -- the snapshot itself ---------------------------------------------------------------------
# Not transactional: the test's changes are committed only where it runs their on_commit hooks.


def as_an_open_chat(user: Any) -> Any:
    """What a socket does with its user: read it again at the first turn, then keep it."""
    reread_access(user)
    return access_for(user)


@pytest.mark.django_db
def test_an_unchanged_snapshot_is_reused_by_the_next_turn_without_a_query(
    reader, django_assert_num_queries
):
    as_an_open_chat(reader)

    with django_assert_num_queries(0):
        refresh_access(reader)
        access = access_for(reader)

    assert VIEW in access.perms


@pytest.mark.django_db
def test_after_permissions_changed_the_next_turn_reads_the_database_again(reader):
    as_an_open_chat(reader)
    User.user_permissions.through.objects.filter(user_id=reader.pk).delete()  # no signal
    refresh_access(reader)
    assert VIEW in access_for(reader).perms

    access_changed()  # (this process only: what news from another one does)
    refresh_access(reader)

    assert access_for(reader).perms == frozenset()
    assert not can_use_tool(reader, registry.get("list_orders"))


def log_in(user: Any) -> None:
    """A login elsewhere (another tab, another device): Django stamps ``last_login``."""
    assert Client().login(username=user.get_username(), password="pw")


def stamp_last_login(user: Any) -> None:
    from django.utils import timezone

    other = fetch(user)
    other.last_login = timezone.now()
    other.save(update_fields=["last_login"])


@pytest.mark.parametrize("save", [log_in, stamp_last_login], ids=["login", "update_fields"])
@pytest.mark.django_db
def test_stamping_last_login_leaves_open_chats_snapshots_fresh(
    reader, django_assert_num_queries, django_capture_on_commit_callbacks, save
):
    as_an_open_chat(reader)
    with django_capture_on_commit_callbacks(execute=True):
        save(reader)

    with django_assert_num_queries(0):
        refresh_access(reader)
        access_for(reader)


@pytest.mark.parametrize("update_fields", [None, ["is_active"], ["last_login", "is_active"]])
@pytest.mark.django_db
def test_saving_the_active_flag_makes_open_chats_read_the_user_again(
    reader, django_capture_on_commit_callbacks, update_fields
):
    as_an_open_chat(reader)
    assert can_use_tool(reader, registry.get("list_orders"))
    other = fetch(reader)
    other.is_active = False
    with django_capture_on_commit_callbacks(execute=True):
        other.save(update_fields=update_fields)

    refresh_access(reader)

    assert not access_for(reader).active
    assert not can_use_tool(reader, registry.get("list_orders"))
    assert not can_use_tool(reader, registry.get("ping"))


@pytest.mark.django_db
def test_saving_the_superuser_flag_makes_open_chats_read_the_user_again(
    plain_user, django_capture_on_commit_callbacks
):
    as_an_open_chat(plain_user)
    assert not can_use_tool(plain_user, registry.get("list_orders"))
    with django_capture_on_commit_callbacks(execute=True):
        change_flags(plain_user, is_superuser=True)

    refresh_access(plain_user)

    assert access_for(plain_user).superuser
    assert can_use_tool(plain_user, registry.get("list_orders"))


@pytest.mark.django_db
def test_a_user_deleted_while_their_chat_is_open_counts_as_inactive(
    reader, django_capture_on_commit_callbacks
):
    as_an_open_chat(reader)
    assert can_use_tool(reader, registry.get("ping"))
    with django_capture_on_commit_callbacks(execute=True):
        fetch(reader).delete()

    refresh_access(reader)

    assert not access_for(reader).active
    assert not can_use_tool(reader, registry.get("ping"))
    assert not can_use_tool(reader, registry.get("list_orders"))


# -- two turns of one socket at once ---------------------------------------------------------


@contextlib.contextmanager
def table_locked(table: str) -> Iterator[None]:
    """Hold an exclusive lock on a table from a connection of its own: queries on it wait."""
    import psycopg

    db = connection.settings_dict
    locker = psycopg.connect(
        host=db["HOST"],
        port=db["PORT"] or 5432,
        user=db["USER"],
        password=db["PASSWORD"] or None,
        dbname=db["NAME"],
    )
    try:
        locker.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
        yield
    finally:
        locker.rollback()
        locker.close()


def queries_waiting_for_a_lock(count: int, within: float = WAIT) -> bool:
    """Whether ``count`` queries on the test database wait for a lock (waiting ``within`` s)."""
    deadline = time.monotonic() + within
    with connection.cursor() as cursor:
        while time.monotonic() < deadline:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            if cursor.fetchone()[0] >= count:
                return True
            time.sleep(0.01)
    return False


def in_a_lane(work: Callable[[], Any]) -> threading.Thread:
    """Run ``work`` in a thread of its own, as a turn runs in a lane (its own connection)."""

    def run() -> None:
        try:
            work()
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_turns_reading_a_stale_snapshot_at_once_cannot_keep_a_deactivated_user_active(
    reader,
):
    as_an_open_chat(reader)
    change_flags(reader, is_active=False)
    refresh_access(reader)  # both turns on the socket start: the snapshot is stale

    # Two slow queries, made slow on purpose: the first turn reads the user's flags again; the
    # second turn, in the meantime, reads the user's permissions (or, waiting for the first
    # turn, nothing).
    seen: dict[str, Any] = {}
    with table_locked("auth_permission"):
        with table_locked("auth_user"):
            first = in_a_lane(lambda: seen.setdefault("first", access_for(reader)))
            assert queries_waiting_for_a_lock(1)
            second = in_a_lane(lambda: seen.setdefault("second", access_for(reader)))
            queries_waiting_for_a_lock(2, within=1)
        first.join(WAIT)
    second.join(WAIT)

    assert not seen["first"].active
    assert not seen["second"].active
    refresh_access(reader)  # the next turn
    assert not access_for(reader).active


@pytest.mark.django_db(transaction=True)
async def test_a_message_from_a_user_deleted_while_the_chat_is_open_gets_an_error_and_stores_nothing(
    open_socket, reader
):
    from assistant.models import Message

    socket = await open_socket(reader)
    first = await ask(socket, "list orders")
    assert calls(first) == [("list_orders", "executed")]

    await sync_to_async(lambda: fetch(reader).delete())()  # their conversations go with them
    await send(socket, type="message", text="list orders", conversation=thread(first))
    error = await sockets.receive(socket)

    assert (error["type"], error["name"]) == ("CUSTOM", "assistant.error")
    assert error["value"]["code"] == "not_found"  # (the conversation went with its user)
    assert await Message.objects.acount() == 0


# -- flags changed without a signal, and the staff flag ----------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_a_pending_approval_confirmed_after_a_deactivation_that_sent_no_signal_is_refused(
    open_socket, clerk
):
    # queryset.update() sends no signal, and the snapshot is fresh: a confirm reads the user's
    # flags and permissions again anyway, at the moment the action would run.
    order = await Order.objects.acreate(reference="ORD-1")
    socket = await open_socket(clerk)
    asked = await ask(socket, f"approve order {order.pk}")
    (interrupt,) = asked[-1]["outcome"]["interrupts"]

    await User.objects.filter(pk=clerk.pk).aupdate(is_active=False)
    await send(socket, type="confirm", action=interrupt["id"])
    answered = await receive_run(socket)

    assert calls(answered) == [("approve_order", "denied")]
    assert (await Order.objects.aget()).approvals == 0
    assert [
        decision
        async for decision in AuditEntry.objects.filter(operation="approve_order")
        .order_by("pk")
        .values_list("decision", flat=True)
    ] == ["confirmation_requested", "denied"]


def demote(user: Any) -> None:
    """Take the staff flag away, saving only that field."""
    other = fetch(user)
    other.is_staff = False
    other.save(update_fields=["is_staff"])


@pytest.mark.django_db
def test_saving_the_staff_flag_makes_open_chats_read_the_user_again(
    make_user, django_capture_on_commit_callbacks
):
    operator = make_user("operator", "assistant.view_job", is_staff=True)
    as_an_open_chat(operator)
    with django_capture_on_commit_callbacks(execute=True):
        demote(operator)

    refresh_access(operator)
    access_for(operator)

    assert operator.is_staff is False


@pytest.mark.django_db(transaction=True)
async def test_staff_demoted_while_the_chat_is_open_no_longer_see_other_users_jobs(
    open_socket, make_user, plain_user
):
    from assistant.models import Job

    job = await Job.objects.acreate(operation="start_job", function="f.g", user=plain_user)
    operator = await sync_to_async(make_user)("operator", "assistant.view_job", is_staff=True)
    socket = await open_socket(operator)
    first = await ask(socket, f"status of task task_id={job.pk}")
    assert calls(first) == [("get_task_status", "executed")]
    assert reply(first) == "Start job is queued."

    await sync_to_async(demote)(operator)
    second = await ask(socket, f"status of task task_id={job.pk}", thread(first))

    assert calls(second) == [("get_task_status", "executed")]
    assert reply(second) == f"No job {job.pk} of yours."


@pytest.mark.django_db(transaction=True)
async def test_staff_demoted_while_the_chat_is_open_can_no_longer_cancel_other_users_jobs(
    open_socket, make_user, plain_user
):
    from assistant.models import Job

    job = await Job.objects.acreate(operation="start_job", function="f.g", user=plain_user)
    operator = await sync_to_async(make_user)(
        "operator", "assistant.view_job", "assistant.change_job", is_staff=True
    )
    socket = await open_socket(operator)
    first = await ask(socket, f"status of task task_id={job.pk}")
    assert reply(first) == "Start job is queued."  # the chat has read the user: they see it

    await sync_to_async(demote)(operator)
    await send(socket, type="cancel_job", job=str(job.pk))
    await send(socket, type="message", text="ping", conversation=thread(first))  # answered after
    error, *after = await receive_run(socket)

    assert (error["type"], error.get("name")) == ("CUSTOM", "assistant.error")
    assert error["value"]["code"] == "not_found"
    assert calls(after) == [("ping", "executed")]
    job = await Job.objects.aget(pk=job.pk)
    assert (job.status, job.cancel_requested) == ("queued", False)


# -- one user's readings, shared between their objects in a process ---------------------------


@pytest.fixture
def hearing_news() -> Iterator[None]:
    """What a process's control channel does once it listens: permission news reaches it."""
    permissions.hearing_news()
    yield
    permissions.hearing_news(False)


def a_new_socket(user: Any) -> Any:
    """A socket that connects: its user loaded again, read again at its first turn, where a
    fresh reading of the same user in this process may do."""
    other = fetch(user)
    reread_access(other, shared=True)
    return other


@pytest.mark.django_db
def test_a_users_second_socket_takes_the_first_sockets_fresh_reading_without_a_query(
    reader, hearing_news, django_assert_num_queries
):
    first = a_new_socket(reader)
    assert VIEW in access_for(first).perms
    second = a_new_socket(reader)

    with django_assert_num_queries(0):
        access = access_for(second)
        assert can_use_tool(second, registry.get("list_orders"))

    assert VIEW in access.perms
    assert access.user is second


@pytest.mark.django_db
def test_a_users_object_permissions_are_read_once_for_all_their_sockets(
    reader, hearing_news, django_assert_num_queries
):
    order = Order.objects.create(reference="ORD-1")
    assign_perm("testapp.change_order", reader, order)
    first = a_new_socket(reader)
    assert "testapp.change_order" in access_for(first).object_perms()
    second = a_new_socket(reader)

    with django_assert_num_queries(0):
        assert "testapp.change_order" in access_for(second).object_perms()


@pytest.mark.django_db
def test_a_socket_whose_user_was_deactivated_without_a_signal_reads_again_and_is_refused(
    reader, hearing_news
):
    assert access_for(a_new_socket(reader)).active
    User.objects.filter(pk=reader.pk).update(is_active=False)  # no signal: the reading stays

    second = a_new_socket(reader)  # (its user, loaded since, is inactive)

    assert not access_for(second).active
    assert not can_use_tool(second, registry.get("ping"))


@pytest.mark.django_db
def test_after_permissions_changed_a_new_socket_reads_the_database_again(
    reader, hearing_news, django_assert_max_num_queries
):
    access_for(a_new_socket(reader))
    User.user_permissions.through.objects.filter(user_id=reader.pk).delete()  # no signal
    access_changed()  # (what the change's signal, or news of it from another process, does)

    second = a_new_socket(reader)

    assert access_for(second).perms == frozenset()
    assert not can_use_tool(second, registry.get("list_orders"))


@pytest.mark.django_db
def test_a_reading_older_than_access_max_age_is_not_shared(settings, reader, hearing_news):
    access_for(a_new_socket(reader))
    User.user_permissions.through.objects.filter(user_id=reader.pk).delete()  # no signal
    settings.ASSISTANT = {**settings.ASSISTANT, "ACCESS_MAX_AGE": 0}

    assert access_for(a_new_socket(reader)).perms == frozenset()


@pytest.mark.django_db
def test_a_confirmation_reads_the_user_afresh_even_beside_a_shared_reading(reader, hearing_news):
    socket_user = a_new_socket(reader)
    access_for(socket_user)
    User.user_permissions.through.objects.filter(user_id=reader.pk).delete()  # no signal
    other = a_new_socket(reader)
    assert VIEW in access_for(other).perms  # (fresh, and shared: the change is not seen yet)

    reread_access(other)  # what a confirm does, at the moment the action would run

    assert access_for(other).perms == frozenset()


@pytest.mark.django_db
def test_readings_made_while_no_permission_news_reached_the_process_are_not_shared(
    reader, django_assert_num_queries
):
    permissions.hearing_news(False)  # (no control channel listens here)
    access_for(a_new_socket(reader))
    second = a_new_socket(reader)

    with django_assert_num_queries(2):  # the flags; the permissions (one query, objects' too)
        access_for(second)


@pytest.mark.django_db
def test_a_confirmations_reading_afresh_stays_afresh_when_the_turn_also_finds_it_stale(
    reader, hearing_news
):
    socket_user = a_new_socket(reader)
    access_for(socket_user)
    access_changed()  # the socket's reading is stale from now on
    access_for(a_new_socket(reader))  # another socket reads, and shares, a fresh one
    User.user_permissions.through.objects.filter(user_id=reader.pk).delete()  # no signal

    reread_access(socket_user)  # a confirm: as things are now
    refresh_access(socket_user)  # the turn's own look at its stale snapshot, meanwhile

    assert access_for(socket_user).perms == frozenset()
