"""OAuth 2.1 for machine clients, when django-oauth-toolkit is installed: this site as a resource server.

Tokens issued by django-oauth-toolkit are accepted as bearer tokens only when bound to this
resource (RFC 8707); their scopes are a ceiling. Without the toolkit, nothing here is used.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from django.apps import apps


class Grant(NamedTuple):
    """What a valid OAuth access token grants: whose it is, to which client, with which scopes."""

    user: Any
    client_name: str
    token_id: Any
    scopes: frozenset[str]


def enabled() -> bool:
    return apps.is_installed("oauth2_provider")


def grant_for(key: str, *, resource: str | None = None) -> Grant | None:
    """What an OAuth access token grants here (None: not a valid OAuth token for ``resource``)."""
    return None


def resource_of(request: Any) -> str:
    """This endpoint's resource identifier (RFC 8707): its absolute URL."""
    return request.build_absolute_uri(request.path)


def challenge(request: Any, *, error: str = "") -> str:
    """The ``WWW-Authenticate`` value a 401 from a bearer endpoint carries."""
    value = 'Bearer realm="assistant"'
    if error:
        value += f', error="{error}"'
    return value
