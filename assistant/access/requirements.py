"""Permission checks → Django permissions: what a tool requires, in words, created after migrate."""

from __future__ import annotations

import weakref
from typing import Any

from django.apps import apps

from ..conf import assistant_settings
from ..core.declaration import AssistantTool, PermissionCheck
from ..core.registry import ToolRegistry, registry
from ..models import Tool

# (resource, ACTION) on a model listed in ASSISTANT["RESOURCES"] → that model's permission verb.
MODEL_ACTIONS = {
    "READ": "view",
    "VIEW": "view",
    "LIST": "view",
    "CREATE": "add",
    "ADD": "add",
    "UPDATE": "change",
    "CHANGE": "change",
    "WRITE": "change",
    "EDIT": "change",
    "DELETE": "delete",
}
_required: weakref.WeakKeyDictionary[AssistantTool, tuple[str, ...]] = weakref.WeakKeyDictionary()


def permission_for(check: PermissionCheck) -> str:
    """The Django permission string (``app_label.codename``) one check stands for."""
    if isinstance(check, str):
        return check
    resource, action = check
    resources = assistant_settings.RESOURCES
    model_label = resources.get(resource) if isinstance(resources, dict) else None
    if isinstance(model_label, str) and "." in model_label:
        app_label, model_name = model_label.split(".", 1)
        verb = MODEL_ACTIONS.get(action.upper(), action.lower())
        return f"{app_label}.{verb}_{model_name.lower()}"
    return f"assistant.{assistant_codename(resource, action)}"


def assistant_codename(resource: str, action: str) -> str:
    """The codename of the permission the app creates for an unmapped ``(resource, ACTION)``."""
    return f"{resource}_{action}".lower().replace(" ", "_")


def required_permissions(tool: AssistantTool) -> tuple[str, ...]:
    """The tool's checks as Django permission strings, resolved once per settings."""
    try:
        return _required[tool]
    except KeyError:
        perms = _required[tool] = tuple(permission_for(check) for check in tool.permission_checks)
        return perms


def tool_permission_name(resource: str, action: str) -> str:
    """The name of the permission the app creates for an unmapped ``(resource, ACTION)``."""
    return f"Can {action.lower()} {resource} (assistant)"[:255]


def permission_name(perm: str) -> str:
    """A permission in human words (``Permission.name``: "Can change user"), read from the models.

    Derived from the app registry as ``migrate`` derives the stored names (the default and
    ``Meta.permissions`` ones, and the app's own for tool pairs), so it needs no query; a
    permission nothing defines is shown as it is spelt.
    """
    app_label, _, codename = perm.partition(".")
    try:
        config = apps.get_app_config(app_label)
    except LookupError:
        return perm
    for model in config.get_models():
        opts = model._meta
        for action in opts.default_permissions:
            if codename == f"{action}_{opts.model_name}":
                return f"Can {action} {opts.verbose_name_raw}"
        for custom, name in opts.permissions:
            if custom == codename:
                return str(name)
    if app_label == "assistant":
        for tool in registry:
            for check in tool.permission_checks:
                if isinstance(check, tuple) and assistant_codename(*check) == codename:
                    return tool_permission_name(*check)
    return perm


def permission_map(site: ToolRegistry = registry) -> dict[str, tuple[str, ...]]:
    """Operation → the Django permissions it needs (the ADR's ``INTENT_PERMISSION_CHECKS``)."""
    return {tool.operation: required_permissions(tool) for tool in site}


def create_tool_permissions(using: str = "default", **kwargs: Any) -> None:
    """After ``migrate``: create ``assistant.<resource>_<action>`` for every unmapped pair."""
    from django.contrib.auth.models import Permission
    from django.contrib.contenttypes.models import ContentType

    wanted: dict[str, str] = {}
    for tool in registry:
        for check in tool.permission_checks:
            if isinstance(check, tuple):
                perm = permission_for(check)
                app_label, codename = perm.split(".", 1)
                if app_label == "assistant":
                    wanted[codename] = tool_permission_name(*check)
    if not wanted:
        return
    content_type = ContentType.objects.db_manager(using).get_for_model(
        Tool, for_concrete_model=False
    )
    existing = set(
        Permission.objects.using(using)
        .filter(content_type=content_type, codename__in=wanted)
        .values_list("codename", flat=True)
    )
    Permission.objects.using(using).bulk_create(
        [
            Permission(content_type=content_type, codename=codename, name=name)
            for codename, name in wanted.items()
            if codename not in existing
        ]
    )
