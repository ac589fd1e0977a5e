"""Django's Tasks framework: ``django.tasks`` on Django 6, the ``django-tasks`` backport on 5.2.

Import ``task`` and ``task_backends`` from here, never from either package directly. On Django
5.2 install the ``[django52]`` extra and add ``"django_tasks"`` to ``INSTALLED_APPS``.
"""

from __future__ import annotations

from importlib.util import find_spec

if find_spec("django.tasks"):
    from django.tasks import task, task_backends

    TASKS_PACKAGE = "django.tasks"
else:  # Django 5.2
    try:
        from django_tasks import (  # type: ignore[import-not-found,no-redef,unused-ignore]
            task,
            task_backends,
        )
    except ImportError as error:
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(
            "django-ops-assistant needs Django's Tasks framework: on Django 5.2 install the "
            'backport with `pip install "django-ops-assistant[django52]"`, or use Django 6.'
        ) from error

    TASKS_PACKAGE = "django_tasks"

# The dotted path of the backend that runs a task at once, inside the caller (tests, scripts).
IMMEDIATE_BACKEND = f"{TASKS_PACKAGE}.backends.immediate.ImmediateBackend"

__all__ = ["IMMEDIATE_BACKEND", "TASKS_PACKAGE", "task", "task_backends"]
