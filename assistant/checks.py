"""System checks over the ``ASSISTANT`` settings and the registry's permission references."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register
from django.db import DatabaseError

from .conf import DEFAULTS
from .permissions import permission_for
from .registry import AssistantTool, ToolRegistry, registry

PLANNERS = ("keywords", "llm")


@register("assistant")
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """assistant.E001/E002/E003/W001: the ASSISTANT dict and its values."""
    value = getattr(settings, "ASSISTANT", {})
    if not isinstance(value, dict):
        return [
            Error(
                "The ASSISTANT setting must be a dict.",
                hint="Write ASSISTANT = {'PLANNER': 'keywords', ...} in your settings.",
                id="assistant.E001",
            )
        ]
    errors: list[CheckMessage] = []
    for key in value:
        if key not in DEFAULTS:
            errors.append(
                Warning(
                    f"ASSISTANT[{key!r}] is not a setting django-assistant knows.",
                    hint=f"Known settings: {', '.join(sorted(DEFAULTS))}.",
                    id="assistant.W001",
                )
            )
    merged = {**DEFAULTS, **value}
    errors.extend(_value_errors(merged))
    errors.extend(_resource_errors(merged["RESOURCES"]))
    return errors


def _bad_value(key: str, problem: str, hint: str) -> Error:
    return Error(f"ASSISTANT[{key!r}] {problem}.", hint=hint, id="assistant.E002")


def _value_errors(merged: dict[str, Any]) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    ttl = merged["CONFIRMATION_TTL"]
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or ttl <= 0:
        errors.append(
            _bad_value("CONFIRMATION_TTL", "must be a positive number", "Seconds, e.g. 600.")
        )
    max_age = merged["ACCESS_MAX_AGE"]
    if isinstance(max_age, bool) or not isinstance(max_age, int | float) or max_age < 0:
        errors.append(
            _bad_value("ACCESS_MAX_AGE", "must be a number of seconds, 0 or more", "E.g. 60.")
        )
    if merged["PLANNER"] not in PLANNERS:
        errors.append(_bad_value("PLANNER", f"must be one of {PLANNERS}", "Use 'keywords'."))
    length = merged["MAX_MESSAGE_LENGTH"]
    if isinstance(length, bool) or not isinstance(length, int) or length <= 0:
        errors.append(_bad_value("MAX_MESSAGE_LENGTH", "must be a positive integer", "E.g. 4000."))
    rate = merged["THROTTLE_RATE"]
    if rate is not None and not _is_rate(rate):
        errors.append(
            _bad_value("THROTTLE_RATE", "must look like '120/min' or be None", "E.g. '120/min'.")
        )
    for key, example in (("SOCKET_MAX_PENDING_BYTES", "8388608"), ("SNAPSHOT_MAX_MESSAGES", "100")):
        count = merged[key]
        if isinstance(count, bool) or not isinstance(count, int) or count <= 0:
            errors.append(_bad_value(key, "must be a positive integer", f"E.g. {example}."))
    if not isinstance(merged["REDACTED"], str):
        errors.append(_bad_value("REDACTED", "must be a string", "E.g. '[redacted]'."))
    if not isinstance(merged["RESOURCES"], dict):
        errors.append(
            _bad_value(
                "RESOURCES",
                "must be a dict",
                "Map resource names to models: {'dashboards': 'dashboards.Dashboard'}.",
            )
        )
    return errors


def _is_rate(rate: Any) -> bool:
    if not isinstance(rate, str) or "/" not in rate:
        return False
    count, period = rate.split("/", 1)
    return count.isdigit() and period[:1] in ("s", "m", "h", "d")


def _resource_errors(resources: Any) -> list[CheckMessage]:
    if not isinstance(resources, dict):
        return []
    errors: list[CheckMessage] = []
    for resource, label in resources.items():
        if _model(label) is None:
            errors.append(
                Error(
                    f"ASSISTANT['RESOURCES'][{resource!r}] names {label!r}, which is not an "
                    "installed model.",
                    hint="Use 'app_label.ModelName' of a model in INSTALLED_APPS.",
                    id="assistant.E003",
                )
            )
    return errors


def _model(label: Any) -> Any:
    if not isinstance(label, str):
        return None
    try:
        return apps.get_model(label)
    except (LookupError, ValueError):
        return None


def _codenames(app_label: str) -> set[str]:
    """Every permission codename the app's models declare (from metadata, no queries)."""
    codenames: set[str] = set()
    for model in apps.get_app_config(app_label).get_models(include_auto_created=True):
        opts = model._meta
        codenames.update(f"{action}_{opts.model_name}" for action in opts.default_permissions)
        codenames.update(codename for codename, _ in opts.permissions)
    return codenames


@register("assistant")
def check_tool_permissions(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """assistant.E004/E005/E006: every permission reference and object check resolves."""
    return list(tool_errors(registry))


def tool_errors(site: ToolRegistry) -> Iterable[CheckMessage]:
    resources = getattr(settings, "ASSISTANT", {})
    resources = resources.get("RESOURCES", {}) if isinstance(resources, dict) else {}
    resources = resources if isinstance(resources, dict) else {}
    # Permissions the app itself creates after migrate, for pairs no model stands for.
    created = {
        permission_for(check)
        for tool in site
        for check in tool.permission_checks
        if isinstance(check, tuple) and check[0] not in resources
    }
    for tool in site:
        yield from _permission_errors(tool, resources, created)
        if tool.object_check is not None and _model(tool.object_check[1]) is None:
            yield Error(
                f"Tool {tool.operation!r}: object_check names {tool.object_check[1]!r}, which is "
                "not an installed model.",
                hint="Use 'app_label.ModelName' of a model in INSTALLED_APPS.",
                obj=tool.handler,
                id="assistant.E006",
            )


def _permission_errors(
    tool: AssistantTool, resources: dict[str, Any], created: set[str]
) -> Iterable[CheckMessage]:
    for check in tool.permission_checks:
        perm = permission_for(check)
        if perm in created:
            continue
        app_label, codename = perm.split(".", 1)
        if app_label not in apps.app_configs:
            yield Error(
                f"Tool {tool.operation!r}: permission {perm!r} names app {app_label!r}, which is "
                "not installed.",
                hint="Check the app label, or add the app to INSTALLED_APPS.",
                obj=tool.handler,
                id="assistant.E004",
            )
        elif codename not in _codenames(app_label):
            source = f" (from {check!r})" if isinstance(check, tuple) else ""
            yield Error(
                f"Tool {tool.operation!r}: permission {perm!r}{source} is not defined by any "
                f"model of {app_label!r}.",
                hint="Fix the codename, or add it to the model's Meta.permissions.",
                obj=tool.handler,
                id="assistant.E005",
            )


@register("database")
def check_validation_rules(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[CheckMessage]:
    """assistant.E007: validation tasks naming rules no code registers (``check --database``)."""
    if not databases:
        return []
    from .models import ValidationTask
    from .validation import rules

    errors: list[CheckMessage] = []
    for alias in databases:
        try:
            tasks = list(ValidationTask.objects.using(alias).only("pk", "name", "rules"))
        except DatabaseError:
            continue  # not migrated yet (migrate runs database checks first)
        for task in tasks:
            for entry in task.rules or []:
                name = entry.get("name") if isinstance(entry, dict) else entry
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
