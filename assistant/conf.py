"""The ``ASSISTANT`` settings dict: defaults in one mapping, read lazily, reset on change."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

DEFAULTS: dict[str, Any] = {
    # resource name used in permission_checks -> "app_label.ModelName"
    "RESOURCES": {},
    # seconds a pending action waits for confirmation
    "CONFIRMATION_TTL": 600,
    # "keywords" (offline, default) or "llm"
    "PLANNER": "keywords",
    # DRF throttle rate for every API view, per user ("120/min"); None disables
    "THROTTLE_RATE": "120/min",
    # longest user message accepted, in characters
    "MAX_MESSAGE_LENGTH": 4000,
    # what replaces a sensitive entity's value in audit entries and history
    "REDACTED": "[redacted]",
    # import each installed app's ``assistant_tools`` module at start-up
    "AUTODISCOVER": True,
}


class AssistantSettings:
    """Attribute and item access to ``settings.ASSISTANT`` merged over ``DEFAULTS``."""

    def __init__(self) -> None:
        self._cache: dict[str, Any] | None = None

    @property
    def user_settings(self) -> dict[str, Any]:
        value = getattr(settings, "ASSISTANT", {})
        return value if isinstance(value, dict) else {}

    def _merged(self) -> dict[str, Any]:
        if self._cache is None:
            self._cache = {**DEFAULTS, **self.user_settings}
        return self._cache

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name not in DEFAULTS:
            raise AttributeError(f"Invalid ASSISTANT setting: {name!r}")
        return self._merged()[name]

    def __getitem__(self, name: str) -> Any:
        return self.__getattr__(name)

    def as_dict(self) -> dict[str, Any]:
        return dict(self._merged())

    def reload(self) -> None:
        self._cache = None


assistant_settings = AssistantSettings()


@receiver(setting_changed)
def _reload_on_change(*, setting: str, **kwargs: Any) -> None:
    if setting == "ASSISTANT":
        assistant_settings.reload()
