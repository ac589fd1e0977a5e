"""How often a user may start turns: the REST API's rate, shared by the websocket."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from rest_framework.throttling import UserRateThrottle

from ..conf import assistant_settings
from ..exceptions import Throttled


class AssistantThrottle(UserRateThrottle):
    """The REST API's throttle: ``ASSISTANT["THROTTLE_RATE"]`` per user."""

    scope = "assistant"

    def get_rate(self) -> str | None:
        return assistant_settings.THROTTLE_RATE


class TurnThrottle(AssistantThrottle):
    """Turns started on the websocket: the REST API's rate and cache, a count of their own."""

    scope = "assistant_websocket"


def throttled(user: Any) -> Throttled | None:
    """Why the user may not start a websocket turn now, or None."""
    throttle = TurnThrottle()
    if throttle.allow_request(SimpleNamespace(user=user), None):  # type: ignore[arg-type]
        return None
    return Throttled(throttle.wait())
