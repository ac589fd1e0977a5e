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
    # DRF throttle rate per user ("120/min") for every API view, and for websocket turns
    # (counted apart); None disables
    "THROTTLE_RATE": "120/min",
    # longest user message accepted, in characters
    "MAX_MESSAGE_LENGTH": 4000,
    # what replaces a sensitive entity's value in audit entries and history
    "REDACTED": "[redacted]",
    # import each installed app's ``assistant_tools`` module at start-up
    "AUTODISCOVER": True,
    # where the project routes AssistantConsumer (the chat page connects there)
    "WEBSOCKET_PATH": "/ws/assistant/",
    # turns running at once in one server process; more wait for a free slot
    "MAX_CONCURRENT_TURNS": 32,
    # seconds an open chat may reuse what it read of its user's permissions and flags. Changes
    # made through the ORM (admin, shell, guardian, the API) reach every process at once over
    # the channel layer; this bounds the rest (queryset.update(), raw SQL). 0: every turn.
    "ACCESS_MAX_AGE": 60.0,
    # background jobs: the Tasks queue they go to, how often a running job's worker beats, when
    # a silent one counts as dead, and how often web processes relay job progress to the chat
    "JOB_QUEUE": "default",
    "JOB_HEARTBEAT": 5.0,
    "JOB_STALE_AFTER": 60.0,
    "JOB_RELAY_INTERVAL": 0.5,
    # where recent events are kept for replay: None (this process's memory) or a redis:// URL
    "EVENT_LOG": None,
    "EVENT_LOG_KEEP": 1000,
    "EVENT_LOG_TTL": 86400,
    # the websocket: bytes a socket may have waiting to reach a client that does not read (past
    # it the socket is closed with 4008), and how many stored messages a snapshot carries
    "SOCKET_MAX_PENDING_BYTES": 8 * 1024 * 1024,
    "SNAPSHOT_MAX_MESSAGES": 100,
    # the LLM planner (PLANNER = "llm"): any OpenAI-compatible chat-completions endpoint
    "LLM": {},
}

LLM_DEFAULTS: dict[str, Any] = {
    "BASE_URL": None,  # None: the openai package's default (api.openai.com)
    "MODEL": "gpt-4o-mini",
    "API_KEY_ENV": "OPENAI_API_KEY",  # name of the environment variable holding the key
    "TIMEOUT": 30.0,  # seconds for the whole request, and between streamed chunks
    "MAX_STEPS": 5,  # model calls per turn (each may call tools)
    "MAX_HISTORY": 20,  # earlier messages of the conversation sent along
    "FALLBACK_TO_KEYWORDS": False,  # on a dead endpoint, answer with the keyword planner
    "TEMPERATURE": 0.2,
    "SYSTEM_PROMPT": (
        "You are the assistant of a Django application. Use the tools to act; never invent "
        "results. Risky tools ask the user for confirmation: say so plainly. Be brief."
    ),
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

    @property
    def llm(self) -> dict[str, Any]:
        """``ASSISTANT["LLM"]`` over its defaults."""
        configured = self.LLM
        return {**LLM_DEFAULTS, **(configured if isinstance(configured, dict) else {})}

    def reload(self) -> None:
        self._cache = None


assistant_settings = AssistantSettings()


@receiver(setting_changed)
def _reload_on_change(*, setting: str, **kwargs: Any) -> None:
    if setting == "ASSISTANT":
        assistant_settings.reload()
