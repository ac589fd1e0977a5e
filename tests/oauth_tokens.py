"""OAuth access tokens as django-oauth-toolkit stores them (needs the [oauth] extra)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone
from oauth2_provider.models import get_access_token_model, get_application_model

Application = get_application_model()
AccessToken = get_access_token_model()
REDIRECT_URI = "http://localhost:3030/callback"  # never requested: the test takes the code itself


def issue_token(user: Any, *, resource: list[str], scope: str = "assistant", **fields: Any) -> str:
    """An access token as django-oauth-toolkit stores one (the flow's result, without the flow)."""
    application = Application.objects.create(
        name="Prepared client",
        client_type=Application.CLIENT_PUBLIC,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
        redirect_uris=REDIRECT_URI,
    )
    key = f"oauth-test-{user.pk}-{AccessToken.objects.count()}-{scope}"
    AccessToken.objects.create(
        user=user,
        application=application,
        token=key,
        scope=scope,
        resource=resource,
        expires=fields.pop("expires", timezone.now() + timedelta(hours=1)),
        **fields,
    )
    return key
