"""The credential a run acts under, confirmed again before each of its steps.

A transport names what signed its request in (a bearer token, a browser session); a turn keeps
it and, before each model call and each tool call, asks whether it still holds: the token not
revoked, expired or deleted; the session still stored, still signing this user in, and its auth
hash still the user's (as Django's ``get_user`` checks on every request); the user still active.
Each answer is one indexed SELECT (a session kept outside the database is read from its store).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC
from importlib import import_module
from typing import Any, Literal

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.contrib.sessions.backends.db import SessionStore as DatabaseSessionStore
from django.core.exceptions import ValidationError
from django.db import connections, router
from django.db.models import Subquery
from django.utils import timezone
from django.utils.crypto import constant_time_compare
from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _

from ..conf import assistant_settings
from ..exceptions import CredentialLapsed
from ..models import AccessToken
from .caches import credential_generation
from .tokens import Bearer

logger = logging.getLogger("assistant.credentials")

Kind = Literal["personal", "drf", "oauth", "local", "session"]
WATCH_SECONDS = 1.0  # how often a run confirms its credential while one step runs long
HELD_MAX = 10_000  # credentials remembered holding, at most (then forgotten all at once)
SESSION_DATA = "_assistant_session_data"  # the annotation carrying the session row's data
LAPSES: dict[str, str | Promise] = {
    "token_revoked": _("This token was revoked while the run went on; nothing more runs under it."),
    "token_expired": _("This token expired while the run went on; nothing more runs under it."),
    "session_ended": _(
        "Your session has ended (signed out, password changed, or ended by an administrator); "
        "nothing more runs under it. Sign in again."
    ),
    "account_inactive": _("Your account has been deactivated. Ask an operator to reactivate it."),
}


def lapsed(code: str) -> CredentialLapsed:
    """The error a lapsed credential stops a run with (``code`` one of ``LAPSES``)."""
    return CredentialLapsed(LAPSES[code], code=code)


@dataclass(frozen=True, kw_only=True, slots=True)
class Credential:
    """What signed a run's user in: a bearer token (by id, a DRF token by key) or a session."""

    kind: Kind
    user_id: Any
    token_id: Any = None  # a personal or an OAuth access token's primary key
    key: str = field(default="", repr=False)  # a DRF token's key, or the session's key

    def lapse(self) -> CredentialLapsed | None:
        """Why the credential no longer holds, or None while it does (one query, unless it was
        found holding since the last change anywhere to users, sessions or tokens, less than
        ``ACCESS_MAX_AGE`` seconds ago)."""
        if self.known_to_hold():
            return None
        stamp = (credential_generation(), time.monotonic())  # before reading: conservative
        found = self.read_lapse()
        if found is None:
            if len(_held) >= HELD_MAX:
                _held.clear()
                _until.clear()
            _held[self._identity()] = stamp
        else:
            _held.pop(self._identity(), None)
            _until.pop(self._identity(), None)
        return found

    def known_to_hold(self) -> bool:
        """Whether it was found holding since the last change anywhere to users, sessions or
        tokens (``permissions_changed``, from any process), less than ``ACCESS_MAX_AGE`` ago."""
        stamp = _held.get(self._identity())
        if stamp is None:
            return False
        generation, read_at = stamp
        until = _until.get(self._identity())
        return (
            generation == credential_generation()
            and time.monotonic() - read_at < assistant_settings.ACCESS_MAX_AGE
            and (until is None or until > timezone.now())
        )

    def _identity(self) -> tuple[Any, ...]:
        return (self.kind, self.user_id, self.token_id, self.key)

    def read_lapse(self) -> CredentialLapsed | None:
        """Why the credential no longer holds, or None while it does, read now (one query)."""
        if self.kind == "session":
            return _session_lapse(self)
        if self.kind == "personal":
            rows = AccessToken.objects.filter(pk=self.token_id, user_id=self.user_id)
            row = rows.values_list("revoked_at", "expires_at", *_active("user")).first()
            if row is None or row[0] is not None:
                return lapsed("token_revoked")  # (deleted, or revoked)
            if row[1] is not None and row[1] <= timezone.now():
                return lapsed("token_expired")
            _until[self._identity()] = row[1]
            return _inactive(row[2:])
        if self.kind == "oauth":
            from oauth2_provider.models import get_access_token_model

            grants = get_access_token_model().objects.filter(pk=self.token_id, user_id=self.user_id)
            row = grants.values_list("expires", *_active("user")).first()
            if row is None:
                return lapsed("token_revoked")  # (django-oauth-toolkit deletes what it revokes)
            if row[0] <= timezone.now():
                return lapsed("token_expired")
            _until[self._identity()] = row[0]
            return _inactive(row[1:])
        if self.kind == "drf":
            from rest_framework.authtoken.models import Token

            keys = Token.objects.filter(key=self.key, user_id=self.user_id)
            row = keys.values_list("pk", *_active("user")).first()
            return lapsed("token_revoked") if row is None else _inactive(row[1:])
        users = get_user_model()._default_manager.filter(pk=self.user_id)  # stdio's own user
        row = users.values_list("pk", *_active()).first()
        return lapsed("account_inactive") if row is None else _inactive(row[1:])


