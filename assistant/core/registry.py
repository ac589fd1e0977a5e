"""The tool registry: ``@assistant_tool`` declarations and everything derived from them."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

from ..exceptions import (
    AlreadyRegistered,
    AssistantError,
    RegistryFrozen,
    ToolDefinitionError,
    UnknownOperation,
)
from .entities import Entity, entities_from_handler, parameters_schema, validate_entities

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

    from .cancellation import CancellationToken
    from .lifecycle import ToolSession, Toolset

F = TypeVar("F", bound=Callable[..., Any])
PermissionCheck = tuple[str, str] | str
PermissionMode = Literal["all", "any"]
OPERATION_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
MODEL_LABEL_RE = re.compile(r"^[A-Za-z_][\w]*\.[A-Za-z_][\w]*$")


class RiskLevel(StrEnum):
    SAFE = "safe"
    GUARDED = "guarded"
    DANGEROUS = "dangerous"


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolResult:
    """What a handler returns: the ADR's ``(text, task_id, actions)``, plus full data for the UI."""

    text: str
    task_id: str | None = None
    actions: list[dict[str, Any]] = field(default_factory=list)
    data: Any = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Prepared:
    """What a tool's ``prepare`` hook made of a call before anyone is asked to approve it.

    ``entities`` are the resolved arguments the handler receives instead (validated again);
    ``preview`` shows what will change: ``{"kind": "changes", "rows": [{"field", "before",
    "after"}]}``, ``{"kind": "rows", "columns": [...], "rows": [[...]]}``, ``{"kind": "list",
    "items": [...]}`` or ``{"kind": "text", "text": ...}``; ``confirm_phrase`` is what the
    approver of a dangerous action types to approve it (the object's name).
    """

    summary: str
    entities: Mapping[str, Any] | None = None
    preview: dict[str, Any] | None = None
    confirm_phrase: str = ""


PREVIEW_KINDS = frozenset({"changes", "rows", "list", "text"})


