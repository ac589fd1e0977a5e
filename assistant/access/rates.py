"""How often a user may start turns: ``ASSISTANT["THROTTLE_RATE"]``, counted in Django's cache.

A transport hands its turns a ``TurnRate`` as data; the turn's first sync step asks it, before
anything is stored. It counts as DRF's ``UserRateThrottle`` does (the REST API's throttle),
under a scope of its own, so a transport's turns are counted apart from REST requests.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from django.core.cache import cache

from ..conf import assistant_settings
from ..exceptions import Throttled

PERIODS = {"s": 1, "m": 60, "h": 3600, "d": 86400}  # a rate's period, by its first letter


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnRate:
    """The turn rate of one transport's users, counted under ``scope``."""

    scope: str

    def admit(self, user: Any) -> None:
        """Count one turn of ``user``'s, or raise ``Throttled`` (saying when to retry)."""
        rate = assistant_settings.THROTTLE_RATE
        if rate is None:
            return
        allowed, period = _parsed(rate)
        key = f"throttle_{self.scope}_{user.pk}"
        now = time.time()
        history: list[float] = [t for t in cache.get(key, []) if t > now - period]
        if len(history) >= allowed:
            raise Throttled(_wait(history, now, allowed, period))
        cache.set(key, [now, *history], period)


def _parsed(rate: str) -> tuple[int, int]:
    """``"120/min"`` as (120, 60): how many turns, in how many seconds."""
    count, period = rate.split("/")
    return int(count), PERIODS[period[0]]


def _wait(history: list[float], now: float, allowed: int, period: int) -> float | None:
    """Seconds until the next turn would be let through, spread over the turns left."""
    remaining = period - (now - history[-1]) if history else period
    available = allowed - len(history) + 1
    return None if available <= 0 else remaining / available