def watch(credential: Credential, stop: Callable[[CredentialLapsed], None]) -> Callable[[], None]:
    """Confirm the credential every ``WATCH_SECONDS`` from ``WATCH_SECONDS`` on (a query only
    after news of a change, or ``ACCESS_MAX_AGE``), and call ``stop`` with its lapse once it no
    longer holds; the function returned ends the watch. A run that ends sooner costs one timer,
    not a task (a keyword turn takes a few milliseconds)."""
    watching: list[asyncio.Future[None]] = []

    def start() -> None:
        watching.append(asyncio.ensure_future(_watch(credential, stop)))

    timer = asyncio.get_running_loop().call_later(WATCH_SECONDS, start)

    def end() -> None:
        timer.cancel()
        for task in watching:
            task.cancel()

    return end


async def _watch(credential: Credential, stop: Callable[[CredentialLapsed], None]) -> None:
    while True:
        if credential.known_to_hold():
            await asyncio.sleep(WATCH_SECONDS)
            continue
        try:  # not on the run's own thread, which the long step holds
            lapse = await sync_to_async(_read_apart, thread_sensitive=False)(credential)
        except Exception:  # (the database away, say): each step's own check still stands
            logger.exception("Confirming a running turn's credential failed; trying again")
            await asyncio.sleep(WATCH_SECONDS)
            continue
        if lapse is not None:
            stop(lapse)
            return
        await asyncio.sleep(WATCH_SECONDS)


def _read_apart(credential: Credential) -> CredentialLapsed | None:
    try:
        return credential.lapse()
    finally:
        connections.close_all()  # (a pool thread's: nothing closes it otherwise)


def of_bearer(bearer: Bearer) -> Credential:
    """The credential of a bearer token a request came with."""
    return Credential(
        kind=bearer.kind, user_id=bearer.user.pk, token_id=bearer.token_id, key=bearer.key
    )


def of_session(session: Any, user: Any) -> Credential | None:
    """The credential of a browser session signing ``user`` in (None: it signs nobody in, as a
    test's forced user, or someone else)."""
    key = getattr(session, "session_key", None) if session is not None else None
    if not key or user is None or getattr(user, "pk", None) is None:
        return None
    if _signed_in(session.get(SESSION_KEY)) != user.pk:
        return None
    return Credential(kind="session", user_id=user.pk, key=key)


def _active(relation: str = "") -> tuple[str, ...]:
    """The user's ``is_active`` as a column to read (none for a user model without one)."""
    concrete = {f.attname for f in get_user_model()._meta.concrete_fields}
    if "is_active" not in concrete:
        return ()
    return (f"{relation}__is_active" if relation else "is_active",)


def _inactive(flags: tuple[Any, ...]) -> CredentialLapsed | None:
    return lapsed("account_inactive") if flags and not flags[0] else None


def _signed_in(pk: Any) -> Any:
    """The user id a session holds, as the user model spells it (None: none, or malformed)."""
    if pk is None:
        return None
    try:
        return get_user_model()._meta.pk.to_python(pk)
    except (ValidationError, ValueError, TypeError):
        return None


