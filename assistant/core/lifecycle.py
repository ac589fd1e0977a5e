"""Toolsets with start/stop/cancel hooks, and the sessions that run them."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from enum import StrEnum
from typing import Any, ClassVar

from ..exceptions import ToolDefinitionError
from .cancellation import CancellationToken
from .llm_client import aclose_shared_clients
from .registry import register_methods, registry

logger = logging.getLogger("assistant.lifecycle")


class ToolLifecycleState(StrEnum):
    """Which lifecycle hooks a toolset instance has been through."""

    CREATED = "created"  # constructed; on_start not finished (its tools answer not_ready)
    STARTED = "started"
    STOPPED = "stopped"
    CANCELLED = "cancelled"
    FAILED = "failed"  # on_start raised or timed out (its tools answer unavailable)


class Toolset:
    """Tools that share resources, with a declared lifecycle (the seed's ``BuiltinTool``).

    Declare tools with ``@assistant_tool`` on methods (``def tool(self, call, ...)``) and register
    the class with ``@register_toolset`` in an ``assistant_tools`` module. ``scope = "session"``
    gives each chat session (websocket) its own instance; ``"process"`` one per server process;
    ``"call"`` one per tool call, started before it and stopped after it (nothing held between).
    """

    name: ClassVar[str] = ""
    scope: ClassVar[str] = "session"
    start_timeout: ClassVar[float] = 10.0

    def __init__(self) -> None:
        self.state = ToolLifecycleState.CREATED
        self.cancel_token: CancellationToken | None = None
        self.error = ""
        self._tasks: set[asyncio.Task[Any]] = set()

    async def on_start(self, cancel: CancellationToken) -> None:
        """Connect, fill caches, spawn background tasks (they must exit when ``cancel`` fires)."""

    async def on_stop(self) -> None:
        """Graceful shutdown: flush, return connections."""

    async def on_cancel(self) -> None:
        """Abrupt shutdown: cancel in-flight work, then stop (the token has already fired)."""
        await self.on_stop()

    def spawn(self, coroutine: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """A background task that is cancelled when the toolset's token fires."""
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if self.cancel_token is not None:
            loop = asyncio.get_running_loop()

            def stop_task() -> None:
                loop.call_soon_threadsafe(task.cancel)

            self.cancel_token.add_callback(stop_task)
        return task

    def __del__(self) -> None:
        if getattr(self, "state", None) is ToolLifecycleState.STARTED:
            logger.warning(
                "Toolset %s was dropped while started: on_stop was never called",
                type(self).__name__,
            )


SCOPES = ("session", "process", "call")
_UNSTARTED = (None, ToolLifecycleState.STOPPED, ToolLifecycleState.CANCELLED)


def register_toolset(cls: type[Toolset] | None = None, *, site: Any = None) -> Any:
    """Register a ``Toolset`` class's ``@assistant_tool`` methods like any other tool."""

    def register(toolset: type[Toolset]) -> type[Toolset]:
        if not (isinstance(toolset, type) and issubclass(toolset, Toolset)):
            raise ToolDefinitionError(f"{toolset!r}: @register_toolset needs a Toolset subclass")
        if toolset.scope not in SCOPES:
            raise ToolDefinitionError(
                f"{toolset.__name__}: scope must be 'session', 'process' or 'call', "
                f"not {toolset.scope!r}"
            )
        if not toolset.name:
            toolset.name = toolset.__name__
        target = site if site is not None else registry
        if toolset.name in target.toolsets:
            raise ToolDefinitionError(
                f"{toolset.__name__}: a toolset named {toolset.name!r} exists"
            )
        register_methods(toolset, target)
        target.toolsets[toolset.name] = toolset
        return toolset

    return register(cls) if cls is not None else register


def registered_toolsets(site: Any = None) -> list[type[Toolset]]:
    return list((site if site is not None else registry).toolsets.values())


class _Entry:
    __slots__ = ("instance", "starting")

    def __init__(self, instance: Toolset) -> None:
        self.instance = instance
        self.starting: asyncio.Future[None] | None = None


class ToolSession:
    """The toolset instances of one chat session, or of the process (``scope="process"``)."""

    def __init__(
        self, scope: str = "session", parent: ToolSession | None = None, site: Any = None
    ) -> None:
        self.scope = scope
        self.parent = parent
        self.site = site  # the ToolRegistry whose toolsets it runs (None: the default one)
        self.token = CancellationToken()
        self.closed = False  # its connection has closed (turns may still be finishing)
        self._entries: dict[type[Toolset], _Entry] = {}
        self._calls: set[Toolset] = set()  # call-scoped instances serving a call here now

    def owner_of(self, toolset: type[Toolset]) -> ToolSession:
        """The session holding ``toolset``'s instance: this one, or the process's."""
        if toolset.scope == "process" and self.scope == "session" and self.parent is not None:
            return self.parent
        return self

    def state(self, toolset: type[Toolset]) -> ToolLifecycleState | None:
        owner = self.owner_of(toolset)
        entry = owner._entries.get(toolset)
        return entry.instance.state if entry is not None else None

    def instance(self, toolset: type[Toolset]) -> Toolset | None:
        entry = self.owner_of(toolset)._entries.get(toolset)
        return entry.instance if entry is not None else None

    def failed(self) -> set[type[Toolset]]:
        """Toolsets whose start failed here: their tools leave this session's catalog."""
        return {
            toolset
            for toolset in registered_toolsets(self.site)
            if self.state(toolset) is ToolLifecycleState.FAILED
        }

    def needs_start(self, toolset: type[Toolset]) -> bool:
        """Whether a call here would start ``toolset`` first (never started, or since ended)."""
        return self.state(toolset) in _UNSTARTED

    async def ready(self, toolset: type[Toolset]) -> ToolLifecycleState:
        """The state a call here finds ``toolset`` in, starting it first if it ``needs_start``."""
        if self.needs_start(toolset):
            await self.start(toolset)
        state = self.state(toolset)
        assert state is not None
        return state

    async def start(self, toolset: type[Toolset]) -> Toolset:
        """Start (or restart, after a stop or cancel) one toolset and wait for it."""
        if toolset.scope == "call":
            raise ToolDefinitionError(f"{toolset.__name__} starts for each call: start_for_call")
        owner = self.owner_of(toolset)
        entry = owner._entries.get(toolset)
        if entry is not None and entry.starting is not None:
            await asyncio.shield(entry.starting)
            return entry.instance
        if entry is not None and entry.instance.state in (
            ToolLifecycleState.STARTED,
            ToolLifecycleState.FAILED,
        ):
            return entry.instance
        entry = owner._entries[toolset] = _Entry(toolset())
        entry.starting = asyncio.ensure_future(owner._run_start(entry))
        await asyncio.shield(entry.starting)
        return entry.instance

    async def _run_start(self, entry: _Entry) -> None:
        instance = entry.instance
        instance.cancel_token = self.token.child()
        try:
            await asyncio.wait_for(
                instance.on_start(instance.cancel_token), type(instance).start_timeout
            )
        except Exception as exc:
            instance.state = ToolLifecycleState.FAILED
            instance.error = f"{type(exc).__name__}: {exc}"
            instance.cancel_token.cancel()
            logger.exception("Toolset %s failed to start: %s", type(instance).name, instance.error)
        else:
            instance.state = ToolLifecycleState.STARTED
        finally:
            entry.starting = None

    async def start_for_call(self, toolset: type[Toolset]) -> Toolset:
        """A call-scoped toolset's own instance for one call, started (or failed): ``end_call`` it."""
        instance = toolset()
        self._calls.add(instance)
        await self._run_start(_Entry(instance))
        return instance

    async def end_call(self, instance: Toolset) -> None:
        """Stop a call's instance (unless this session's cancel already ended it)."""
        self._calls.discard(instance)
        await self._end_one(instance, cancel=False)

    async def start_all(self, wait: float | None = None) -> None:
        """Start every toolset of this session's scope concurrently, waiting up to ``wait`` s."""
        wanted = [
            t
            for t in registered_toolsets(self.site)
            if self.owner_of(t) is self and t.scope != "call"
        ]
        if not wanted:
            return
        starting = asyncio.gather(*(self.start(toolset) for toolset in wanted))
        try:
            await asyncio.wait_for(asyncio.shield(starting), wait)
        except TimeoutError:
            logger.warning("Toolsets still starting after %ss; their tools answer not_ready", wait)

    def begin(self) -> asyncio.Task[None]:
        """Start this session's toolsets in the background (their tools are not_ready meanwhile)."""
        for toolset in registered_toolsets(self.site):
            owner = self.owner_of(toolset)
            if toolset.scope != "call" and toolset not in owner._entries:
                entry = owner._entries[toolset] = _Entry(toolset())
                entry.starting = asyncio.ensure_future(owner._run_start(entry))
        return asyncio.ensure_future(self.start_all())

    async def stop(self) -> None:
        """Graceful end: ``on_stop`` for every started toolset held here."""
        await self._end(cancel=False)

    async def cancel(self) -> None:
        """Abrupt end: fire the tokens, then ``on_cancel`` for every started toolset held here."""
        await self._end(cancel=True)

    async def _end(self, *, cancel: bool) -> None:
        entries = list(self._entries.values())
        for entry in entries:
            if entry.starting is not None:
                await asyncio.shield(entry.starting)
        # (a call's instance too: its call is stopped with the session)
        for instance in [entry.instance for entry in entries] + list(self._calls):
            await self._end_one(instance, cancel=cancel)

    async def _end_one(self, instance: Toolset, *, cancel: bool) -> None:
        if instance.state is not ToolLifecycleState.STARTED:
            return
        # (before its hook runs: a stop and a cancel arriving together end it once)
        instance.state = ToolLifecycleState.CANCELLED if cancel else ToolLifecycleState.STOPPED
        try:
            if cancel:
                if instance.cancel_token is not None:
                    instance.cancel_token.cancel()
                await instance.on_cancel()
            else:
                await instance.on_stop()
        except Exception:
            instance.state = ToolLifecycleState.FAILED
            logger.exception(
                "Toolset %s failed to %s", type(instance).name, "cancel" if cancel else "stop"
            )
        finally:
            if instance.cancel_token is not None:
                instance.cancel_token.cancel()


_process_sessions: dict[asyncio.AbstractEventLoop, ToolSession] = {}


def process_session() -> ToolSession | None:
    """This server's process-scoped toolsets, once a server bound them (else None).

    On a loop, that loop's; from a thread with no loop (a sync view of an ASGI server), the
    server loop's, if this process runs exactly one.
    """
    try:
        return _process_sessions.get(asyncio.get_running_loop())
    except RuntimeError:
        running = [s for loop, s in list(_process_sessions.items()) if not loop.is_closed()]
        return running[0] if len(running) == 1 else None


def bind_process_session() -> ToolSession:
    """Called on the server's event loop (first websocket, or ASGI lifespan startup)."""
    loop = asyncio.get_running_loop()
    session = _process_sessions.get(loop)
    if session is None:
        for old in [old for old in _process_sessions if old.is_closed()]:
            del _process_sessions[old]
        session = _process_sessions[loop] = ToolSession(scope="process")
    return session


async def stop_process_session() -> None:
    session = _process_sessions.pop(asyncio.get_running_loop(), None)
    if session is not None:
        await session.stop()


def new_session() -> ToolSession:
    """A session for one chat connection (or one request), attached to the process's toolsets.

    Without a server loop to hold them (a plain sync request), process-scoped toolsets live and
    end with the session.
    """
    return ToolSession(scope="session", parent=process_session())


class LifespanMiddleware:
    """ASGI middleware: start process-scoped toolsets at lifespan startup, stop them at shutdown."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await bind_process_session().start_all()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await stop_process_session()
                await aclose_shared_clients()
                await send({"type": "lifespan.shutdown.complete"})
                return
