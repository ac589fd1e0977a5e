"""Which approval policy a tool's calls get: ``ASSISTANT["APPROVAL_POLICIES"]`` over its risk class.

An operation's own entry beats its risk level's; with neither, a tool that declares
``requires_confirmation`` is asked as ``confirm`` and any other runs (``auto``), as always.
A model's call proposed after it read a tool's output (``after_results``) is asked
as ``confirm`` where it would run unasked, unless its tool is ``safe`` or
``LLM["CONFIRM_AFTER_RESULTS"]`` is off: what a result says cannot start work by itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..conf import assistant_settings
from ..core.declaration import AssistantTool, RiskLevel
from ..models import PendingAction

Policy = PendingAction.Policy
RISK_LEVELS = frozenset(level.value for level in RiskLevel)


@dataclass(frozen=True, kw_only=True, slots=True)
class Approval:
    """A policy and, for ``two_person``, the permission ("app_label.codename") its approver holds."""

    policy: str
    permission: str = ""
    steered: bool = False  # asked because the model proposed it after reading a tool's output

    @property
    def asks(self) -> bool:
        """Whether a call waits for someone's answer (every policy but ``auto``)."""
        return self.policy != Policy.AUTO


AUTO = Approval(policy=Policy.AUTO)
CONFIRM = Approval(policy=Policy.CONFIRM)
STEERED = Approval(policy=Policy.CONFIRM, steered=True)  # asked: it followed a tool's output


def configured(entry: Any) -> Approval:
    """One settings entry (``"confirm"`` or ``{"policy": ..., "permission": ...}``) read as is."""
    if isinstance(entry, dict):
        return Approval(
            policy=str(entry.get("policy", "")), permission=str(entry.get("permission") or "")
        )
    return Approval(policy=str(entry))


def configured_for(tool: AssistantTool, policies: dict[str, Any]) -> Approval | None:
    """The entry that names this tool (its operation first, then its risk level), if any."""
    for key in (tool.operation, tool.risk_level.value):
        if key in policies:
            return configured(policies[key])
    return None


def policy_for(tool: AssistantTool, *, after_results: bool = False) -> Approval:
    """The approval a call of this tool needs, as configured or derived from its declaration;
    ``after_results``: a model proposed the call with a tool's output in what it read."""
    policies = assistant_settings.APPROVAL_POLICIES
    approval = configured_for(tool, policies) if policies else None
    if approval is None or approval.policy not in Policy.values:
        # (an unknown name is assistant.E012's; until fixed, the declaration decides)
        approval = CONFIRM if tool.requires_confirmation else AUTO
    elif approval.policy == Policy.AUTO and tool.risk_level is RiskLevel.DANGEROUS:
        return CONFIRM  # never unasked (assistant.E014 says so at start)
    if not approval.asks and after_results and steerable(tool):
        return STEERED
    return approval


def steerable(tool: AssistantTool) -> bool:
    """Whether a call of this tool that would run unasked is asked when the model proposed it
    after reading a tool's output: it changes something (``LLM["CONFIRM_AFTER_RESULTS"]``)."""
    return tool.risk_level is not RiskLevel.SAFE and bool(
        assistant_settings.llm["CONFIRM_AFTER_RESULTS"]
    )