# What a call needs of the layers above, as structural types they satisfy (mypy checks it), so
# that this bottom layer names none of them, not even in annotations.
class JobEnqueuer(Protocol):
    """Enqueues long work for the call's user and conversation (``jobs.JobManager``)."""

    def enqueue(self, function: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any: ...


class TokenCeiling(Protocol):
    """What a bearer token may reach at most (``access.tokens.Ceiling``)."""

    def allows(self, tool: AssistantTool, /) -> bool: ...

    def refusal(self, tool: AssistantTool, /) -> AssistantError: ...


class StoredRecord(Protocol):
    """A stored row a call refers to (``models.Conversation``, ``models.PendingAction``)."""

    @property
    def pk(self) -> Any: ...


@dataclass(kw_only=True, slots=True)
class ToolCall:
    """Everything a handler may need about the call it is serving (treat it as read-only)."""

    tool: AssistantTool
    entities: Mapping[str, Any]
    user: AbstractBaseUser | AnonymousUser
    conversation: StoredRecord | None = None
    settings: Any = None
    source: str = "api"
    request_ip: str | None = None
    pending_action: StoredRecord | None = None
    instance: Any = None
    cancel: CancellationToken | None = None
    toolset: Toolset | Any = None  # the Toolset instance serving a toolset tool
    session: ToolSession | None = None  # the tool session the call runs in
    ceiling: TokenCeiling | None = None  # the bearer token's, when one made the call
    jobs: JobEnqueuer  # ``call.jobs.enqueue(func, *args)`` for long work

    @property
    def operation(self) -> str:
        return self.tool.operation


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


class ToolRegistry:
    """Every declared tool, by operation; frozen once the project has finished loading."""

    def __init__(self, name: str = "default") -> None:
        self.name = name
        self._tools: dict[str, AssistantTool] = {}
        self.toolsets: dict[str, type] = {}  # Toolset classes by name (@register_toolset)
        self._frozen = False
        self._derived: dict[str, Any] = {}
        self.version = 0  # counts changes to the tools: what is derived from them keys on it

    @property
    def _registry(self) -> dict[str, AssistantTool]:
        # The name Django's autodiscover_modules() saves and restores around a failed import.
        return self._tools

    @_registry.setter
    def _registry(self, tools: dict[str, AssistantTool]) -> None:
        self._tools = tools
        self._changed()

    def _changed(self) -> None:
        """The tools changed: what was derived from them is worked out anew."""
        self._derived.clear()
        self.version += 1

    def __repr__(self) -> str:
        return f"<ToolRegistry {self.name!r}: {len(self._tools)} tools>"

    def __contains__(self, operation: object) -> bool:
        return operation in self._tools

    def __iter__(self) -> Iterator[AssistantTool]:
        return iter(list(self._tools.values()))

    def __len__(self) -> int:
        return len(self._tools)

    @property
    def frozen(self) -> bool:
        return self._frozen

    def freeze(self) -> None:
        self._frozen = True

    def register(self, tool: AssistantTool) -> AssistantTool:
        if self._frozen:
            raise RegistryFrozen(
                f"{tool.operation}: the tool registry is frozen; declare tools in an "
                "'assistant_tools' module of an installed app"
            )
        if tool.operation in self._tools:
            other = self._tools[tool.operation]
            raise AlreadyRegistered(
                f"{tool.operation}: already registered by {other.module}.{other.handler.__name__}"
            )
        keyword_map = self.keyword_map
        for word in tool.keywords:
            if word in keyword_map:
                raise ToolDefinitionError(
                    f"{tool.operation}: keyword {word!r} already maps to {keyword_map[word]}"
                )
        self._tools[tool.operation] = tool
        self._changed()
        return tool

    def unregister(self, operation: str) -> None:
        if self._frozen:
            raise RegistryFrozen(f"{operation}: the tool registry is frozen")
        self.get(operation)
        del self._tools[operation]
        self._changed()

    def find(self, operation: Any) -> AssistantTool | None:
        """The tool registered for ``operation``, or None."""
        return self._tools.get(operation) if isinstance(operation, str) else None

    def get(self, operation: str) -> AssistantTool:
        try:
            return self._tools[operation]
        except (KeyError, TypeError):
            raise UnknownOperation.named(operation) from None

    def _cached(self, key: str, build: Callable[[], Any]) -> Any:
        try:
            return self._derived[key]
        except KeyError:
            value = self._derived[key] = build()
            return value

    @property
    def safe_operations(self) -> frozenset[str]:
        """Operations whose risk level is ``safe`` (the ADR's ``_SAFE_OPS``)."""
        return self._cached(
            "safe", lambda: frozenset(op for op, tool in self._tools.items() if tool.is_safe)
        )

    @property
    def keyword_map(self) -> dict[str, str]:
        """Keyword → operation, for the offline planner."""
        return self._cached(
            "keywords",
            lambda: {word: op for op, tool in self._tools.items() for word in tool.keywords},
        )


registry = ToolRegistry()


def assistant_tool(
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
    idempotent: bool | None = None,
    open_world: bool | None = None,
    repeatable: bool = False,
    site: ToolRegistry | None = None,
) -> Callable[[F], F]:
    """Declare a handler as an assistant tool; registers it and returns the function unchanged."""

    def decorator(handler: F) -> F:
        method = _is_method(handler)
        tool = AssistantTool.declare(
            handler,
            method=method,
            operation=operation,
            domain=domain,
            description=description,
            risk_level=risk_level,
            requires_confirmation=requires_confirmation,
            permission_checks=permission_checks,
            optional_entities=optional_entities,
            keywords=keywords,
            sensitive_entities=sensitive_entities,
            public=public,
            object_check=object_check,
            timeout=timeout,
            permission_mode=permission_mode,
            prepare=prepare,
            idempotent=idempotent,
            open_world=open_world,
            repeatable=repeatable,
        )
        if not method:  # a Toolset method is registered with its class (@register_toolset)
            (site if site is not None else registry).register(tool)
        handler.__assistant_tool__ = tool  # type: ignore[attr-defined]
        return handler

    return decorator


def _is_method(handler: Callable[..., Any]) -> bool:
    parameters = list(inspect.signature(handler).parameters)
    return bool(parameters) and parameters[0] == "self"


def _bound(function: Callable[..., Any], is_async: bool) -> Callable[..., Any]:
    """A handler that calls the Toolset method on the instance dispatch found for the call."""
    handler: Callable[..., Any]
    if is_async:

        async def async_handler(call: ToolCall, **entities: Any) -> Any:
            return await function(call.toolset, call, **entities)

        handler = async_handler
    else:

        def sync_handler(call: ToolCall, **entities: Any) -> Any:
            return function(call.toolset, call, **entities)

        handler = sync_handler
    handler.__name__ = function.__name__
    handler.__qualname__ = function.__qualname__
    handler.__module__ = function.__module__
    return handler


def register_methods(toolset: type, site: ToolRegistry | None = None) -> list[AssistantTool]:
    """Register every ``@assistant_tool`` method of a Toolset class."""
    registered = []
    for name in dir(toolset):
        declared = getattr(getattr(toolset, name, None), "__assistant_tool__", None)
        if not isinstance(declared, AssistantTool) or not declared.method:
            continue
        tool = replace(
            declared,
            handler=_bound(getattr(toolset, name), declared.is_async),
            toolset=toolset,
            module=toolset.__module__,
        )
        (site if site is not None else registry).register(tool)
        registered.append(tool)
    if not registered:
        raise ToolDefinitionError(f"{toolset.__name__}: a toolset needs @assistant_tool methods")
    return registered


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
