"""``ASSISTANT['APPROVAL_POLICIES']`` names real operations, policies and approvers (E011-E014)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core.checks import CheckMessage, Error, register

from ..access.approvals import RISK_LEVELS, Policy, configured, configured_for
from ..access.requirements import permission_for
from ..conf import policies_are_valid
from ..core.declaration import RiskLevel
from ..core.registry import ToolRegistry, registry
from .permissions import _codenames


@register("assistant")
def check_approval_policies(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """assistant.E011/E012/E013/E014: ASSISTANT['APPROVAL_POLICIES'] names real operations and
    policies, a two_person approver's permission, and never runs a dangerous tool unasked."""
    return list(policy_errors(registry))


def policy_errors(site: ToolRegistry) -> Iterable[CheckMessage]:
    configured_settings = getattr(settings, "ASSISTANT", {})
    policies = (
        configured_settings.get("APPROVAL_POLICIES", {})
        if isinstance(configured_settings, dict)
        else {}
    )
    if not policies_are_valid(policies):
        return  # its shape is assistant.E002's
    where = "ASSISTANT['APPROVAL_POLICIES']"
    operations = {tool.operation for tool in site}
    created = {permission_for(check) for tool in site for check in tool.permission_checks}
    for name, entry in policies.items():
        approval = configured(entry)
        if name not in RISK_LEVELS and name not in operations:
            guess = difflib.get_close_matches(name, sorted(operations | RISK_LEVELS), n=1)
            yield Error(
                f"{where}[{name!r}] names no tool's operation and no risk level.",
                hint=(f"Did you mean {guess[0]!r}? " if guess else "")
                + "Use a registered operation or one of 'safe', 'guarded', 'dangerous'.",
                id="assistant.E011",
            )
        if approval.policy not in Policy.values:
            yield Error(
                f"{where}[{name!r}] asks for policy {approval.policy!r}, which does not exist.",
                hint=f"Use one of {', '.join(map(repr, Policy.values))}.",
                id="assistant.E012",
            )
        elif approval.policy == Policy.TWO_PERSON and not (
            approval.permission in created or _is_permission(approval.permission)
        ):
            yield Error(
                f"{where}[{name!r}] is two_person, but its approver permission "
                f"{approval.permission!r} is not a permission any installed model defines.",
                hint="Write {'policy': 'two_person', 'permission': 'app_label.codename'} "
                "naming the permission a second person needs to approve.",
                id="assistant.E013",
            )
    for tool in site:
        if tool.risk_level is not RiskLevel.DANGEROUS:
            continue
        chosen = configured_for(tool, policies)
        if chosen is not None and chosen.policy == Policy.AUTO:
            yield Error(
                f"Tool {tool.operation!r} is dangerous, but {where} would run it unconfirmed "
                "('auto'); it is asked as 'confirm' instead.",
                hint="Give dangerous tools 'confirm', 'confirm_with_reason' or 'two_person'.",
                obj=tool.handler,
                id="assistant.E014",
            )


def _is_permission(label: str) -> bool:
    app_label, _, codename = label.partition(".")
    return app_label in apps.app_configs and codename in _codenames(app_label)
