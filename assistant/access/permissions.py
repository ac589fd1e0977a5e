"""Who may use a tool, asked of a user (``can_use_tool``, ``explain``), and what a refused user
is told; the access layer's permission names, importable from here."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.utils.translation import gettext

from ..core.declaration import AssistantTool
from ..core.registry import ToolRegistry, registry
from ..exceptions import AccountInactive, PermissionDenied, ToolHidden
from .caches import (
    USER_FLAGS,
    aaccess_for,
    access_changed,
    access_for,
    access_generation,
    cached_access,
    credential_generation,
    credentials_changed,
    forget_access,
    hearing_news,
    refresh_access,
    reread_access,
)
from .predicate import INACTIVE, MISSING, NOT_AUTHENTICATED, UserAccess, denials
from .requirements import (
    assistant_codename,
    create_tool_permissions,
    permission_for,
    permission_map,
    permission_name,
    required_permissions,
    tool_permission_name,
)

# The names callers asked of this module before it was split, from where they live now: for
# ``assistant.permissions`` (the deprecated path, which is this module) and its importers.
__all__ = [
    "INACTIVE",
    "MISSING",
    "NOT_AUTHENTICATED",
    "USER_FLAGS",
    "UserAccess",
    "aaccess_for",
    "access_changed",
    "access_for",
    "access_generation",
    "assistant_codename",
    "cached_access",
    "can_use_tool",
    "create_tool_permissions",
    "credential_generation",
    "credentials_changed",
    "denials",
    "discloses",
    "explain",
    "forget_access",
    "hearing_news",
    "hidden_from",
    "known_domains",
    "missing_permissions",
    "permission_for",
    "permission_map",
    "permission_name",
    "refresh_access",
    "refusal",
    "required_permissions",
    "reread_access",
    "session_user_is_inactive",
    "tool_permission_name",
]


def missing_permissions(reasons: Iterable[str]) -> tuple[str, ...]:
    """The permission strings a tool's denial reasons name (``denials``' own wording)."""
    return tuple(reason.removeprefix(MISSING) for reason in reasons if reason.startswith(MISSING))


def known_domains(access: UserAccess, site: ToolRegistry = registry) -> set[str]:
    """The domains this user has a part in: those of the tools they may use (public ones aside)."""
    return {tool.domain for tool in site if not tool.public and not denials(access, tool)}


def discloses(access: UserAccess, tool: AssistantTool, site: ToolRegistry = registry) -> bool:
    """Whether a refusal may name ``tool`` and what it needs: its existence is no secret to them.

    The rule: an active user who may use a tool of the same domain (a public tool does not
    count) knows the domain is there; a tool of a domain they have no part in stays unnamed, as
    if it did not exist.
    """
    return access.active and tool.domain in known_domains(access, site)


def refusal(
    access: UserAccess, tool: AssistantTool, site: ToolRegistry = registry
) -> PermissionDenied:
    """What a user refused ``tool`` is told: a deactivated account says so; a tool whose existence
    is no secret to them (``discloses``) names what it needs in human words; any other is
    ``ToolHidden``, which dispatch answers as a missing operation."""
    reasons = denials(access, tool)
    if INACTIVE in reasons:
        return AccountInactive()
    missing = missing_permissions(reasons)
    if not missing or not discloses(access, tool, site):
        return ToolHidden(
            gettext("You do not have permission to use %(operation)s.")
            % {"operation": tool.operation}
        )
    names = [f"“{permission_name(perm)}”" for perm in missing]
    either = gettext(" or ") if tool.permission_mode == "any" else gettext(" and ")
    return PermissionDenied(
        gettext("You can't use %(operation)s: it needs %(permissions)s. Ask an operator for it.")
        % {"operation": tool.operation, "permissions": either.join(names)}
    )


def hidden_from(access: UserAccess, tool: AssistantTool, site: ToolRegistry = registry) -> bool:
    """Whether ``tool`` is one this user is told does not exist (its refusal is ``ToolHidden``)."""
    return bool(denials(access, tool)) and isinstance(refusal(access, tool, site), ToolHidden)


def session_user_is_inactive(session: Any) -> bool:
    """Whether a session that signs no one in any more belongs to a user since deactivated.

    Django's backends give a deactivated user's session an anonymous user; this tells the two
    apart (the session's own hash must still match, as Django checks on every request).
    """
    from django.contrib.auth import HASH_SESSION_KEY, SESSION_KEY, get_user_model
    from django.utils.crypto import constant_time_compare

    pk = session.get(SESSION_KEY) if session is not None else None
    if pk is None:
        return False
    model = get_user_model()
    try:
        user = model._default_manager.filter(pk=model._meta.pk.to_python(pk)).first()
    except (DjangoValidationError, ValueError, TypeError):
        return False
    if user is None or getattr(user, "is_active", True):
        return False
    stored = session.get(HASH_SESSION_KEY)
    return bool(stored) and constant_time_compare(stored, user.get_session_auth_hash())


def can_use_tool(user: Any, tool: AssistantTool, instance: Any = None) -> bool:
    """Whether ``user`` may see and call ``tool`` (on ``instance``, for object-checked tools)."""
    return not denials(access_for(user), tool, instance)


def explain(
    user: Any, tools: Iterable[AssistantTool]
) -> list[tuple[AssistantTool, tuple[str, ...]]]:
    """Each tool with the reasons it is hidden from ``user`` (no reasons: visible)."""
    access = access_for(user)
    return [(tool, denials(access, tool)) for tool in tools]
