"""OAuth 2.1 for machine clients, when django-oauth-toolkit is installed: this site as a resource server.

Tokens issued by django-oauth-toolkit are accepted as bearer tokens only when bound to this
resource (RFC 8707; a token that names no resource is refused, though the toolkit itself treats
one as valid everywhere); their scopes are a ceiling (``SCOPES``). The MCP endpoint's 401 points
clients at its protected-resource metadata (RFC 9728), which names the toolkit as the
authorization server. Without the toolkit, nothing here is used.
"""

from __future__ import annotations

import hashlib
from typing import Any, NamedTuple

from django.apps import apps
from django.urls import NoReverseMatch, reverse
from django.utils.translation import gettext

from ..core.declaration import RiskLevel
from ..exceptions import InvalidToken

# The scopes a client may ask for, widest first, and the riskiest tool each reaches (the user's
# own permissions still apply below that): ``assistant`` is everything the user may.
SCOPES: dict[str, str] = {
    "assistant": "Use every assistant tool your account may use",
    "assistant:write": "Use the assistant's safe and guarded tools, never a dangerous one",
    "assistant:read": "Use the assistant's read-only (safe) tools",
}
SCOPE_RISK: dict[str, RiskLevel] = {
    "assistant": RiskLevel.DANGEROUS,
    "assistant:write": RiskLevel.GUARDED,
    "assistant:read": RiskLevel.SAFE,
}
# What the 401 asks a client to request (an MCP client takes the challenge's scope first).
CHALLENGE_SCOPE = "assistant"


class Grant(NamedTuple):
    """What a valid OAuth access token grants: whose it is, to which client, with which scopes."""

    user: Any
    client_name: str
    token_id: Any
    scopes: frozenset[str]


def enabled() -> bool:
    return apps.is_installed("oauth2_provider")


def grant_for(key: str, *, resource: str | None = None) -> Grant | None:
    """What an OAuth access token grants here (None: no such token, or no ``resource`` to bind to).

    Raises ``InvalidToken`` for a token that has expired (``token_expired``) or is not bound to
    ``resource`` (``token_resource``: bound elsewhere, or to no resource at all).
    """
    if not enabled() or not resource:
        return None
    from oauth2_provider.models import get_access_token_model

    checksum = hashlib.sha256(key.encode("utf-8")).hexdigest()
    token = (
        get_access_token_model()
        .objects.select_related("application", "user")
        .filter(token_checksum=checksum)
        .first()
    )
    if token is None or token.user is None:  # a client-credentials token acts for nobody
        return None
    if token.is_expired():
        raise InvalidToken(gettext("This token has expired."), code="token_expired")
    if not token.resource or not token.allows_audience(resource):
        raise InvalidToken(
            gettext(
                "This token is not bound to %(resource)s: ask for one with "
                "resource=%(resource)s (RFC 8707)."
            )
            % {"resource": resource},
            code="token_resource",
        )
    application = token.application
    return Grant(
        user=token.user,
        client_name=(application.name or application.client_id) if application else "OAuth client",
        token_id=token.pk,
        scopes=frozenset(token.scope.split()),
    )


def resource_of(request: Any) -> str:
    """This endpoint's resource identifier (RFC 8707): its absolute URL."""
    return request.build_absolute_uri(request.path)


def metadata_url(request: Any) -> str | None:
    """The absolute URL of the MCP endpoint's protected-resource metadata (None: not mounted)."""
    try:
        return request.build_absolute_uri(reverse("assistant:mcp-resource-metadata"))
    except NoReverseMatch:
        return None


def metadata(request: Any) -> dict[str, Any]:
    """The MCP endpoint's protected-resource metadata (RFC 9728), naming the toolkit as its issuer."""
    from oauth2_provider.settings import oauth2_settings

    document: dict[str, Any] = {"resource": request.build_absolute_uri(reverse("assistant:mcp"))}
    servers = oauth2_settings.oauth2_resource_authorization_servers(request)
    if servers:
        document["authorization_servers"] = servers
    document["scopes_supported"] = list(SCOPES)
    document["bearer_methods_supported"] = ["header"]
    document["resource_name"] = "django-ops-assistant (MCP)"
    return document


def challenge(request: Any, *, error: str = "") -> str:
    """The ``WWW-Authenticate`` value a 401 from a bearer endpoint carries."""
    value = 'Bearer realm="assistant"'
    if error:
        value += f', error="{error}"'
    if enabled():
        url = metadata_url(request)
        if url:
            value += f', resource_metadata="{url}"'
        value += f', scope="{CHALLENGE_SCOPE}"'
    return value