def _session_lapse(credential: Credential) -> CredentialLapsed | None:
    """A session holds as Django's ``get_user`` would find it: stored, unexpired, signing this
    user in through a configured backend, and carrying the user's current auth hash."""
    store_class = import_module(settings.SESSION_ENGINE).SessionStore
    users = get_user_model()._default_manager.filter(pk=credential.user_id)
    plain = store_class is DatabaseSessionStore or (
        issubclass(store_class, DatabaseSessionStore) and "load" not in vars(store_class)
    )
    if plain and _plain_user(users.model):
        user, data, until = _session_and_user(
            store_class.get_model_class(), users.model, credential
        )
        _until[credential._identity()] = until
        session = store_class().decode(data) if data else {}
    elif plain:
        # the row and the user in one SELECT (a cached_db store answers from its cache first)
        rows = store_class.get_model_class()._default_manager.filter(
            session_key=credential.key, expire_date__gt=timezone.now()
        )
        users = users.annotate(**{SESSION_DATA: Subquery(rows.values("session_data")[:1])})
        user = users.first()
        data = getattr(user, SESSION_DATA, None)
        session = store_class().decode(data) if data else {}
    else:
        session = store_class(session_key=credential.key).load()
        user = users.first() if session else None
    if (
        user is None
        or _signed_in(session.get(SESSION_KEY)) != user.pk
        or session.get(BACKEND_SESSION_KEY) not in settings.AUTHENTICATION_BACKENDS
    ):
        return lapsed("session_ended")
    if not getattr(user, "is_active", True):
        return lapsed("account_inactive")
    if hasattr(user, "get_session_auth_hash"):
        stored = session.get(HASH_SESSION_KEY)
        if not stored or not (
            constant_time_compare(stored, user.get_session_auth_hash())
            or any(
                constant_time_compare(stored, fallback)
                for fallback in user.get_session_auth_fallback_hash()
            )
        ):
            return lapsed("session_ended")
    return None


def _plain_user(model: type[Any]) -> bool:
    """Whether the user model's session hash is Django's own (of its password alone)."""
    from django.contrib.auth.base_user import AbstractBaseUser

    return issubclass(model, AbstractBaseUser) and (
        model.get_session_auth_hash is AbstractBaseUser.get_session_auth_hash
        and model.get_session_auth_fallback_hash is AbstractBaseUser.get_session_auth_fallback_hash
    )


def _session_and_user(
    sessions: type[Any], users: type[Any], credential: Credential
) -> tuple[Any, str | None, Any]:
    """A stand-in user (its id, password and flag: all a session's check reads) and the session's
    data, in one SELECT whose SQL is written once per process and database (building it with the
    ORM cost more than the database spent running it, on every turn)."""
    alias = router.db_for_read(sessions)
    connection = connections[alias]
    sql = _SESSION_SQL.get((alias, sessions, users))
    if sql is None:

        def column(model: type[Any], name: str) -> str:
            return connection.ops.quote_name(model._meta.get_field(name).column)

        active = "is_active" in {f.attname for f in users._meta.concrete_fields}
        sql = _SESSION_SQL[(alias, sessions, users)] = (
            f"SELECT s.{column(sessions, 'session_data')}, s.{column(sessions, 'expire_date')},"
            + f" u.{column(users, 'password')}"
            + (f", u.{column(users, 'is_active')}" if active else "")
            + f" FROM {connection.ops.quote_name(users._meta.db_table)} u"
            + f" LEFT JOIN {connection.ops.quote_name(sessions._meta.db_table)} s"
            + f" ON s.{column(sessions, 'session_key')} = %s"
            + f" AND s.{column(sessions, 'expire_date')} > %s"
            + f" WHERE u.{connection.ops.quote_name(users._meta.pk.column)} = %s"
        )
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    key = users._meta.pk.get_db_prep_value(credential.user_id, connection, prepared=False)
    with connection.cursor() as cursor:
        cursor.execute(sql, [credential.key, now, key])
        row = cursor.fetchone()
    if row is None:
        return None, None, None
    fields = {"pk": credential.user_id, "password": row[2]}
    if len(row) > 3:
        fields["is_active"] = bool(row[3])
    until = sessions._meta.get_field("expire_date").to_python(row[1]) if row[1] else None
    if until is not None and timezone.is_naive(until) and settings.USE_TZ:
        until = timezone.make_aware(until, UTC)
    return users(**fields), row[0], until


_SESSION_SQL: dict[tuple[Any, ...], str] = {}

# Credentials found holding: identity -> (access generation, monotonic time) they were read at.
_held: dict[tuple[Any, ...], tuple[int, float]] = {}
_until: dict[tuple[Any, ...], Any] = {}  # and when they expire, where they do
