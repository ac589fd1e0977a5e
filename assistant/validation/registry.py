"""Validation rules: ``Verdict``, the rule registry, ``@validation_rule``, a task's chosen rules."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db import models

from ..exceptions import InvalidEntities, ToolDefinitionError
from ..models import ValidationFinding
from .targets import _json_problem

Outcome = ValidationFinding.Outcome
TargetModel = type[models.Model]


@dataclass(frozen=True, kw_only=True, slots=True)
class Verdict:
    """What a rule says about one target."""

    outcome: str  # pass | fail | warn
    message: str = ""
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True, slots=True)
class ValidationRule:
    name: str
    description: str
    check: Callable[..., Verdict | Iterable[Verdict]]
    models: tuple[str, ...]  # model labels it applies to; empty: any
    needs_target: bool
    # (target model, options) -> what is wrong with the options, "" when nothing is
    check_options: Callable[[TargetModel, dict[str, Any]], str] | None = None


class RuleRegistry:
    """Validation rules by name, in the same style as the tool registry."""

    def __init__(self) -> None:
        self._rules: dict[str, ValidationRule] = {}

    def register(self, rule: ValidationRule) -> None:
        if rule.name in self._rules:
            raise ToolDefinitionError(f"validation rule {rule.name!r} is already registered")
        self._rules[rule.name] = rule

    def unregister(self, name: str) -> None:
        self._rules.pop(name, None)

    def get(self, name: str) -> ValidationRule:
        try:
            return self._rules[name]
        except KeyError:
            raise InvalidEntities({"rules": f"unknown rule {name!r}"}) from None

    def __contains__(self, name: object) -> bool:
        return name in self._rules

    def __iter__(self) -> Any:
        return iter(list(self._rules.values()))

    def for_model(self, label: str) -> list[ValidationRule]:
        return [
            rule
            for rule in self._rules.values()
            if rule.needs_target and (not rule.models or label.lower() in rule.models)
        ]


rules = RuleRegistry()


def validation_rule(
    *,
    name: str,
    description: str = "",
    models: Iterable[str] = (),
    needs_target: bool = True,
    check_options: Callable[[TargetModel, dict[str, Any]], str] | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declare ``check(target, options, run) -> Verdict | [Verdict]`` as a validation rule."""

    def decorator(check: Callable[..., Any]) -> Callable[..., Any]:
        rules.register(
            ValidationRule(
                name=name,
                description=description or (check.__doc__ or "").strip().split("\n")[0],
                check=check,
                models=tuple(label.lower() for label in models),
                needs_target=needs_target,
                check_options=check_options,
            )
        )
        return check

    return decorator


MAX_RULES = 50


def normalise_rules(names: Any, model: type[models.Model]) -> list[dict[str, Any]]:
    """``[{"name", "options"}]`` from rule names or objects; by default every rule for ``model``."""
    label = model._meta.label
    if names is None:
        chosen = [{"name": rule.name, "options": {}} for rule in rules.for_model(label)]
        if not chosen:
            raise InvalidEntities({"rules": f"no validation rule applies to {label}"})
        return chosen
    if not isinstance(names, (list, tuple)) or len(names) > MAX_RULES:
        raise InvalidEntities({"rules": f"expected a list of at most {MAX_RULES} rules"})
    normalised = []
    for index, item in enumerate(names):
        entry = {"name": item, "options": {}} if isinstance(item, str) else item
        if (
            not isinstance(entry, dict)
            or set(entry) - {"name", "options"}
            or not isinstance(entry.get("name"), str)
            or not isinstance(entry.get("options", {}), dict)
        ):
            raise InvalidEntities(
                {"rules": f'rule {index}: expected a name or {{"name": ..., "options": {{...}}}}'}
            )
        rule = rules.get(entry["name"])
        options = entry.get("options", {})
        problem = _json_problem(options)
        if not problem and rule.check_options is not None:
            problem = rule.check_options(model, options)
        if problem:
            raise InvalidEntities({"rules": f"rule {index}: options: {problem}"})
        normalised.append({"name": entry["name"], "options": options})
    if not normalised:
        raise InvalidEntities({"rules": "name at least one rule"})
    return normalised
