"""The channel layer, Tasks backend and event log the chat relies on (E008, W002, W003, W015)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register

from ..conf import assistant_settings

IN_MEMORY_LAYER = "channels.layers.InMemoryChannelLayer"
INLINE_TASK_BACKENDS = {
    "django.tasks.backends.immediate.ImmediateBackend": "run inline, during the turn that starts them",
    "django_tasks.backends.immediate.ImmediateBackend": "run inline, during the turn that starts them",
    "django.tasks.backends.dummy.DummyBackend": "are never run",
    "django_tasks.backends.dummy.DummyBackend": "are never run",
}
REDIS_LAYER_PREFIX = "channels_redis."


@register("assistant")
def check_services(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """assistant.E008/W002/W003: the channel layer and the Tasks backend the chat relies on."""
    return service_problems(
        getattr(settings, "CHANNEL_LAYERS", None),
        settings.DATABASES,
        getattr(settings, "TASKS", None),
    )


def service_problems(layers: Any, databases: Any, tasks: Any) -> list[CheckMessage]:
    """What is wrong with these CHANNEL_LAYERS, DATABASES and TASKS for the chat."""
    errors: list[CheckMessage] = []
    layer = layers.get("default") if isinstance(layers, dict) else None
    if not isinstance(layer, dict) or not layer.get("BACKEND"):
        errors.append(
            Error(
                "No default channel layer is configured: the chat websocket cannot stream "
                "replies, stop turns or follow permission changes.",
                hint="Set CHANNEL_LAYERS = {'default': {'BACKEND': "
                "'channels.layers.InMemoryChannelLayer'}} for one process, or channels-redis's "
                "layer for several.",
                id="assistant.E008",
            )
        )
    elif layer["BACKEND"] == IN_MEMORY_LAYER and _shared_database(databases):
        errors.append(
            Warning(
                "The in-memory channel layer reaches only its own process, but the database "
                "suggests several server processes: Stop, replies to other tabs and permission "
                "news would not cross between them.",
                hint="Use channels-redis (the [redis] extra) when you run more than one ASGI "
                "process; silence assistant.W002 if you run exactly one.",
                id="assistant.W002",
            )
        )
    backend = _task_backend(tasks)
    if backend in INLINE_TASK_BACKENDS:
        errors.append(
            Warning(
                f"Django's Tasks backend is {backend.rsplit('.', 1)[-1]}: background jobs "
                f"(backups, deployments, validation runs) {INLINE_TASK_BACKENDS[backend]}.",
                hint="Add 'django_tasks_db' to INSTALLED_APPS, set TASKS = {'default': "
                "{'BACKEND': 'django_tasks_db.DatabaseBackend'}} and run manage.py db_worker.",
                id="assistant.W003",
            )
        )
    return errors


def _shared_database(databases: Any) -> bool:
    """A server database (not SQLite) usually means more than one process serves the site."""
    return isinstance(databases, dict) and any(
        not str(config.get("ENGINE", "")).endswith("sqlite3")
        for config in databases.values()
        if isinstance(config, dict)
    )


def _task_backend(tasks: Any) -> str:
    if not isinstance(tasks, dict) or "default" not in tasks:
        return "django.tasks.backends.immediate.ImmediateBackend"  # Django's own default
    default = tasks["default"]
    return str(default.get("BACKEND", "")) if isinstance(default, dict) else ""


@register("assistant")
def check_event_log(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """assistant.W015: a Redis channel layer with the replay log left in one process's memory."""
    return event_log_problems(
        getattr(settings, "CHANNEL_LAYERS", None), assistant_settings.EVENT_LOG
    )


def event_log_problems(layers: Any, event_log: Any) -> list[CheckMessage]:
    """W015 when these CHANNEL_LAYERS cross processes but the event log ``event_log`` does not."""
    layer = layers.get("default") if isinstance(layers, dict) else None
    backend = str(layer.get("BACKEND", "")) if isinstance(layer, dict) else ""
    if not backend.startswith(REDIS_LAYER_PREFIX) or event_log is not None:
        return []
    return [
        Warning(
            "The channel layer is Redis, but ASSISTANT['EVENT_LOG'] is not set, so replay "
            "is kept in each process's memory: a tab that reconnects to another process "
            "cannot replay a run it missed.",
            hint="Set ASSISTANT['EVENT_LOG'] to a Redis URL (e.g. the channel layer's, "
            "'redis://127.0.0.1:6379/0'); silence assistant.W015 if you run exactly one process.",
            id="assistant.W015",
        )
    ]
