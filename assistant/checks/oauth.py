"""django-oauth-toolkit, when installed, set up as MCP clients need it (E015, E016, W011, W012)."""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.core.checks import CheckMessage, Error, Warning, register

from ..access.oauth import SCOPES


@register("assistant")
def check_oauth(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """assistant.E015/E016/W011/W012: django-oauth-toolkit, when installed, as MCP clients need it."""
    if not apps.is_installed("oauth2_provider"):
        return []
    from oauth2_provider.scopes import get_scopes_backend
    from oauth2_provider.settings import oauth2_settings

    return oauth_problems(oauth2_settings, set(get_scopes_backend().get_all_scopes()))


def oauth_problems(oauth2_settings: Any, available_scopes: set[str]) -> list[CheckMessage]:
    problems: list[CheckMessage] = []
    if oauth2_settings.PKCE_REQUIRED is False:  # a callable decides per client: not judged here
        problems.append(
            Error(
                "OAUTH2_PROVIDER['PKCE_REQUIRED'] is False: MCP clients sign in with OAuth 2.1, "
                "which requires PKCE.",
                hint="Remove PKCE_REQUIRED from OAUTH2_PROVIDER (its default is True).",
                id="assistant.E015",
            )
        )
    missing = [scope for scope in SCOPES if scope not in available_scopes]
    if missing:
        problems.append(
            Error(
                f"django-oauth-toolkit offers none of the assistant's scopes {missing}: no client "
                "can ask for them, so no OAuth token reaches the MCP endpoint.",
                hint="Add them to OAUTH2_PROVIDER['SCOPES']: "
                + ", ".join(f"{scope!r}: {text!r}" for scope, text in SCOPES.items())
                + ".",
                id="assistant.E016",
            )
        )
    if not (
        oauth2_settings.ROTATE_REFRESH_TOKEN and oauth2_settings.REFRESH_TOKEN_REUSE_PROTECTION
    ):
        problems.append(
            Warning(
                "A refresh token used twice does not end its sign-in: MCP clients register as "
                "public clients, so whoever copies one keeps a working token (OAuth 2.1, "
                "RFC 9700 4.14.2: rotate refresh tokens and revoke the family on reuse).",
                hint="Set OAUTH2_PROVIDER['REFRESH_TOKEN_REUSE_PROTECTION'] = True (and leave "
                "ROTATE_REFRESH_TOKEN at its default, True).",
                id="assistant.W012",
            )
        )
    problems.extend(_metadata_warnings(oauth2_settings))
    return problems


def _metadata_warnings(oauth2_settings: Any) -> list[CheckMessage]:
    """assistant.W011: MCP clients cannot find this site's authorization-server metadata."""
    from django.urls import NoReverseMatch, Resolver404, resolve, reverse

    well_known = "/.well-known/oauth-authorization-server"
    if oauth2_settings.OAUTH2_PROTECTED_RESOURCE_AUTHORIZATION_SERVERS or (
        oauth2_settings.OIDC_ISS_ENDPOINT
    ):
        return []  # the issuer is named outright; where its metadata lives is its own business
    try:
        path = reverse("oauth2_provider:oauth-server-metadata")
    except NoReverseMatch:
        return [
            Warning(
                "django-oauth-toolkit is installed but its URLs are not: MCP clients have no "
                "authorization server to sign in with.",
                hint='Add path("o/", include("oauth2_provider.urls", namespace="oauth2_provider")) '
                "to your ROOT_URLCONF (see OAuth 2.1 in docs/howto/mcp-clients.md).",
                id="assistant.W011",
            )
        ]
    issuer_path = path.removesuffix(well_known)
    if not issuer_path or issuer_path == path:
        return []
    try:
        resolve(f"{well_known}{issuer_path}")
    except Resolver404:
        return [
            Warning(
                f"The authorization server's metadata is at {path}, but MCP clients look for it "
                f"at {well_known}{issuer_path} (RFC 8414's form for the issuer {issuer_path}).",
                hint=f'Add path("{well_known[1:]}/<path:issuer_path>", '
                "oauth2_provider.views.OAuthServerMetadataView.as_view()) to your ROOT_URLCONF.",
                id="assistant.W011",
            )
        ]
    return []
