"""Validation tasks name only rules some app registers (E007, ``check --database``)."""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error, register
from django.db import DatabaseError

from ..models import ValidationTask
from ..validation import rules


@register("database")
def check_validation_rules(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[CheckMessage]:
    """assistant.E007: validation tasks naming rules no code registers (``check --database``)."""
    if not databases:
        return []

    errors: list[CheckMessage] = []
    for alias in databases:
        try:
            tasks = list(ValidationTask.objects.using(alias).only("pk", "name", "rules"))
        except DatabaseError:
            continue  # not migrated yet (migrate runs database checks first)
        for task in tasks:
            for entry in task.rules:  # as normalise_rules stored them: {"name", "options"}
                name = entry["name"]
                if name not in rules:
                    errors.append(
                        Error(
                            f"Validation task {task.pk} ({task.name!r}) runs rule {name!r}, "
                            "which no installed app registers.",
                            hint="Register it with @validation_rule, or edit the task's rules.",
                            obj=task,
                            id="assistant.E007",
                        )
                    )
    return errors
