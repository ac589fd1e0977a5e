"""HTTP clients for the tests: signed in as a user, REST (APIClient) unless asked otherwise."""

from __future__ import annotations

from typing import Any

from django.test import Client
from rest_framework.test import APIClient


def client_for(user: Any, client_class: type[Client] = APIClient, **options: Any) -> Any:
    """A ``client_class(**options)`` with ``user`` signed in through the session."""
    client = client_class(**options)
    client.force_login(user)
    return client
