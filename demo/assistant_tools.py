"""The example project's own tools: user administration, declared once each."""

from __future__ import annotations

from typing import Annotated, Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Q

from assistant import (
    Length,
    Prepared,
    Range,
    ToolCall,
    ToolResult,
    assistant_tool,
    register_toolset,
)
from assistant.exceptions import InvalidEntities, PermissionDenied
from assistant.toolsets.sql import SQLInspector

from .jobs import build_user_report
from .management.commands import demo_sql_role

User = get_user_model()


@assistant_tool(
    operation="whoami",
    domain="account",
    description="Tell who you are signed in as, and your groups",
    risk_level="safe",
    public=True,
    keywords=["who am i", "whoami", "my account"],
)
def whoami(call: ToolCall) -> ToolResult:
    user = call.user
    groups = ", ".join(user.groups.values_list("name", flat=True)) or "no groups"  # type: ignore[union-attr]
    role = "superuser" if user.is_superuser else ("staff" if user.is_staff else "user")  # type: ignore[union-attr]
    return ToolResult(text=f"You are {user.get_username()} ({role}; {groups}).")


@assistant_tool(
    operation="list_users",
    domain="users",
    description="List user accounts, optionally searching by username or e-mail",
    risk_level="safe",
    permission_checks=[("users", "READ")],
    keywords=["list users", "users", "find user"],
)
def list_users(
    call: ToolCall,
    search: Annotated[str | None, "part of a username or e-mail", Length(max=254)] = None,
    active_only: bool = True,
    page: Annotated[int, "page number, from 1", Range(1, 100_000)] = 1,
    page_size: Annotated[int, "users per page (1-100)", Range(1, 100)] = 20,
) -> ToolResult:
    # guardian's stand-in for anonymous visitors is not an account anyone manages
    anonymous = getattr(settings, "ANONYMOUS_USER_NAME", "AnonymousUser")
    users = User._default_manager.exclude(username=anonymous).order_by("username")
    if search:
        users = users.filter(Q(username__icontains=search) | Q(email__icontains=search))
    if active_only:
        users = users.filter(is_active=True)
    start = (page - 1) * page_size
    rows = list(
        users.values("id", "username", "email", "is_active", "is_staff")[start : start + page_size]
    )
    if not rows:
        return ToolResult(text="No users match.", data=[])
    lines = [
        f"#{row['id']} {row['username']}" + ("" if row["is_active"] else " (inactive)")
        for row in rows
    ]
    return ToolResult(text=f"{len(rows)} users:\n" + "\n".join(lines), data=rows)


def _refuse_taking_over_a_superuser(call: ToolCall, account: Any, what: str) -> None:
    """Only a superuser may lock out or take over a superuser: change_user is not enough."""
    if account.is_superuser and not call.user.is_superuser:  # type: ignore[union-attr]
        raise PermissionDenied(f"Only a superuser may {what} a superuser.")


def _may_deactivate(call: ToolCall) -> None:
    account = call.instance
    if account.pk == call.user.pk:
        raise InvalidEntities({"user_id": "you cannot deactivate your own account"})
    _refuse_taking_over_a_superuser(call, account, "deactivate")


def _prepare_deactivation(call: ToolCall, user_id: int, reason: str = "") -> Prepared:
    """Refused before asking when it would be refused anyway; else who, and what changes."""
    _may_deactivate(call)
    account = call.instance
    name = account.get_username()
    return Prepared(
        summary=f"Deactivate {name}: they will no longer be able to sign in"
        + (f" (reason: {reason})" if reason else ""),
        preview={"kind": "changes", "rows": [{"field": "active", "before": True, "after": False}]}
        if account.is_active
        else {"kind": "text", "text": f"{name} is already inactive."},
        confirm_phrase=name,
    )


def _prepare_password(call: ToolCall, user_id: int, new_password: str) -> Prepared:
    _refuse_taking_over_a_superuser(call, call.instance, "set the password of")
    return Prepared(summary=f"Set a new password for {call.instance.get_username()}")


@assistant_tool(
    operation="deactivate_user",
    domain="users",
    description="Deactivate a user account so it can no longer sign in",
    risk_level="dangerous",
    requires_confirmation=True,
    permission_checks=[("users", "UPDATE")],
    object_check=("user_id", "auth.User"),
    keywords=["deactivate user", "disable user"],
    prepare=_prepare_deactivation,
)
def deactivate_user(
    call: ToolCall,
    user_id: Annotated[int, "the account's id", Range(1)],
    reason: Annotated[str, "why, for the record", Length(max=500)] = "",
) -> ToolResult:
    account = call.instance
    _may_deactivate(call)
    account.is_active = False
    account.save(update_fields=["is_active"])
    return ToolResult(
        text=f"Deactivated {account.get_username()}." + (f" Reason: {reason}" if reason else ""),
        actions=[{"type": "user_deactivated", "user_id": account.pk}],
    )


@assistant_tool(
    operation="set_password",
    domain="users",
    description="Set a new password for a user account",
    risk_level="guarded",
    requires_confirmation=True,
    permission_checks=[("users", "UPDATE")],
    object_check=("user_id", "auth.User"),
    sensitive_entities=["new_password"],
    keywords=["set password", "reset password"],
    prepare=_prepare_password,
)
def set_password(
    call: ToolCall,
    user_id: Annotated[int, "the account's id", Range(1)],
    new_password: Annotated[str, "the new password", Length(min=1, max=1024)],
) -> ToolResult:
    account = call.instance
    _refuse_taking_over_a_superuser(call, account, "set the password of")
    account.set_password(new_password)
    account.save(update_fields=["password"])
    return ToolResult(text=f"Password changed for {account.get_username()}.")


@register_toolset
class DemoDatabase(SQLInspector):
    """The example project's own database, read-only (operators may look, admins may query)."""

    name = "demo_database"
    database = "default"
    role = demo_sql_role.ROLE  # PostgreSQL: `manage.py demo_sql_role` creates it (SQLite: no role)
    # (its default scope, "call": a connection for each call, none held by open chats)


@assistant_tool(
    operation="user_report",
    domain="users",
    description="Build a report on every account in the background, with progress",
    risk_level="guarded",
    permission_checks=[("users", "READ")],
    keywords=["user report", "report on users"],
    background=True,
)
def user_report(
    call: ToolCall,
    pause: Annotated[float, "seconds to wait after each account (0-5)", Range(0, 5)] = 0.5,
) -> ToolResult:
    job = call.jobs.enqueue(build_user_report, pause)
    return ToolResult(text="Building the user report in the background.", task_id=str(job.pk))
