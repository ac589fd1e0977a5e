"""What a tools/call answers: an outcome as a tool result, a stored action's result, a link to approve."""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types
from django.core.serializers.json import DjangoJSONEncoder
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext

from ...conf import assistant_settings
from ...dispatch.calls import Decision, Outcome
from ...models import PendingAction
from .callers import Caller

# -- tools/call: results --------------------------------------------------------------------------


def text_result(text: str, *, data: Any = None, error: bool = False) -> types.CallToolResult:
    structured = None
    if data is not None:
        structured = json.loads(json.dumps(data, cls=DjangoJSONEncoder))
        if not isinstance(structured, dict):  # 2025-11-25 wants an object
            structured = {"result": structured}
    return types.CallToolResult(
        content=[types.TextContent(text=text or "(no text)")],
        structured_content=structured,
        is_error=error,
    )


def result_of(outcome: Outcome) -> types.CallToolResult:
    """An outcome as a tool result: text carries the result's text, structuredContent its data;
    anything else (a refusal, a failure, a rejection) is an ``isError`` result naming its code."""
    result = outcome.result
    if outcome.error is None and result is not None and (outcome.ok or _benign(outcome)):
        return text_result(result.text, data=result.data)
    code = outcome.code or outcome.decision
    return text_result(
        f"{outcome.text} [{code}]",
        data={"code": code, "decision": outcome.decision, "message": outcome.text},
        error=True,
    )


def _benign(outcome: Outcome) -> bool:
    """Decisions that are answers, not errors (a prepare hook's question)."""
    return outcome.decision == Decision.CLARIFY


def stored_result(action: PendingAction) -> types.CallToolResult:
    """What a decided action came to, as the approval stored it."""
    result = action.result or {}
    decision = result.get("decision") or action.status
    if decision in (Decision.EXECUTED, Decision.CONFIRMED):
        return text_result(result.get("text", ""), data=result.get("data"))
    code = result.get("code") or decision
    text = result.get("text") or gettext("This %(operation)s request was %(status)s.") % {
        "operation": action.operation,
        "status": str(action.get_status_display()).lower(),
    }
    return text_result(
        f"{text} [{code}]", data={"code": code, "decision": decision, "message": text}, error=True
    )


def approval_url(caller: Caller, action: PendingAction) -> str:
    base = assistant_settings.PUBLIC_URL or caller.base_url
    return f"{base.rstrip('/')}{reverse('assistant:approvals')}?action={action.pk}"


def waiting_result(caller: Caller, action: PendingAction) -> types.CallToolResult:
    """A confirmation this client cannot take: where the human approves, and what to do next."""
    url = approval_url(caller, action)
    expires = timezone.localtime(action.expires_at).isoformat(timespec="seconds")
    text = gettext(
        "Waiting for approval: %(summary)s\n"
        "Approve or reject it at %(url)s (until %(expires)s), then call %(operation)s again "
        "with the same arguments for its result."
    ) % {"summary": action.summary, "url": url, "expires": expires, "operation": action.operation}
    return text_result(
        text,
        data={
            "status": Decision.CONFIRMATION_REQUESTED.value,
            "action_id": str(action.pk),
            "approval_url": url,
            "expires_at": action.expires_at.isoformat(),
            "policy": action.policy,
        },
    )
