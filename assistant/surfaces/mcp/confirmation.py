"""A confirmation over MCP: asked in the client's form (elicitation) or by link, answered once, resumed on retry."""

from __future__ import annotations

import asyncio
import hashlib
import json
from typing import Any

import mcp_types as types
from asgiref.sync import sync_to_async
from django.core import signing
from django.core.serializers.json import DjangoJSONEncoder
from django.utils import timezone
from django.utils.translation import gettext
from mcp.server.context import ServerRequestContext
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from ...conf import assistant_settings
from ...core.declaration import RiskLevel
from ...dispatch.calls import CallContext
from ...dispatch.confirmation import acancel_action, aconfirm_action
from ...exceptions import AssistantError
from ...models import PendingAction
from .callers import Caller
from .results import approval_url, result_of, stored_result, text_result, waiting_result

APPROVAL = "approval"  # the key of the one input request a confirmation round sends
APPROVE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approved": {
            "type": "boolean",
            "title": "Approve",
            "description": "Run this action now (it runs once, as asked).",
        }
    },
    "required": ["approved"],
}
REQUEST_STATE_SALT = "assistant.mcp.request-state"


# -- tools/call: confirmation ---------------------------------------------------------------------


def request_key(caller: Caller, operation: str, arguments: Any) -> str:
    """The identity of a call, to find the action an earlier identical call opened."""
    canonical = json.dumps(
        [caller.user.pk, caller.bearer.kind, caller.bearer.token_id, operation, arguments],
        sort_keys=True,
        cls=DjangoJSONEncoder,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def earlier_action(caller: Caller, key: str) -> PendingAction | None:
    """The action an identical earlier call opened whose result no retry has taken yet."""
    return (
        PendingAction.objects.filter(user=caller.user, request_key=key, delivered_at__isnull=True)
        .order_by("-created_at")
        .first()
    )


def deliver(action: PendingAction) -> bool:
    """Hand a decided action's result to one retry (the first to ask; False for the others)."""
    return bool(
        PendingAction.objects.filter(pk=action.pk, delivered_at__isnull=True).update(
            delivered_at=timezone.now()
        )
    )


def mark_requested(action: PendingAction, key: str) -> None:
    PendingAction.objects.filter(pk=action.pk).update(request_key=key)
    action.request_key = key


def seal(action: PendingAction, caller: Caller) -> str:
    return signing.dumps(
        {"action": str(action.pk), "user": caller.user.pk, "token": caller.bearer.token_id},
        salt=REQUEST_STATE_SALT,
    )


def unseal(state: str, caller: Caller) -> str | None:
    """The action id a ``requestState`` names, if this server signed it for this caller."""
    try:
        payload = signing.loads(
            state, salt=REQUEST_STATE_SALT, max_age=assistant_settings.CONFIRMATION_TTL + 60
        )
    except signing.BadSignature:
        return None
    if (
        not isinstance(payload, dict)
        or payload.get("user") != caller.user.pk
        or payload.get("token") != caller.bearer.token_id
    ):
        return None
    action = payload.get("action")
    return action if isinstance(action, str) else None


def elicits_form(action: PendingAction, capabilities: types.ClientCapabilities | None) -> bool:
    """Whether the client's own form may take this decision: a guarded tool's plain confirmation
    (no reason, no phrase, no second person), where settings allow it and the client can."""
    if assistant_settings.MCP_ELICITATION != "guarded":
        return False
    if action.policy != PendingAction.Policy.CONFIRM or action.confirm_phrase:
        return False
    if action.risk != RiskLevel.GUARDED.value:
        return False
    elicitation = capabilities.elicitation if capabilities is not None else None
    # an empty elicitation capability means form (the 2025-06-18 meaning, kept since)
    return elicitation is not None and (elicitation.form is not None or elicitation.url is None)


def elicits_url(capabilities: types.ClientCapabilities | None) -> bool:
    elicitation = capabilities.elicitation if capabilities is not None else None
    return elicitation is not None and elicitation.url is not None


def is_modern(ctx: ServerRequestContext[Any, Any]) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


async def ask(
    ctx: ServerRequestContext[Any, Any], caller: Caller, context: CallContext, action: PendingAction
) -> types.CallToolResult | types.InputRequiredResult:
    """Put a pending action to the human: in the client's form, at our approvals page, or say where."""
    capabilities = ctx.session.client_capabilities
    if elicits_form(action, capabilities):
        message = gettext("Approve this action? %(summary)s") % {"summary": action.summary}
        if is_modern(ctx):
            return types.InputRequiredResult(
                input_requests={
                    APPROVAL: types.ElicitRequest(
                        params=types.ElicitRequestFormParams(
                            message=message, requested_schema=APPROVE_SCHEMA
                        )
                    )
                },
                request_state=seal(action, caller),
            )
        remaining = (action.expires_at - timezone.now()).total_seconds()
        try:
            async with asyncio.timeout(max(remaining, 0.0)):
                answer = await ctx.session.elicit_form(
                    message, APPROVE_SCHEMA, related_request_id=ctx.request_id
                )
        except TimeoutError:
            return waiting_result(caller, action)
        return await answered(caller, context, action, answer)
    url = approval_url(caller, action)
    if elicits_url(capabilities):
        message = gettext("Approve or reject in your browser: %(summary)s") % {
            "summary": action.summary
        }
        if is_modern(ctx):
            return types.InputRequiredResult(
                input_requests={
                    APPROVAL: types.ElicitRequest(
                        params=types.ElicitRequestURLParams(message=message, url=url)
                    )
                },
                request_state=seal(action, caller),
            )
        try:
            async with asyncio.timeout(30):
                await ctx.session.elicit_url(
                    message, url, str(action.pk), related_request_id=ctx.request_id
                )
        except TimeoutError:
            pass
    return waiting_result(caller, action)


async def answered(
    caller: Caller, context: CallContext, action: PendingAction, answer: Any
) -> types.CallToolResult:
    """The client's form answer, run through the same confirm and reject as every surface."""
    approved = (
        getattr(answer, "action", None) == "accept"
        and isinstance(getattr(answer, "content", None), dict)
        and answer.content.get("approved") is True
    )
    refused = getattr(answer, "action", None) == "decline" or (
        getattr(answer, "action", None) == "accept" and not approved
    )
    if not approved and not refused:  # dismissed: the action waits, answerable elsewhere
        return waiting_result(caller, action)
    try:
        if approved:
            outcome = await aconfirm_action(action.pk, context=context)
        else:
            outcome = await acancel_action(
                action.pk, reason="declined in the MCP client", context=context
            )
    except AssistantError as exc:
        fresh = await sync_to_async(PendingAction.objects.get)(pk=action.pk)
        decided = fresh.status != PendingAction.Status.PENDING and fresh.result is not None
        if decided and await sync_to_async(deliver)(fresh):
            return stored_result(fresh)
        return text_result(f"{exc.message} [{exc.code}]", data={"code": exc.code}, error=True)
    await sync_to_async(deliver)(action)
    return result_of(outcome)


async def resumed(
    ctx: ServerRequestContext[Any, Any],
    caller: Caller,
    context: CallContext,
    params: types.CallToolRequestParams,
) -> types.CallToolResult | types.InputRequiredResult:
    """A 2026-07-28 retry carrying our ``requestState`` (and, maybe, the human's answer).

    The retry must be the call that opened the action (its request key): a state replayed with
    other arguments would answer, or approve, an action that is not the one being called.
    """
    action_id = unseal(params.request_state or "", caller)
    arguments = params.arguments if params.arguments is not None else {}
    action = (
        await sync_to_async(
            PendingAction.objects.filter(
                pk=action_id,
                user=caller.user,
                operation=params.name,
                request_key=request_key(caller, params.name, arguments),
            ).first
        )()
        if action_id is not None
        else None
    )
    if action is None:
        return text_result(
            "This confirmation is not valid here: call the tool again. [invalid_request_state]",
            data={"code": "invalid_request_state"},
            error=True,
        )
    return await settled(ctx, caller, context, action, (params.input_responses or {}).get(APPROVAL))


async def settled(
    ctx: ServerRequestContext[Any, Any],
    caller: Caller,
    context: CallContext,
    action: PendingAction,
    answer: Any = None,
) -> types.CallToolResult | types.InputRequiredResult:
    """An earlier call's action, as it stands: its result once decided, else ask (again)."""
    if action.status == PendingAction.Status.PENDING and not action.is_expired:
        if answer is not None and elicits_form(action, ctx.session.client_capabilities):
            return await answered(caller, context, action, answer)
        if answer is not None:  # a URL round came back: the decision is made on our page
            return waiting_result(caller, action)
        return await ask(ctx, caller, context, action)
    if action.status == PendingAction.Status.CONFIRMED and action.result is None:
        return waiting_result(caller, action)  # being run right now, by its approval
    if await sync_to_async(deliver)(action):
        if action.status == PendingAction.Status.PENDING:  # expired before anyone decided
            return text_result(
                gettext("This %(operation)s request expired; call the tool again to ask anew.")
                % {"operation": action.operation}
                + " [expired]",
                data={"code": "expired"},
                error=True,
            )
        return stored_result(action)
    return text_result(
        "This request's result was already returned. [already_decided]",
        data={"code": "already_decided"},
        error=True,
    )
