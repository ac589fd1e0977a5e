"""What a validation task looks at: its target, the filter it may use, what its owner may view."""

from __future__ import annotations

import math
import warnings
from typing import Any

from django.apps import apps
from django.contrib.auth.base_user import AbstractBaseUser
from django.core.exceptions import FieldError
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import models

from ..conf import assistant_settings
from ..exceptions import InvalidEntities, InvalidTargetFilter


def parse_target(target: Any) -> tuple[type[models.Model], str]:
    """``"app_label.Model"``, ``"app_label.Model:<pk>"``, a model class or an instance."""
    if isinstance(target, models.Model):
        return type(target), str(target.pk)
    if isinstance(target, type) and issubclass(target, models.Model):
        return target, ""
    if isinstance(target, str):
        label, _, pk = target.partition(":")
        resources = assistant_settings.RESOURCES
        if isinstance(resources, dict) and isinstance(resources.get(label), str):
            label = resources[label]  # a resource name, as in permission_checks
        try:
            model = apps.get_model(label)
        except (LookupError, ValueError):
            raise InvalidEntities({"target": f"{label!r} is not an installed model"}) from None
        if pk:
            try:
                value = model._meta.pk.to_python(pk)
                if isinstance(value, int) and not (pk.isascii() and pk.isdigit()):
                    raise ValueError("an integer id is written in the digits 0-9")
            except (ValueError, TypeError, DjangoValidationError):
                raise InvalidEntities({"target": f"{pk!r} is not an id of {label}"}) from None
            pk = str(value)
        return model, pk
    raise InvalidEntities({"target": "expected 'app_label.Model' or 'app_label.Model:<pk>'"})


# -- what a target filter may name --------------------------------------------------------------

# Lookups a target filter may use; no transforms, no regex, nothing that walks a relation.
FILTER_LOOKUPS = frozenset(
    {
        "exact",
        "iexact",
        "in",
        "contains",
        "icontains",
        "startswith",
        "istartswith",
        "endswith",
        "iendswith",
        "gt",
        "gte",
        "lt",
        "lte",
        "range",
        "isnull",
    }
)
MAX_FILTER_KEYS = 20
MAX_FILTER_VALUES = 1000
MAX_FILTER_TEXT = 1000
_INT64 = 2**63


def filterable_fields(model: type[models.Model]) -> dict[str, models.Field[Any, Any]]:
    """The names a target filter on ``model`` may use: ``pk`` and the allowed own fields."""
    opts = model._meta
    configured = assistant_settings.VALIDATION_FILTER_FIELDS
    listed = {
        str(label).lower(): names
        for label, names in (configured if isinstance(configured, dict) else {}).items()
    }.get(opts.label_lower)
    if listed is None:
        fields = {f.name: f for f in opts.concrete_fields if not f.is_relation}
        if issubclass(model, AbstractBaseUser):
            fields.pop("password", None)  # a hash prefix is still a secret
    else:
        own = {f.name: f for f in opts.concrete_fields} | {
            f.attname: f for f in opts.concrete_fields
        }
        fields = {name: own[name] for name in listed if name in own}
    return {"pk": opts.pk, **fields}


