"""What a tool is: ``AssistantTool``, built from an ``@assistant_tool`` declaration and refused at
import when it is incomplete or unsafe."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

from ..exceptions import ToolDefinitionError
from .entities import Entity, entities_from_handler, parameters_schema, validate_entities

PermissionCheck = tuple[str, str] | str
PermissionMode = Literal["all", "any"]
OPERATION_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
MODEL_LABEL_RE = re.compile(r"^[A-Za-z_][\w]*\.[A-Za-z_][\w]*$")


class RiskLevel(StrEnum):
    SAFE = "safe"
    GUARDED = "guarded"
    DANGEROUS = "dangerous"


def title_of(operation: str) -> str:
    """An operation's name as words people read: ``run_backup`` → "Run backup"."""
    words = operation.replace("_", " ").replace(".", " ").strip()
    return words[:1].upper() + words[1:]


@dataclass(frozen=True, kw_only=True, slots=True, eq=False, weakref_slot=True)
class AssistantTool:
    """A registered tool: the decorator's metadata, its handler and what is derived from its signature."""

    operation: str
    domain: str
    description: str
    handler: Callable[..., Any]
    risk_level: RiskLevel
    requires_confirmation: bool
    permission_checks: tuple[PermissionCheck, ...]
    permission_mode: PermissionMode
    public: bool
    keywords: tuple[str, ...]
    sensitive_entities: frozenset[str]
    object_check: tuple[str, str] | None
    timeout: float | None
    entities: tuple[Entity, ...]
    entity_map: Mapping[str, Entity]
    parameters: dict[str, Any]
    is_async: bool
    module: str
    toolset: Any = None  # the Toolset class whose instance serves this tool
    method: bool = False  # declared on a Toolset method, registered with its class
    # resolves and checks a call before the gate: (call, **entities) -> Prepared | ToolResult
    prepare: Callable[..., Any] | None = None
    prepare_is_async: bool = False
    # MCP annotations (hints for clients): the same call twice has no further effect; the tool
    # reaches beyond this project (the internet, another system). None: not declared.
    idempotent: bool | None = None
    open_world: bool | None = None
    # the handler hands its work to a job and returns its task_id (MCP clients may call it as a task)
    background: bool = False
    # the same call may run twice in one turn: its answer changes while a turn runs (a job's
    # progress). Otherwise a model's identical second call is answered with the first's result.
    repeatable: bool = False

    @classmethod
    def declare(
        cls,
        handler: Callable[..., Any],
        *,
        operation: str,
        domain: str,
        description: str,
        risk_level: str,
        requires_confirmation: bool = False,
        permission_checks: Sequence[PermissionCheck] = (),
        optional_entities: Sequence[str] | None = None,
        keywords: Sequence[str] = (),
        sensitive_entities: Sequence[str] = (),
        public: bool = False,
        object_check: tuple[str, str] | None = None,
        timeout: float | None = None,
        permission_mode: PermissionMode = "all",
        prepare: Callable[..., Any] | None = None,
        method: bool = False,
        idempotent: bool | None = None,
        open_world: bool | None = None,
        background: bool = False,
        repeatable: bool = False,
    ) -> AssistantTool:
        """Build a tool from a declaration, raising ``ToolDefinitionError`` for anything unsafe."""
        if not isinstance(operation, str) or not OPERATION_RE.match(operation):
            raise ToolDefinitionError(
                f"{operation!r}: operation must be 1-64 letters, digits, '_' or '-', "
                "starting with a letter"
            )

        def fail(problem: str) -> ToolDefinitionError:
            return ToolDefinitionError(f"{operation}: {problem}")

        if not callable(handler):
            raise fail("the handler is not callable")
        if not isinstance(domain, str) or not domain.strip():
            raise fail("domain must be a non-empty string")
        if not isinstance(description, str) or not description.strip():
            raise fail("description must be a non-empty string")
        try:
            risk = RiskLevel(risk_level)
        except ValueError:
            choices = ", ".join(level.value for level in RiskLevel)
            raise fail(f"unknown risk_level {risk_level!r} (choose {choices})") from None
        if risk is RiskLevel.DANGEROUS and not requires_confirmation:
            raise fail("a dangerous tool must set requires_confirmation=True")
        if repeatable is not False and (repeatable is not True or requires_confirmation):
            raise fail("repeatable is True or False, and never True where a call is confirmed")
        checks = _normalise_checks(permission_checks, fail)
        if not checks and not public:
            raise fail("declare permission_checks, or public=True for a tool every user may use")
        if checks and public:
            raise fail("a public tool cannot also have permission_checks")
        if permission_mode not in ("all", "any"):
            raise fail(f"permission_mode must be 'all' or 'any', not {permission_mode!r}")
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0
        ):
            raise fail("timeout must be a positive number of seconds")

        entities = entities_from_handler(handler, operation, method=method)
        names = {entity.name for entity in entities}
        if optional_entities is not None and set(optional_entities) != names:
            raise fail(
                f"optional_entities {sorted(optional_entities)} disagree with the handler's "
                f"parameters {sorted(names)}"
            )
        unknown_sensitive = set(sensitive_entities) - names
        if unknown_sensitive:
            raise fail(f"sensitive_entities names unknown entities {sorted(unknown_sensitive)}")
        # A secret is found in the user's words by its text: a number parsed from "0731" is 731.
        untexty = sorted(
            e.name for e in entities if e.name in sensitive_entities and not _is_text(e.schema)
        )
        if untexty:
            raise fail(f"sensitive_entities {untexty} must be text (str, or a list of str)")
        if object_check is not None:
            if (
                not isinstance(object_check, tuple | list)
                or len(object_check) != 2
                or not all(isinstance(part, str) for part in object_check)
            ):
                raise fail('object_check must be ("<entity>", "<app_label.Model>")')
            if object_check[0] not in names:
                raise fail(f"object_check names unknown entity {object_check[0]!r}")
            if not MODEL_LABEL_RE.match(object_check[1]):
                raise fail(f"object_check model {object_check[1]!r} is not 'app_label.Model'")
            if public:
                raise fail("a public tool cannot have an object_check")
            object_check = (object_check[0], object_check[1])
        words = tuple(dict.fromkeys(word.strip().lower() for word in keywords))
        if any(not word for word in words):
            raise fail("keywords must be non-empty strings")
        if prepare is not None and not callable(prepare):
            raise fail("prepare must be a callable taking the call and the entities")
        for hint, value in (("idempotent", idempotent), ("open_world", open_world)):
            if value is not None and not isinstance(value, bool):
                raise fail(f"{hint} must be True, False or None")
        if not isinstance(background, bool):
            raise fail("background must be True or False")

        return cls(
            operation=operation,
            domain=domain.strip(),
            description=description.strip(),
            handler=handler,
            risk_level=risk,
            requires_confirmation=bool(requires_confirmation),
            permission_checks=checks,
            permission_mode=permission_mode,
            public=bool(public),
            keywords=words,
            sensitive_entities=frozenset(sensitive_entities),
            object_check=object_check,
            timeout=float(timeout) if timeout is not None else None,
            entities=entities,
            entity_map={entity.name: entity for entity in entities},
            parameters=parameters_schema(entities),
            is_async=inspect.iscoroutinefunction(handler),
            module=getattr(handler, "__module__", "") or "",
            method=method,
            prepare=prepare,
            prepare_is_async=inspect.iscoroutinefunction(prepare),
            idempotent=idempotent,
            open_world=open_world,
            background=background,
            repeatable=repeatable,
        )

    @property
    def is_safe(self) -> bool:
        return self.risk_level is RiskLevel.SAFE

    @property
    def title(self) -> str:
        """What people read for the tool (``search_dashboards`` → "Search dashboards")."""
        return title_of(self.operation)

    def validate(self, values: Mapping[str, Any] | None) -> dict[str, Any]:
        """Check the call's entities against the signature; raise ``InvalidEntities``."""
        return validate_entities(self.entities, self.entity_map, values, self.operation)

    def openai_spec(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.operation,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    def anthropic_spec(self) -> dict[str, Any]:
        return {
            "name": self.operation,
            "description": self.description,
            "input_schema": self.parameters,
        }


def _normalise_checks(
    checks: Sequence[PermissionCheck], fail: Callable[[str], ToolDefinitionError]
) -> tuple[PermissionCheck, ...]:
    if isinstance(checks, str):
        checks = [checks]
    result: list[PermissionCheck] = []
    for check in checks:
        if isinstance(check, str):
            if check.count(".") != 1 or not all(check.split(".")):
                raise fail(
                    f"permission {check!r} is not 'app_label.codename' "
                    "(write pairs as permission_checks=[(resource, ACTION)])"
                )
            result.append(check)
        elif (
            isinstance(check, tuple | list)
            and len(check) == 2
            and all(isinstance(part, str) and part.strip() for part in check)
        ):
            resource, action = check[0].strip(), check[1].strip().upper()
            if "." in resource:
                # ("auth.user", "DELETE") would otherwise need an invented assistant.auth.user_delete
                app_label, _, model = resource.rpartition(".")
                raise fail(
                    f"resource {resource!r} looks like app_label.model: write Django's permission "
                    f"'{app_label}.<action>_{model.lower()}' (e.g. '{app_label}.delete_"
                    f"{model.lower()}'), or a plain resource mapped to the model in "
                    f"ASSISTANT['RESOURCES'] (e.g. {{'{model.lower()}s': '{app_label}.{model}'}})"
                )
            result.append((resource, action))
        else:
            raise fail(
                f"permission check {check!r} must be a (resource, ACTION) pair "
                "or an 'app_label.codename' string"
            )
    return tuple(dict.fromkeys(result))


def _is_text(schema: dict[str, Any]) -> bool:
    """Whether an entity's JSON schema holds only text (or a list of text), maybe null."""
    kind = schema.get("type")
    if kind == "array":
        return _is_text(schema.get("items", {}))
    if kind is not None:
        kinds = set(kind) if isinstance(kind, list) else {kind}
        return "string" in kinds and kinds <= {"string", "null"}
    options = schema.get("anyOf") or schema.get("oneOf") or []
    real = [option for option in options if option.get("type") != "null"]
    return bool(real) and all(_is_text(option) for option in real)
