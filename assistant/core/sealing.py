"""A waiting action's secrets at rest: Fernet under a key derived from ``SECRET_KEY``.

Read back under ``SECRET_KEY`` or any of ``SECRET_KEY_FALLBACKS`` (a rotation keeps waiting
actions runnable while the old key stays a fallback); a token names what it was sealed for, so
it cannot be moved to another row.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.utils.crypto import salted_hmac

from ..exceptions import SecretUnreadable

PURPOSE = "assistant.sealing.pending-action-secrets"  # this key serves nothing else


def seal(values: dict[str, Any], *, bound_to: str) -> str:
    """The values encrypted (and authenticated) for ``bound_to``, under the current key."""
    plain = json.dumps({"for": bound_to, "values": values}, cls=DjangoJSONEncoder)
    return _keys().encrypt(plain.encode()).decode()


def unseal(token: str, *, bound_to: str) -> dict[str, Any]:
    """The values ``seal`` encrypted for ``bound_to``; ``SecretUnreadable`` if no key reads them."""
    try:
        sealed = json.loads(_keys().decrypt(token.encode()))
    except (InvalidToken, ValueError):
        raise SecretUnreadable() from None
    if not isinstance(sealed, dict) or sealed.get("for") != bound_to:
        raise SecretUnreadable()
    values: dict[str, Any] = sealed["values"]
    return values


def _keys() -> MultiFernet:
    secrets = [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", [])]
    return MultiFernet([Fernet(_derived(secret)) for secret in secrets])


def _derived(secret: str | bytes) -> bytes:
    digest = salted_hmac(PURPOSE, "fernet", secret=secret, algorithm="sha256").digest()
    return base64.urlsafe_b64encode(digest)
