"""The decision steps: each returns None (go on) or the Outcome that refuses the call."""

from __future__ import annotations

from collections.abc import Callable

from django.apps import apps

from ..access.caches import access_for
from ..access.permissions import hidden_from, refusal
from ..access.predicate import denials
from ..conf import assistant_settings
from ..core.declaration import AssistantTool
from ..core.redaction import redacted_entities
from ..exceptions import (
    ArgumentsTooLarge,
    InvalidEntities,
    PermissionDenied,
    ToolHidden,
    UnknownOperation,
)
from .bounds import kept_instead, too_large
from .calls import Call, Decision, Outcome


def _no_such_object(tool: AssistantTool) -> InvalidEntities:
    entity, label = tool.object_check  # type: ignore[misc]
    return InvalidEntities(
        {entity: f"no {label} with this id that you may use"}, operation=tool.operation
    )


# -- the decision steps: each returns None (go on) or the Outcome that stops the call ----------

Step = Callable[[Call], Outcome | None]


def still_signed_in(call: Call) -> Outcome | None:
    """A run's credential still holds (not revoked or expired, the session not ended)."""
    credential = call.context.credential
    lapse = credential.lapse() if credential is not None else None
    return None if lapse is None else call.stop(Decision.DENIED, lapse)


def look_up(call: Call) -> Outcome | None:
    """The tool the operation names (unless the caller already found it)."""
    if call.tool is None:
        try:
            call.tool = call.context.site.get(call.operation)
        except UnknownOperation as exc:
            return call.stop(Decision.UNKNOWN, exc)
    return None


def validate(call: Call) -> Outcome | None:
    """The entities checked against the handler's signature."""
    assert call.tool is not None
    try:
        call.values = call.tool.validate(call.raw)
    except InvalidEntities as exc:
        return call.stop(Decision.INVALID, exc)
    return None


def authorize(call: Call) -> Outcome | None:
    """The tool-level permission check, against the user's access snapshot (loaded once)."""
    assert call.tool is not None
    if call.access is None:
        call.access = access_for(call.context.user)
    if denials(call.access, call.tool):
        error = refusal(call.access, call.tool, call.context.site)
        if isinstance(error, ToolHidden):
            if call.action is None:
                return hidden(call, error)
            error = PermissionDenied(error.message)  # (its owner knows the action's operation)
        return call.stop(Decision.DENIED, error)
    ceiling = call.context.ceiling
    if ceiling is not None and not ceiling.allows(call.tool):
        return call.stop(Decision.DENIED, ceiling.refusal(call.tool))
    return None


def hidden(call: Call, error: ToolHidden) -> Outcome:
    """A refused tool its caller may not know of answers as a missing one (status, code, text,
    entities all redacted); only the audit entry says ``denied``, and of which tool."""
    tool, call.tool = call.tool, None
    outcome = call.stop(Decision.UNKNOWN, UnknownOperation.named(call.operation))
    call.tool = tool
    outcome.error_summary = error.message
    outcome.audit_decision = Decision.DENIED
    outcome.audit_tool = tool
    outcome.audit_entities = redacted_entities(tool, call.raw)
    return outcome


def authorize_instance(call: Call) -> Outcome | None:
    """The object-level check; a missing and a forbidden instance look the same to the caller."""
    tool = call.tool
    assert tool is not None and call.access is not None
    if tool.object_check is None:
        return None
    entity, label = tool.object_check
    value = call.values.get(entity)
    if value is not None:
        try:
            call.instance = apps.get_model(label)._default_manager.filter(pk=value).first()
        except (ValueError, TypeError):
            call.instance = None
    if call.instance is None:
        return call.stop(Decision.INVALID, _no_such_object(tool))
    if denials(call.access, tool, call.instance):
        # The caller sees what a missing instance gives; only the audit says denied.
        outcome = call.stop(Decision.INVALID, _no_such_object(tool))
        outcome.audit_decision = Decision.DENIED
        return outcome
    return None


def within_bounds(call: Call) -> Outcome | None:
    """Arguments larger than a call may bring: refused before anything of them is kept (the
    audit and the caller get their size, digest and a short preview instead)."""
    encoded = too_large(call.raw)
    if encoded is None:
        return None
    tool = call.tool or call.context.site.find(call.operation)
    kept = kept_instead(tool, call.raw, encoded)
    # a tool hidden from the caller: its preview is redacted as a missing operation's is
    shown = kept_instead(None, call.raw, encoded) if _hides(call, tool) else kept
    call.raw = {}
    operation = call.operation if isinstance(call.operation, str) else ""
    limit = assistant_settings.MAX_TOOL_ARGUMENT_BYTES
    outcome = call.stop(
        Decision.INVALID, ArgumentsTooLarge(len(encoded), limit, operation=operation[:64])
    )
    outcome.entities = shown
    outcome.audit_entities = kept
    return outcome


def _hides(call: Call, tool: AssistantTool | None) -> bool:
    """Whether ``tool`` is one the caller is told does not exist (a pending action's owner knows
    its operation; an allowed call's snapshot is at hand, a refused one is decided off the loop)."""
    if tool is None or call.action is not None:
        return False
    if call.access is None:
        call.access = access_for(call.context.user)
    return hidden_from(call.access, tool, call.context.site)
