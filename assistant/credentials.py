"""The credential a run acts under, confirmed again before each of its steps.

A transport names what signed its request in (a bearer token, a browser session); a turn keeps
it and, before each model call and each tool call, asks whether it still holds: the token not
revoked, expired or deleted; the session still stored, still signing this user in, and its auth
hash still the user's (as Django's ``get_user`` checks on every request); the user still active.
Each answer is one indexed SELECT (a session kept outside the database is read from its store).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import import_module
from typing import Any, Literal

from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.contrib.sessions.backends.db import SessionStore as DatabaseSessionStore
from django.core.exceptions import ValidationError
from django.db.models import Subquery
from django.utils import timezone
from django.utils.crypto import constant_time_compare

from .exceptions import AccountInactive, CredentialLapsed
from .tokens import Bearer

Kind = Literal["personal", "drf", "oauth", "local", "session"]
SESSION_DATA = "_assistant_session_data"  # the annotation carrying the session row's data
LAPSES = {
    "token_revoked": "This token was revoked while the run went on; nothing more runs under it.",
    "token_expired": "This token expired while the run went on; nothing more runs under it.",
    "session_ended": (
        "Your session has ended (signed out, password changed, or ended by an administrator); "
        "nothing more runs under it. Sign in again."
    ),
    "account_inactive": AccountInactive().message,
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
        """Why the credential no longer holds, or None while it does (one query)."""
        if self.kind == "session":
            return _session_lapse(self)
        if self.kind == "personal":
            from .models import AccessToken

            rows = AccessToken.objects.filter(pk=self.token_id, user_id=self.user_id)
            row = rows.values_list("revoked_at", "expires_at", *_active("user")).first()
            if row is None or row[0] is not None:
                return lapsed("token_revoked")  # (deleted, or revoked)
            if row[1] is not None and row[1] <= timezone.now():
                return lapsed("token_expired")
            return _inactive(row[2:])
        if self.kind == "oauth":
            from oauth2_provider.models import get_access_token_model

            grants = get_access_token_model().objects.filter(pk=self.token_id, user_id=self.user_id)
            row = grants.values_list("expires", *_active("user")).first()
            if row is None:
                return lapsed("token_revoked")  # (django-oauth-toolkit deletes what it revokes)
            if row[0] <= timezone.now():
                return lapsed("token_expired")
            return _inactive(row[1:])
        if self.kind == "drf":
            from rest_framework.authtoken.models import Token

            keys = Token.objects.filter(key=self.key, user_id=self.user_id)
            row = keys.values_list("pk", *_active("user")).first()
            return lapsed("token_revoked") if row is None else _inactive(row[1:])
        users = get_user_model()._default_manager.filter(pk=self.user_id)  # stdio's own user
        row = users.values_list("pk", *_active()).first()
        return lapsed("account_inactive") if row is None else _inactive(row[1:])


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
    if store_class is DatabaseSessionStore or (
        issubclass(store_class, DatabaseSessionStore) and "load" not in vars(store_class)
    ):
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
