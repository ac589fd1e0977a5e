"""The tool registry and ``@assistant_tool``: every declared tool by operation, and what a
handler receives and returns."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ..exceptions import (
    AlreadyRegistered,
    AssistantError,
    RegistryFrozen,
    ToolDefinitionError,
    UnknownOperation,
)
from .declaration import AssistantTool, PermissionCheck, PermissionMode, RiskLevel, title_of

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

    from .cancellation import CancellationToken

F = TypeVar("F", bound=Callable[..., Any])

# What a tool is lives in ``declaration``; its names are answered here too, where callers (and
# ``assistant.registry``, the deprecated path) have always found them.
__all__ = [
    "PREVIEW_KINDS",
    "AssistantTool",
    "JobEnqueuer",
    "PermissionCheck",
    "PermissionMode",
    "Prepared",
    "RiskLevel",
    "StoredRecord",
    "TokenCeiling",
    "ToolCall",
    "ToolRegistry",
    "ToolResult",
    "assistant_tool",
    "register_methods",
    "registry",
    "title_of",
]


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
class CallSession(Protocol):
    """The tool session a call runs in, as ``core.lifecycle.ToolSession`` provides it."""

    closed: bool  # its connection has closed (turns may still be finishing)


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
    toolset: Any = None  # the Toolset instance serving a toolset tool (``core.lifecycle``)
    # the tool session the call runs in (a ``core.lifecycle.ToolSession``: named here by its
    # protocol, so the registry names nothing of the lifecycle, which registers into it)
    session: CallSession | None = None
    ceiling: TokenCeiling | None = None  # the bearer token's, when one made the call
    jobs: JobEnqueuer  # ``call.jobs.enqueue(func, *args)`` for long work

    @property
    def operation(self) -> str:
        return self.tool.operation


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
    background: bool = False,
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
            background=background,
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
