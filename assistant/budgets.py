"""Per-user limits on what the language model may spend: tokens per day, turns per minute."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, time, timedelta
from typing import Any

from django.db.models import Sum
from django.utils import timezone

from .conf import assistant_settings
from .dispatch import CallContext, Outcome, write_audit
from .exceptions import BudgetExceeded
from .models import AuditEntry, Conversation, Message

LIMITS = ("TOKENS_PER_DAY", "TURNS_PER_MINUTE")
# How a refused model call is named in the audit trail (it is not a tool).
BUDGET_OPERATION = "llm_call"


@dataclass(frozen=True, kw_only=True, slots=True)
class Budget:
    """A user's limits; None means unlimited."""

    tokens_per_day: int | None = None
    turns_per_minute: int | None = None


def budget_for(user: Any) -> Budget:
    """The defaults, unless a group of the user's overrides a limit (the most generous wins)."""
    configured = assistant_settings.BUDGETS
    limits: dict[str, int | None] = {name: configured.get(name) for name in LIMITS}
    groups = configured.get("GROUPS") or {}
    if groups and getattr(user, "pk", None) is not None:
        names = set(user.groups.filter(name__in=list(groups)).values_list("name", flat=True))
        for name in LIMITS:
            overrides = [groups[group][name] for group in names if name in groups[group]]
            if overrides:
                limits[name] = None if None in overrides else max(overrides)
    return Budget(
        tokens_per_day=limits["TOKENS_PER_DAY"], turns_per_minute=limits["TURNS_PER_MINUTE"]
    )


def tokens_today(user: Any) -> int:
    midnight = timezone.make_aware(datetime.combine(timezone.localdate(), time.min))
    spent = _model_turns(user).filter(created_at__gte=midnight).aggregate(Sum("total_tokens"))
    return int(spent["total_tokens__sum"] or 0)


def turns_last_minute(user: Any) -> int:
    since = timezone.now() - timedelta(minutes=1)
    return _model_turns(user).filter(created_at__gte=since).count()


def _model_turns(user: Any) -> Any:
    return Message.objects.filter(
        conversation__user_id=user.pk, role=Message.Role.ASSISTANT
    ).exclude(model="")


def check_budget(user: Any, *, conversation: Conversation | None, source: str) -> None:
    """Raise ``BudgetExceeded`` (and audit it) before a model is asked, if a limit is reached."""
    budget = budget_for(user)
    problem = ""
    if budget.turns_per_minute is not None and turns_last_minute(user) >= budget.turns_per_minute:
        problem = (
            f"You have reached your limit of {budget.turns_per_minute} assistant turns a "
            "minute; try again in a minute."
        )
    elif budget.tokens_per_day is not None and tokens_today(user) >= budget.tokens_per_day:
        problem = (
            f"You have used today's budget of {budget.tokens_per_day:,} language-model tokens; "
            "it renews at midnight, or ask an administrator for more."
        )
    if not problem:
        return
    refused = Outcome(
        operation=BUDGET_OPERATION,
        decision=AuditEntry.Decision.OVER_BUDGET,
        entities={},
        error_summary=problem,
    )
    write_audit(
        CallContext(user=user, source=source, conversation=conversation),
        refused,
        domain="assistant",
    )
    raise BudgetExceeded(problem)
