"""Failed sign-ins counted per account and per client address in Django's cache, and the locks they set."""

from __future__ import annotations

import hashlib
import logging
import math
import time

from django.core.cache import cache
from django.utils.translation import ngettext

from ..conf import assistant_settings

logger = logging.getLogger("assistant.signin")

PREFIX = "assistant:signin"


def _counters(username: str, address: str) -> list[tuple[str, int | None, str]]:
    """Each counter an attempt adds to: its key, its limit (None: not counted), what it names."""
    # The typed name, case-folded and hashed: a name that exists and one that does not are
    # counted, locked and answered alike, and no username is kept in the cache.
    account = hashlib.sha256(username.strip().casefold().encode()).hexdigest()
    return [
        (f"{PREFIX}:account:{account}", assistant_settings.LOGIN_FAILURES_PER_ACCOUNT, "account"),
        (f"{PREFIX}:address:{address}", assistant_settings.LOGIN_FAILURES_PER_ADDRESS, "address"),
    ]


def locked_for(username: str, address: str) -> float:
    """Seconds until this account and address may try a password again (0: now)."""
    now = time.time()
    locks = cache.get_many(
        [f"{key}:lock" for key, limit, _ in _counters(username, address) if limit]
    )
    return max([until - now for until in locks.values() if until > now], default=0.0)


def failed(username: str, address: str) -> float:
    """Count a wrong password; seconds of the lock it set (0: none yet)."""
    lockout = assistant_settings.LOGIN_LOCKOUT
    # failures are counted over a window as long as the lock; the lock itself keeps its end
    # in its value, so it ends on time whatever whole seconds a cache backend keeps keys for
    window = math.ceil(lockout) + 1
    locked = 0.0
    for key, limit, kind in _counters(username, address):
        if not limit:
            continue
        cache.add(key, 0, window)
        try:
            count = cache.incr(key)
        except ValueError:  # expired between the two calls
            cache.set(key, count := 1, window)
        if count >= limit:
            cache.set(f"{key}:lock", time.time() + lockout, window)
            cache.delete(key)
            locked = lockout
            logger.warning(
                "Sign-in locked for %s s after %s failures by %s (username %r, address %s)",
                lockout,
                count,
                kind,
                username[:150],
                address,
            )
    return locked


def succeeded(username: str) -> None:
    """Forget the account's failures (the address's stay: one's own account resets nothing else)."""
    key, _, _ = _counters(username, "")[0]
    cache.delete(key)


def locked_message(minutes: int) -> str:
    """What a locked sign-in page says (the same whoever typed which name)."""
    return ngettext(
        "Too many failed sign-in attempts. Try again in %(minutes)s minute.",
        "Too many failed sign-in attempts. Try again in %(minutes)s minutes.",
        minutes,
    ) % {"minutes": minutes}
