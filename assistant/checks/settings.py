"""The ``ASSISTANT`` settings: known keys, valid values, and what they name or bound.

E001-E003, E019 and W001 (keys and values), E009 and E010 (the LLM planner), E017 (liveness).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register

from ..conf import LLM_SETTINGS, SETTINGS, Setting, nearest


@register("assistant")
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """assistant.E001/E002/E003/E019/W001: the ASSISTANT dict, its keys and values, LLM's too."""
    value = getattr(settings, "ASSISTANT", {})
    if not isinstance(value, dict):
        return [
            Error(
                "The ASSISTANT setting must be a dict.",
                hint="Write ASSISTANT = {'PLANNER': 'keywords', ...} in your settings.",
                id="assistant.E001",
            )
        ]
    errors = list(_key_errors(value, SETTINGS, "ASSISTANT"))
    llm = value.get("LLM", {})
    if isinstance(llm, dict):
        errors.extend(_key_errors(llm, LLM_SETTINGS, "ASSISTANT['LLM']"))
    errors.extend(_resource_errors(value.get("RESOURCES", {})))
    errors.extend(_home_url_errors(value.get("HOME_URL")))
    if isinstance(value.get("VALIDATION_FILTER_FIELDS", {}), dict):
        errors.extend(_filter_field_errors(value.get("VALIDATION_FILTER_FIELDS", {})))
    return errors


def _key_errors(
    configured: dict[Any, Any], known: dict[str, Setting], where: str
) -> Iterable[CheckMessage]:
    """An unknown key is a warning naming its nearest known key; a bad value is an error."""
    for key, value in configured.items():
        spec = known.get(key) if isinstance(key, str) else None
        if spec is None:
            guess = nearest(key, known)
            yield Warning(
                f"{where}[{key!r}] is not an assistant setting.",
                hint=(f"Did you mean {guess!r}? " if guess else "")
                + f"Known settings: {', '.join(sorted(known))}.",
                id="assistant.W001",
            )
        elif not spec.accepts(value):
            yield Error(
                f"{where}[{key!r}] must be {spec.expected}, not {value!r}.",
                hint=f"E.g. {key!r}: {spec.example} ({spec.doc}).",
                id="assistant.E002",
            )


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


def _home_url_errors(home_url: Any) -> list[CheckMessage]:
    """assistant.E019: a HOME_URL that is neither a path nor a URL must name a URL pattern."""
    from django.urls import NoReverseMatch, reverse

    if not SETTINGS["HOME_URL"].accepts(home_url) or not home_url:
        return []  # None, or E002's
    if home_url.startswith(("/", "./", "../")) or "://" in home_url:
        return []
    try:
        reverse(home_url)
    except NoReverseMatch:
        return [
            Error(
                f"ASSISTANT['HOME_URL'] ({home_url!r}) is not a path or URL and names no URL "
                "pattern: the chat page could not render its Home link.",
                hint="Use a path ('/'), a URL, or the name of a URL pattern without arguments "
                "('home', 'admin:index').",
                id="assistant.E019",
            )
        ]
    return []


def _bad_value(key: str, problem: str, hint: str) -> Error:
    return Error(f"ASSISTANT[{key!r}] {problem}.", hint=hint, id="assistant.E002")


def _filter_field_errors(listed: dict[Any, Any]) -> list[CheckMessage]:
    """E002 unless VALIDATION_FILTER_FIELDS maps installed models to their own column names."""
    key, hint = "VALIDATION_FILTER_FIELDS", "E.g. {'dashboards.Dashboard': ['slug', 'owner_id']}."
    errors: list[CheckMessage] = []
    for label, names in listed.items():
        model = _model(label)
        if model is None:
            errors.append(
                _bad_value(key, f"names {label!r}, which is not an installed model", hint)
            )
            continue
        fields = model._meta.concrete_fields
        own = {f.name for f in fields} | {f.attname for f in fields}
        if not isinstance(names, list | tuple) or any(name not in own for name in names):
            problem = f"[{label!r}] must list fields of {label} itself (no '__' paths)"
            errors.append(_bad_value(key, problem, hint))
    return errors


def _model(label: Any) -> Any:
    if not isinstance(label, str):
        return None
    try:
        return apps.get_model(label)
    except (LookupError, ValueError):
        return None


@register("assistant")
def check_planner(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """assistant.E009/E010: the LLM planner can actually be used."""
    configured = getattr(settings, "ASSISTANT", {})
    if not isinstance(configured, dict) or configured.get("PLANNER") != "llm":
        return []
    errors: list[CheckMessage] = []
    if importlib.util.find_spec("openai") is None:
        errors.append(
            Error(
                "ASSISTANT['PLANNER'] is 'llm', but the openai package is not installed.",
                hint="Install the [llm] extra (the openai package), or set PLANNER to 'keywords'.",
                id="assistant.E009",
            )
        )
    llm = configured.get("LLM", {})
    if not isinstance(llm, dict) or not llm.get("MODEL"):
        errors.append(
            Error(
                "ASSISTANT['PLANNER'] is 'llm', but ASSISTANT['LLM']['MODEL'] names no model.",
                hint="Set ASSISTANT['LLM']['MODEL'], e.g. 'gpt-4o-mini' or 'qwen2.5:7b-instruct'.",
                id="assistant.E010",
            )
        )
    return errors


@register("assistant")
def check_turn_liveness(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """assistant.E017: a live process's turns are never closed as interrupted between beats."""
    configured = getattr(settings, "ASSISTANT", {})
    if not isinstance(configured, dict):
        return []  # (E001)
    beat = configured.get("TURN_HEARTBEAT", SETTINGS["TURN_HEARTBEAT"].default)
    stale = configured.get("TURN_STALE_AFTER", SETTINGS["TURN_STALE_AFTER"].default)
    if not (
        SETTINGS["TURN_HEARTBEAT"].accepts(beat) and SETTINGS["TURN_STALE_AFTER"].accepts(stale)
    ):
        return []  # (E002)
    if beat is None or stale > 2 * beat:
        return []
    return [
        Error(
            f"ASSISTANT['TURN_STALE_AFTER'] ({stale!r} s) must be more than twice "
            f"ASSISTANT['TURN_HEARTBEAT'] ({beat!r} s).",
            hint="A process that is alive would be taken for dead between two heartbeats, and "
            "its turns closed as interrupted; e.g. TURN_HEARTBEAT 5 and TURN_STALE_AFTER 30.",
            id="assistant.E017",
        )
    ]
