"""Signals a host project can hook; the app sends each from the one place its event happens."""

from __future__ import annotations

import logging
from typing import Any

from django.dispatch import Signal

logger = logging.getLogger("assistant.signals")

# After every audit row is written (every dispatch decision, confirmations and refusals
# included): sender=AuditEntry, entry=<AuditEntry>, outcome=<Outcome>.
tool_called = Signal()

# After a pending action leaves "pending" (confirmed, cancelled or expired), once per action:
# sender=PendingAction, action=<PendingAction>, status=<str>, user=<the decider or None>.
action_decided = Signal()

# After a turn's reply is stored (complete, cancelled or failed; interrupted when the reaper
# closes a dead process's turn): sender=Message,
# message=<the stored reply>, conversation=<Conversation>, status=<str>, user=<the asker>.
turn_finished = Signal()


def send(signal: Signal, sender: Any, **named: Any) -> None:
    """Send ``signal`` so that a receiver that raises is logged and never breaks the caller."""
    for receiver, result in signal.send_robust(sender, **named):
        if isinstance(result, Exception):
            logger.error("Receiver %r of an assistant signal failed", receiver, exc_info=result)


async def asend(signal: Signal, sender: Any, **named: Any) -> None:
    """``send`` from async code (sync receivers run in a thread, as Django's ``asend`` does)."""
    for receiver, result in await signal.asend_robust(sender, **named):
        if isinstance(result, Exception):
            logger.error("Receiver %r of an assistant signal failed", receiver, exc_info=result)