def check_target_filter(model: type[models.Model], target_filter: Any) -> dict[str, Any]:
    """The filter if every key is ``field`` or ``field__lookup`` the policy allows, else refused."""
    if not isinstance(target_filter, dict):
        raise InvalidTargetFilter("", "expected an object of field lookups")
    if len(target_filter) > MAX_FILTER_KEYS:
        raise InvalidTargetFilter("", f"at most {MAX_FILTER_KEYS} lookups")
    allowed = filterable_fields(model)
    for key, value in target_filter.items():
        field_name, _, lookup = str(key).partition("__")
        if not isinstance(key, str) or _unstorable(key) or field_name not in allowed:
            raise InvalidTargetFilter(
                str(key),
                f"{model.__name__} may be filtered only by its own fields "
                f"{', '.join(sorted(allowed))}",
            )
        if (lookup or "exact") not in FILTER_LOOKUPS:
            raise InvalidTargetFilter(
                key, f"use one of the lookups {', '.join(sorted(FILTER_LOOKUPS))}"
            )
        _check_filter_value(key, lookup or "exact", value)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", RuntimeWarning)  # a naive date-time, say
                model._default_manager.filter(**{key: value})  # builds the lookup, runs no query
        except RuntimeWarning as exc:
            raise InvalidTargetFilter(key, str(exc)) from None
        except DjangoValidationError as exc:
            raise InvalidTargetFilter(key, "; ".join(exc.messages)) from None
        except (FieldError, ValueError, TypeError) as exc:
            raise InvalidTargetFilter(key, str(exc).splitlines()[0]) from None
    return target_filter


def _check_filter_value(key: str, lookup: str, value: Any) -> None:
    if lookup == "isnull":
        if not isinstance(value, bool):
            raise InvalidTargetFilter(key, "expected true or false")
        return
    items = [value]
    if lookup in ("in", "range"):
        if not isinstance(value, list) or len(value) > MAX_FILTER_VALUES:
            raise InvalidTargetFilter(key, f"expected a list of at most {MAX_FILTER_VALUES} values")
        if lookup == "range" and len(value) != 2:
            raise InvalidTargetFilter(key, "expected a list of two values, [low, high]")
        items = value
    for item in items:
        problem = _scalar_problem(item)
        if problem:
            raise InvalidTargetFilter(key, problem)


def _scalar_problem(value: Any) -> str:
    if value is None or isinstance(value, bool):
        return ""
    if isinstance(value, int):
        return "" if -_INT64 <= value < _INT64 else "the number is out of range"
    if isinstance(value, float):
        return "" if math.isfinite(value) else "the number is not finite"
    if isinstance(value, str):
        if len(value) > MAX_FILTER_TEXT:
            return f"at most {MAX_FILTER_TEXT} characters"
        return "the text holds a NUL or an unpaired surrogate" if _unstorable(value) else ""
    return "expected a string, a number, true, false or null"


def _unstorable(text: str) -> bool:
    """True for text a JSON column may refuse: a NUL or a lone UTF-16 surrogate."""
    return "\x00" in text or any("\ud800" <= char <= "\udfff" for char in text)


def _json_problem(value: Any, depth: int = 0) -> str:
    """Why ``value`` cannot be stored in a JSON column, or ``""``."""
    if depth > 20:
        return "nested too deeply"
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str) or _unstorable(key):
                return f"the key {key!r} is not storable text"
            problem = _json_problem(item, depth + 1)
            if problem:
                return problem
        return ""
    if isinstance(value, list):
        return next((p for p in (_json_problem(i, depth + 1) for i in value) if p), "")
    if isinstance(value, str) and _unstorable(value):
        return "a text holds a NUL or an unpaired surrogate"
    if isinstance(value, float) and not math.isfinite(value):
        return "a number is not finite"
    if isinstance(value, int) and not isinstance(value, bool) and not -_INT64 <= value < _INT64:
        return "a number is out of range"
    return "" if value is None or isinstance(value, (str, int, float, bool)) else "not JSON"


def viewable(model: type[models.Model], user: Any) -> Any:
    """The records of ``model`` a task owned by ``user`` may look at (all, without an owner: a
    task made in code; none for a deactivated owner, as Django's ``has_perm`` answers)."""
    if user is None or not getattr(user, "is_authenticated", False):
        return model._default_manager.all()
    if not user.is_active:
        return model._default_manager.none()
    from guardian.shortcuts import get_objects_for_user

    opts = model._meta
    return get_objects_for_user(
        user, f"{opts.app_label}.view_{opts.model_name}", klass=model, accept_global_perms=True
    )
