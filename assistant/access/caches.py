"""Access snapshots kept fresh: cached on the user object, shared between a user's objects in a
process, read again once permissions, groups or users change."""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from dataclasses import replace
from typing import Any

from asgiref.sync import sync_to_async

from ..conf import assistant_settings
from ..core.compiled import rows_for
from .predicate import ACCESS_ATTRIBUTE, UserAccess, _load_access

RELOAD_ATTRIBUTE = "_assistant_reload_user"
STAMP_ATTRIBUTE = "_assistant_read"  # (generation, monotonic time) the user's access was read at
USER_FLAGS = ("is_active", "is_superuser", "is_staff")


def access_for(user: Any) -> UserAccess:
    """The user's access snapshot, cached on the user object like Django's own permission cache.

    A user object marked stale (``refresh_access``) first reads its flags again, under a lock
    of its own: two turns of one socket never build a snapshot from flags the other is
    replacing.
    """
    if not getattr(user, RELOAD_ATTRIBUTE, False):
        return getattr(user, ACCESS_ATTRIBUTE, None) or _load_access(user)
    with _reload_lock(user):
        reload = getattr(user, RELOAD_ATTRIBUTE, False)
        if reload:  # (not done by the other turn meanwhile)
            # The mark goes once the new reading is in place: a turn checking meanwhile waits
            # for this lock rather than take the stale snapshot.
            if not (reload is SHARED and _adopt(user)):
                stamp = (access_generation(), time.monotonic())  # before reading: conservative
                _reload_flags(user)
                forget_access(user)
                setattr(user, STAMP_ATTRIBUTE, stamp)
                _share(user, stamp, _load_access(user))
            with contextlib.suppress(AttributeError):
                delattr(user, RELOAD_ATTRIBUTE)
        return getattr(user, ACCESS_ATTRIBUTE, None) or _load_access(user)


# A process shares what it read of a user between that user's objects (their sockets, a page
# reloaded): a reading as fresh as ``refresh_access`` would trust, of the same flags, read while
# permission news reached this process, serves another object's first check with no query.
SHARED = "shared"  # RELOAD_ATTRIBUTE's value when a shared reading will do
SHARED_MAX = 10_000  # users whose readings are kept; the oldest go first
_shared: dict[Any, tuple[tuple[int, float], tuple[Any, ...], UserAccess]] = {}
_news_since: float | None = None  # since when permission news reaches this process
_shared_lock = threading.Lock()


def hearing_news(listening: bool = True) -> None:
    """A control channel began to listen (or could not): readings from before are shared no
    more (nor any, while none listens)."""
    global _news_since
    with _shared_lock:
        _news_since = time.monotonic() if listening else None
        _shared.clear()


def _shared_key(user: Any) -> tuple[Any, str]:
    # (the username too: a key a deleted user's reading could pass to a new one is unlikely)
    return (user.pk, user.get_username())


def _flags(user: Any) -> tuple[Any, ...]:
    return tuple(getattr(user, flag, None) for flag in USER_FLAGS)


def _share(user: Any, stamp: tuple[int, float], access: UserAccess) -> None:
    if not access.authenticated:
        return
    with _shared_lock:  # (``hearing_news`` clears under it: what is kept was read while news came)
        if _news_since is None or stamp[1] < _news_since:
            return
        key = _shared_key(user)
        _shared.pop(key, None)
        _shared[key] = (stamp, _flags(user), access)
        while len(_shared) > SHARED_MAX:
            _shared.pop(next(iter(_shared)), None)


def _adopt(user: Any) -> bool:
    """Take another object's fresh reading of this user, if there is one and it still holds."""
    entry = _shared.get(_shared_key(user))
    if entry is None:
        return False
    stamp, flags, origin = entry
    generation, read_at = stamp
    fresh = generation == access_generation() and (
        time.monotonic() - read_at < assistant_settings.ACCESS_MAX_AGE
    )
    # flags this object read since (say, a deactivation that sent no signal) win: read again
    if not fresh or flags != _flags(user):
        return False
    forget_access(user)
    setattr(user, STAMP_ATTRIBUTE, stamp)
    setattr(user, ACCESS_ATTRIBUTE, replace(origin, user=user, _origin=origin))
    return True


