"""Per-user limits on what the language model may spend: tokens per day (reserved before each
model call, settled after it), turns per minute."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, time, timedelta
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async
from django.db import DatabaseError
from django.db.models import Sum
from django.utils import timezone
from django.utils.translation import gettext

from ..conf import assistant_settings
from ..dispatch.audit import write_audit
from ..dispatch.calls import CallContext, Outcome
from ..exceptions import BudgetExceeded
from ..models import AuditEntry, BudgetReservation, BudgetUsage, Conversation, Message
from .lanes import keep

if TYPE_CHECKING:
    from .turn import Turn

logger = logging.getLogger("assistant.budgets")

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
    """Tokens the user's stored replies of today spent (where a day's usage row starts from)."""
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
    """Raise ``BudgetExceeded`` (and audit it) before a turn asks the model, past its turns a
    minute; tokens are reserved call by call (``reserve_call``)."""
    budget = budget_for(user)
    if budget.turns_per_minute is not None and turns_last_minute(user) >= budget.turns_per_minute:
        refuse(
            user,
            conversation=conversation,
            source=source,
            problem=gettext(
                "You have reached your limit of %(turns)s assistant turns a minute; "
                "try again in a minute."
            )
            % {"turns": budget.turns_per_minute},
        )


def refuse(user: Any, *, conversation: Conversation | None, source: str, problem: str) -> None:
    """Audit a model call refused by a budget (once) and raise ``BudgetExceeded``."""
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


# Tokenizers take 3 to 4 bytes of English (more of JSON) a token: counting 3 errs high.
BYTES_PER_TOKEN = 3
MESSAGE_OVERHEAD = 4  # tokens a chat message costs besides its content (role, separators)


def estimate_tokens(text: str) -> int:
    """Tokens ``text`` will count at most, about (bytes of UTF-8 / 3, rounded up)."""
    return -(-len(text.encode()) // BYTES_PER_TOKEN)


def estimate_prompt_tokens(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
    """Tokens a request's prompt (its messages and tool catalog) will count, erring high."""
    sent = json.dumps([messages, tools], ensure_ascii=False, default=str)
    return estimate_tokens(sent) + MESSAGE_OVERHEAD * len(messages)


OnUsage = Callable[[str, dict[str, int] | None], None]


@dataclass(kw_only=True, slots=True)
class CallBudget:
    """One model call's reservation (none without a token budget) and what the call reported."""

    reservation: BudgetReservation | None = None
    prompt_tokens: int = 0  # the prompt's estimate
    reply_tokens: int | None = None  # the reply's cap, sent as max_tokens
    reported: dict[str, int] | None = None
    answered: bool = False  # a chunk arrived: the server spends from here on

    def metered(self, on_usage: OnUsage) -> OnUsage:
        """``on_usage``, noting the call's own usage too when there is a reservation to settle."""
        if self.reservation is None:
            return on_usage

        def note(model: str, usage: dict[str, int] | None) -> None:
            self.answered = True
            if usage is not None:
                self.reported = usage
            on_usage(model, usage)

        return note

    def spent(self, output: str) -> int:
        """What the call spent: as the server reported it, else estimated from what it streamed
        (nothing when no chunk came: a refused or unreachable server bills nothing)."""
        if self.reported is not None:
            total = self.reported.get("total_tokens") or 0
            parts = self.reported.get("prompt_tokens", 0) + self.reported.get(
                "completion_tokens", 0
            )
            return max(total, parts)
        if not self.answered:
            return 0
        return self.prompt_tokens + estimate_tokens(output)

    async def asettle(self, output: str) -> None:
        """Count what the call spent and release the rest, shielded from a stop or a shutdown."""
        reservation, self.reservation = self.reservation, None
        if reservation is None:
            return
        try:
            await asyncio.shield(sync_to_async(reservation.settle)(self.spent(output)))
        except DatabaseError:  # the reservation lapses after RESERVATION_TTL
            logger.exception("Settling a budget reservation failed")


def tokens_limited() -> bool:
    """Whether any user may have a daily token budget (else calls reserve nothing, no hop)."""
    configured = assistant_settings.BUDGETS
    groups = (configured.get("GROUPS") or {}).values()
    return configured.get("TOKENS_PER_DAY") is not None or any(
        limits.get("TOKENS_PER_DAY") is not None for limits in groups
    )


def reserve_call(
    user: Any,
    *,
    conversation: Conversation | None,
    source: str,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
) -> CallBudget:
    """Reserve one model call's tokens (its prompt's estimate and its reply's cap) from the
    user's budget for today, while any of it is left; else refuse, audited, ``BudgetExceeded``."""
    daily = budget_for(user).tokens_per_day
    if daily is None:
        return CallBudget()
    config = assistant_settings.llm
    prompt, reply = estimate_prompt_tokens(messages, tools), config["RESERVE_REPLY_TOKENS"]
    usage = BudgetUsage.of(user, timezone.localdate(), lambda: tokens_today(user))
    reservation = usage.reserve(prompt + reply, limit=daily, ttl_seconds=config["RESERVATION_TTL"])
    if reservation is None:
        refuse(
            user,
            conversation=conversation,
            source=source,
            problem=gettext(
                "You have used today's budget of %(tokens)s language-model tokens; "
                "it renews at midnight, or ask an administrator for more."
            )
            % {"tokens": f"{daily:,}"},
        )
    return CallBudget(reservation=reservation, prompt_tokens=prompt, reply_tokens=reply)


async def areserve_call(
    turn: Turn, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
) -> CallBudget:
    """``reserve_call`` for a turn's next model call (no thread hop where no budget applies)."""
    if not tokens_limited():
        return CallBudget()
    reserving = asyncio.ensure_future(
        sync_to_async(reserve_call)(
            turn.user,
            conversation=turn.conversation,
            source=turn.source,
            messages=messages,
            tools=tools,
        )
    )
    try:
        return await asyncio.shield(reserving)
    except asyncio.CancelledError:
        reserving.add_done_callback(_let_go)
        raise


def _let_go(reserving: asyncio.Future[CallBudget]) -> None:
    """Release a reservation made for a call stopped before it began (it spent nothing)."""
    if not reserving.cancelled() and reserving.exception() is None:
        keep(asyncio.ensure_future(reserving.result().asettle("")))
