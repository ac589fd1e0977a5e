"""Every tool's permission references and object check resolve (E004-E006, W004)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register

from ..access.requirements import permission_for
from ..core.declaration import AssistantTool
from ..core.registry import ToolRegistry, registry
from .settings import _model


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
    configured = getattr(settings, "ASSISTANT", {})
    resources = configured.get("RESOURCES", {}) if isinstance(configured, dict) else {}
    malformed = not isinstance(resources, dict)  # already E001/E002; guessing would be noise
    resources = {} if malformed else resources
    # Permissions the app itself creates after migrate, for pairs no model stands for.
    created = {
        permission_for(check)
        for tool in site
        for check in tool.permission_checks
        if isinstance(check, tuple) and check[0] not in resources
    }
    if not malformed:
        yield from _unmapped_resources(site, resources)
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


def _unmapped_resources(site: ToolRegistry, resources: dict[str, Any]) -> Iterable[CheckMessage]:
    """assistant.W004: a pair that falls back to an ``assistant.*`` permission while an
    installed model carries the resource's name (the mapping was probably forgotten)."""
    tools: dict[str, list[str]] = {}
    for tool in site:
        for check in tool.permission_checks:
            if isinstance(check, tuple) and check[0] not in resources:
                tools.setdefault(check[0], []).append(tool.operation)
    for resource, operations in sorted(tools.items()):
        models = _models_named(resource)
        if not models:
            continue
        names = ", ".join(sorted(set(operations)))
        yield Warning(
            f"Resource {resource!r} (tools: {names}) is not in ASSISTANT['RESOURCES'], so its "
            f"tools need permissions the app creates (assistant.{resource.lower()}_*), which "
            f"nobody holds until granted — yet the installed model {models[0]} has that name.",
            hint=f"Did you mean ASSISTANT['RESOURCES'] = {{{resource!r}: {models[0]!r}}}? "
            "If the app's own permissions are meant, grant them after migrate and silence "
            "assistant.W004.",
            id="assistant.W004",
        )


def _models_named(resource: str) -> list[str]:
    wanted = resource.lower().replace("_", "").replace(" ", "")
    found = []
    for model in apps.get_models():
        opts = model._meta
        names = {
            opts.model_name,
            f"{opts.model_name}s",
            str(opts.verbose_name_plural).lower().replace(" ", ""),
        }
        if wanted in names:
            found.append(opts.label)
    return sorted(found)


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
