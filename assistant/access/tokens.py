"""Bearer credentials for machine clients: personal access tokens, DRF tokens, and their ceilings.

``authenticate_bearer`` is the one place a bearer key becomes a user, for every surface that
takes one (MCP, the API): a personal access token (``dop_…``, stored hashed), or the key of a
``rest_framework.authtoken`` token when that app is installed, or a django-oauth-toolkit access
token bound to the endpoint (``oauth``; its scopes are its ceiling). A token's ceiling narrows what
it may do below its user's permissions; dispatch and the catalog apply it (``CallContext.ceiling``).
"""

from __future__ import annotations

import secrets
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from asgiref.sync import sync_to_async
from django.apps import apps
from django.utils import timezone
from django.utils.translation import gettext

from ..core.declaration import AssistantTool, RiskLevel
from ..exceptions import AccountInactive, InvalidToken, OutsideTokenScope
from ..models import AccessToken
from . import oauth
from .oauth import SCOPE_RISK

RISK_ORDER = {RiskLevel.SAFE: 0, RiskLevel.GUARDED: 1, RiskLevel.DANGEROUS: 2}
# last_used_at is written at most this often per token (not one UPDATE per request)
LAST_USED_RESOLUTION = timedelta(minutes=1)


@dataclass(frozen=True, kw_only=True, slots=True)
class Ceiling:
    """What a token may reach at most: tools up to a risk level, and/or only some operations."""

    max_risk: RiskLevel | None = None
    operations: frozenset[str] | None = None

    def allows(self, tool: AssistantTool) -> bool:
        if self.max_risk is not None and RISK_ORDER[tool.risk_level] > RISK_ORDER[self.max_risk]:
            return False
        return self.operations is None or tool.operation in self.operations

    def refusal(self, tool: AssistantTool) -> OutsideTokenScope:
        return OutsideTokenScope(
            gettext("This token does not allow %(operation)s.") % {"operation": tool.operation}
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class Bearer:
    """Who a bearer key signs in, through which kind of token, under which ceiling."""

    user: Any
    kind: Literal["personal", "drf", "oauth", "local"]
    name: str  # the audit's client column: a personal token's name, "DRF token", an OAuth client's
    ceiling: Ceiling | None = None
    token_id: Any = None  # a personal token's or an OAuth access token's primary key
    scopes: frozenset[str] = frozenset()
    key: str = field(default="", repr=False, compare=False)  # a DRF token's (its primary key)


def issue(
    user: Any,
    *,
    name: str,
    expires_at: datetime | None = None,
    max_risk: str = "",
    operations: Collection[str] = (),
) -> tuple[Any, str]:
    """Create a personal access token; returns the row and the secret (shown once, never stored)."""
    secret = AccessToken.PREFIX + secrets.token_urlsafe(32)
    token = AccessToken.objects.create(
        user=user,
        name=name,
        key_prefix=secret[: len(AccessToken.PREFIX) + 6],
        digest=AccessToken.digest_of(secret),
        expires_at=expires_at,
        max_risk=max_risk,
        operations=sorted(set(operations)),
    )
    return token, secret


def ceiling_of(token: Any) -> Ceiling | None:
    """A personal token's ceiling (None when it has none)."""
    if not token.max_risk and not token.operations:
        return None
    return Ceiling(
        max_risk=RiskLevel(token.max_risk) if token.max_risk else None,
        operations=frozenset(token.operations) if token.operations else None,
    )


def scope_ceiling(scopes: frozenset[str]) -> Ceiling | None:
    """An OAuth token's scopes as a ceiling: the widest of ``oauth.SCOPES`` it holds (None: all)."""
    reached = [SCOPE_RISK[scope] for scope in scopes if scope in SCOPE_RISK]
    if not reached:
        return Ceiling(operations=frozenset())  # none of ours: nothing (authenticate refuses it)
    widest = max(reached, key=RISK_ORDER.__getitem__)
    return None if widest is RiskLevel.DANGEROUS else Ceiling(max_risk=widest)


def authenticate_bearer(key: str, *, resource: str | None = None) -> Bearer:
    """The user a bearer key signs in; raises ``InvalidToken`` (401) or ``AccountInactive``.

    ``resource`` is the endpoint's own URL: an OAuth token must be bound to it (RFC 8707), and
    without one OAuth tokens are not accepted at all.
    """
    key = key.strip()
    if not key or len(key) > 512 or not key.isprintable():
        raise InvalidToken(gettext("A bearer token is required."))
    if key.startswith(AccessToken.PREFIX):
        return _personal(key)
    if apps.is_installed("rest_framework.authtoken"):
        from rest_framework.authtoken.models import Token

        drf = Token.objects.select_related("user").filter(key=key).first()
        if drf is not None:
            _check_active(drf.user)
            return Bearer(user=drf.user, kind="drf", name="DRF token", key=drf.key)
    if oauth.enabled():
        grant = oauth.grant_for(key, resource=resource)
        if grant is not None:
            _check_active(grant.user)
            if not grant.scopes & oauth.SCOPES.keys():
                raise InvalidToken(
                    gettext("This token grants none of the assistant's scopes (%(scopes)s).")
                    % {"scopes": ", ".join(oauth.SCOPES)},
                    code="token_scope",
                )
            return Bearer(
                user=grant.user,
                kind="oauth",
                name=grant.client_name,
                ceiling=scope_ceiling(grant.scopes),
                token_id=grant.token_id,
                scopes=grant.scopes,
            )
    raise InvalidToken(gettext("This token is not valid."))


async def aauthenticate_bearer(key: str, *, resource: str | None = None) -> Bearer:
    return await sync_to_async(authenticate_bearer)(key, resource=resource)


def _personal(key: str) -> Bearer:
    token = (
        AccessToken.objects.select_related("user").filter(digest=AccessToken.digest_of(key)).first()
    )
    if token is None:
        raise InvalidToken(gettext("This token is not valid."))
    if token.revoked_at is not None:
        raise InvalidToken(gettext("This token was revoked."), code="token_revoked")
    if token.is_expired:
        raise InvalidToken(gettext("This token has expired."), code="token_expired")
    _check_active(token.user)
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at >= LAST_USED_RESOLUTION:
        AccessToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return Bearer(
        user=token.user,
        kind="personal",
        name=token.name,
        ceiling=ceiling_of(token),
        token_id=token.pk,
    )


def still_holds(bearer: Bearer) -> bool:
    """Whether a credential that signed a request in still does (not revoked, expired or
    deleted, its user still active): for a request that stays open, a job's wait."""
    user = bearer.user
    if not type(user)._default_manager.filter(pk=user.pk, is_active=True).exists():
        return False
    if bearer.kind == "personal":
        return AccessToken.objects.usable().filter(pk=bearer.token_id).exists()
    if bearer.kind == "drf":
        from rest_framework.authtoken.models import Token

        return Token.objects.filter(user_id=user.pk).exists()
    if bearer.kind == "oauth":
        from oauth2_provider.models import get_access_token_model

        return (
            get_access_token_model()
            .objects.filter(pk=bearer.token_id, expires__gt=timezone.now())
            .exists()
        )
    return True  # (stdio's local user: no token)


def _check_active(user: Any) -> None:
    if not user.is_active:
        raise AccountInactive()
