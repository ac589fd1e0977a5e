"""Shared fixtures: users with known permissions, service requirements, connection hygiene."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import SyncToAsync
from django.contrib.auth.models import Group, Permission
from django.db import connection, connections

REQUIRE_SERVICES = os.environ.get("ASSISTANT_REQUIRE_SERVICES") == "1"


@pytest.fixture(autouse=True)
def _requires_postgres(request: pytest.FixtureRequest) -> None:
    """``@pytest.mark.postgres`` tests skip on SQLite, or fail when services are required."""
    if request.node.get_closest_marker("postgres") and connection.vendor != "postgresql":
        reason = "needs PostgreSQL (set DATABASE_URL=postgres://...)"
        if REQUIRE_SERVICES:
            pytest.fail(f"ASSISTANT_REQUIRE_SERVICES=1: {reason}")
        pytest.skip(reason)


@pytest.fixture(autouse=True)
def _close_executor_connections() -> Any:
    """Close connections opened in asgiref's executor thread (PostgreSQL teardown warnings)."""
    yield
    SyncToAsync.single_thread_executor.submit(connections.close_all).result()


def perm(label: str) -> Permission:
    app_label, codename = label.split(".")
    return Permission.objects.get(content_type__app_label=app_label, codename=codename)


@pytest.fixture
def make_user(django_user_model: Any) -> Callable[..., Any]:
    """A user with the given permissions (``"app.codename"``), groups and flags."""

    def make(
        username: str,
        *perms: str,
        groups: tuple[str, ...] = (),
        **flags: Any,
    ) -> Any:
        user = django_user_model.objects.create_user(username=username, password="pw", **flags)
        if perms:
            user.user_permissions.set([perm(label) for label in perms])
        for name in groups:
            user.groups.add(Group.objects.get_or_create(name=name)[0])
        return django_user_model.objects.get(pk=user.pk)

    return make


@pytest.fixture
def superuser(django_user_model: Any) -> Any:
    return django_user_model.objects.create_superuser("root", "root@example.com", "pw")


@pytest.fixture
def plain_user(make_user: Callable[..., Any]) -> Any:
    return make_user("plain")


@pytest.fixture
def reader(make_user: Callable[..., Any]) -> Any:
    """May read orders and reports."""
    return make_user("reader", "testapp.view_order", "assistant.reports_read")


@pytest.fixture
def clerk(make_user: Callable[..., Any]) -> Any:
    """May read, change and approve orders globally."""
    return make_user("clerk", "testapp.view_order", "testapp.change_order", "testapp.approve_order")