def cached_access(user: Any) -> UserAccess | None:
    """The user's snapshot if one is loaded and still trusted (no query), else None."""
    if getattr(user, RELOAD_ATTRIBUTE, False):
        return None
    access: UserAccess | None = getattr(user, ACCESS_ATTRIBUTE, None)
    return access


async def aaccess_for(user: Any) -> UserAccess:
    access = cached_access(user)
    if access is not None:
        return access
    return await sync_to_async(access_for)(user)


def forget_access(user: Any) -> None:
    """Drop the cached snapshot (and Django's) so the next check reads the database again."""
    for attribute in (ACCESS_ATTRIBUTE, "_perm_cache", "_user_perm_cache", "_group_perm_cache"):
        with contextlib.suppress(AttributeError):
            delattr(user, attribute)


def refresh_access(user: Any) -> None:
    """For a user object that outlives a request (a websocket's): reload what may have changed.

    What was read is kept while it is fresh: no permission, group or user changed since (in
    this process, or in any process reached through the channel layer) and it was read less
    than ``ASSISTANT["ACCESS_MAX_AGE"]`` seconds ago. Otherwise the next check reads the user's
    flags and permissions again. A user object with no such record (a request's) is left as
    it is. Only marks: the reading happens in ``access_for``, on the thread that checks.
    """
    stamp = getattr(user, STAMP_ATTRIBUTE, None)
    if stamp is None:
        return
    generation, read_at = stamp
    max_age = assistant_settings.ACCESS_MAX_AGE
    if generation == access_generation() and time.monotonic() - read_at < max_age:
        return
    if getattr(user, RELOAD_ATTRIBUTE, False) is not True:  # (a reading afresh stays one)
        setattr(user, RELOAD_ATTRIBUTE, SHARED)


def reread_access(user: Any, *, shared: bool = False) -> None:
    """Make the next check read this user's flags and permissions again, fresh or not.

    ``shared``: a fresh reading another object of the user's made in this process will do
    (a new socket's user, read before it listened for permission news).
    """
    if user is not None and getattr(user, "pk", None) is not None:
        setattr(user, RELOAD_ATTRIBUTE, SHARED if shared else True)


_locks_guard = threading.Lock()
_locks: weakref.WeakKeyDictionary[Any, threading.Lock] = weakref.WeakKeyDictionary()


def _reload_lock(user: Any) -> threading.Lock:
    target = getattr(user, "_wrapped", user)  # one lock per user object, lazy or not
    with _locks_guard:
        lock = _locks.get(target)
        if lock is None:
            lock = _locks[target] = threading.Lock()
        return lock


def _reload_flags(user: Any) -> None:
    """Read the user's flags again (a deleted user counts as inactive, and not staff)."""
    model = user._meta.model
    concrete = {f.attname for f in model._meta.concrete_fields}
    flags = [flag for flag in USER_FLAGS if flag in concrete]
    if not flags:
        return
    rows = rows_for(
        "assistant.flags",
        user,
        lambda row: model._default_manager.filter(pk=row.pk).values_list(*flags)[:1],
    )
    for flag, value in zip(flags, rows[0] if rows else [False] * len(flags), strict=True):
        setattr(user, flag, value)


_generation = 0
_credential_generation = 0


def access_generation() -> int:
    """Bumped whenever permissions, groups or users change: every snapshot older is stale."""
    return _generation


def credential_generation() -> int:
    """Bumped whenever users, sessions or tokens change: every credential found holding before
    is read again (``Credential.known_to_hold``)."""
    return _credential_generation


def credentials_changed() -> None:
    """Make every credential found holding in this process stale (a session ended, a token
    revoked), not the access snapshots."""
    global _credential_generation
    _credential_generation += 1


def access_changed() -> None:
    """Make every access snapshot in this process stale (the next reading reloads), and every
    credential found holding (a user's flags or password changed)."""
    global _generation
    _generation += 1
    credentials_changed()
    with _shared_lock:
        _shared.clear()
