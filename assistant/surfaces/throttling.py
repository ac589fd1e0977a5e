"""How often a user may call the REST API (and start AG-UI runs): ``ASSISTANT["THROTTLE_RATE"]``."""

from __future__ import annotations

from rest_framework.throttling import UserRateThrottle

from ..conf import assistant_settings


class AssistantThrottle(UserRateThrottle):
    """The REST API's throttle: ``ASSISTANT["THROTTLE_RATE"]`` per user."""

    scope = "assistant"

    def get_rate(self) -> str | None:
        return assistant_settings.THROTTLE_RATE
