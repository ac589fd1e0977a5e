"""Toolset lifecycles: cancellation tokens, sessions that start, stop and cancel, process scope."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import threading
import time
from typing import Any, ClassVar

import pytest
from asgiref.sync import sync_to_async

from assistant import (
    CancellationToken,
    ToolCall,
    ToolLifecycleState,
    ToolResult,
    Toolset,
    assistant_tool,
    register_toolset,
)
from assistant.core.lifecycle import (
    LifespanMiddleware,
    ToolSession,
    bind_process_session,
    new_session,
    process_session,
    registered_toolsets,
    stop_process_session,
)
from assistant.core.registry import ToolRegistry, registry
from assistant.dispatch.catalog import get_catalog, visible_tools
from assistant.dispatch.door import adispatch, dispatch
from assistant.exceptions import Cancelled, ToolDefinitionError
from assistant.models import AuditEntry
from assistant.turns.runs import arun_turn
from tests.lifecycles import eventually
from tests.lifecycles import log as log  # a fixture
from tests.testapp import assistant_tools as testapp_tools
from tests.testapp.assistant_tools import Broken, Probe, Sluggish

WAIT = 2.0  # seconds anything that should happen "soon" may take

Started = ToolLifecycleState.STARTED


# -- CancellationToken ---------------------------------------------------------------------------


def test_a_new_token_is_not_cancelled() -> None:
    token = CancellationToken()

    assert not token.is_cancelled
    token.raise_if_cancelled()  # nothing to raise
    assert token.wait(0.01) is False


def test_cancel_is_idempotent() -> None:
    token = CancellationToken()
    calls: list[str] = []
    token.add_callback(lambda: calls.append("fired"))

    token.cancel()
    token.cancel()

    assert token.is_cancelled
    assert calls == ["fired"]


def test_children_are_cancelled_with_their_parent() -> None:
    parent = CancellationToken()
    child = parent.child()
    grandchild = child.child()

    parent.cancel()

    assert child.is_cancelled
    assert grandchild.is_cancelled


def test_cancelling_a_child_leaves_its_parent_and_siblings_running() -> None:
    parent = CancellationToken()
    child, sibling = parent.child(), parent.child()

    child.cancel()

    assert child.is_cancelled
    assert not parent.is_cancelled
    assert not sibling.is_cancelled


def test_a_child_of_a_cancelled_parent_is_born_cancelled() -> None:
    parent = CancellationToken()
    parent.cancel()

    assert parent.child().is_cancelled


def test_callbacks_run_once_on_cancel_unless_removed() -> None:
    token = CancellationToken()
    calls: list[str] = []
    token.add_callback(lambda: calls.append("kept"))
    remove = token.add_callback(lambda: calls.append("removed"))

    remove()
    assert calls == []
    token.cancel()

    assert calls == ["kept"]


def test_a_callback_added_after_cancel_runs_at_once() -> None:
    token = CancellationToken()
    token.cancel()
    calls: list[str] = []

    remove = token.add_callback(lambda: calls.append("late"))

    assert calls == ["late"]
    remove()  # harmless


def test_a_sync_waiter_in_another_thread_wakes_on_cancel() -> None:
    token = CancellationToken()
    woke: list[bool] = []
    waiter = threading.Thread(target=lambda: woke.append(token.wait(5)))
    waiter.start()

    started = time.monotonic()
    token.cancel()
    waiter.join(timeout=WAIT)

    assert woke == [True]
    assert time.monotonic() - started < 1


def test_a_sync_waiter_wakes_when_the_parent_is_cancelled() -> None:
    parent = CancellationToken()
    child = parent.child()
    threading.Timer(0.05, parent.cancel).start()

    started = time.monotonic()
    assert child.wait(5) is True
    assert time.monotonic() - started < 1


async def test_an_async_waiter_wakes_on_cancel() -> None:
    token = CancellationToken()
    waiters = [asyncio.ensure_future(token.cancelled()) for _ in range(3)]
    await asyncio.sleep(0.01)
    assert not any(waiter.done() for waiter in waiters)

    token.cancel()

    await asyncio.wait_for(asyncio.gather(*waiters), WAIT)


async def test_an_async_waiter_wakes_when_another_thread_cancels() -> None:
    token = CancellationToken()
    threading.Timer(0.05, token.cancel).start()

    started = time.monotonic()
    await asyncio.wait_for(token.cancelled(), WAIT)

    assert token.is_cancelled
    assert time.monotonic() - started < 1


async def test_an_async_waiter_on_a_child_wakes_when_the_parent_is_cancelled() -> None:
    parent = CancellationToken()
    waiter = asyncio.ensure_future(parent.child().child().cancelled())
    await asyncio.sleep(0.01)

    parent.cancel()

    await asyncio.wait_for(waiter, WAIT)


async def test_awaiting_an_already_cancelled_token_returns_at_once() -> None:
    token = CancellationToken()
    token.cancel()

    await asyncio.wait_for(token.cancelled(), 0.1)


def test_raise_if_cancelled_raises_cancelled() -> None:
    token = CancellationToken()
    token.cancel()

    with pytest.raises(Cancelled) as raised:
        token.raise_if_cancelled()
    assert raised.value.code == "cancelled"


# -- ToolSession: states -------------------------------------------------------------------------


class TokenWatcher(Toolset):
    """Records whether its token had fired when each hook ran (never registered)."""

    name = "token_watcher"
    seen: ClassVar[list[tuple[str, bool]]] = []

    async def on_stop(self) -> None:
        assert self.cancel_token is not None
        type(self).seen.append(("stop", self.cancel_token.is_cancelled))

    async def on_cancel(self) -> None:
        assert self.cancel_token is not None
        type(self).seen.append(("cancel", self.cancel_token.is_cancelled))
        await super().on_cancel()


async def test_a_toolset_is_created_then_started(
    session: ToolSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Sluggish, "delay", 0.3)
    assert session.state(Sluggish) is None

    starting = asyncio.ensure_future(session.start(Sluggish))
    await asyncio.sleep(0.05)
    assert session.state(Sluggish) is ToolLifecycleState.CREATED
    sluggish = await asyncio.wait_for(starting, WAIT)

    assert sluggish.state is Started
    assert session.state(Sluggish) is Started
    assert session.instance(Sluggish) is sluggish
    assert sluggish.cancel_token is not None
    assert not sluggish.cancel_token.is_cancelled


@pytest.mark.django_db(transaction=True)
async def test_begin_starts_every_session_toolset_in_the_background(
    session: ToolSession, log: list[str]
) -> None:
    starting = session.begin()
    assert session.state(Probe) is ToolLifecycleState.CREATED

    await asyncio.wait_for(starting, WAIT)

    assert session.state(Probe) is Started
    assert session.state(Sluggish) is Started
    assert session.state(testapp_tools.TestDatabase) is None  # scope "call": with each call
    assert session.state(Broken) is ToolLifecycleState.FAILED
    assert log == ["probe:start"]


async def test_stopping_a_session_calls_on_stop(session: ToolSession, log: list[str]) -> None:
    probe = await session.start(Probe)

    await session.stop()

    assert probe.state is ToolLifecycleState.STOPPED
    assert session.state(Probe) is ToolLifecycleState.STOPPED
    assert log[:2] == ["probe:start", "probe:stop"]
    assert "probe:cancel" not in log


async def test_cancelling_a_session_calls_on_cancel_after_the_token_fired(
    session: ToolSession, log: list[str]
) -> None:
    TokenWatcher.seen.clear()
    probe = await session.start(Probe)
    watcher = await session.start(TokenWatcher)

    await session.cancel()

    assert probe.state is ToolLifecycleState.CANCELLED
    assert watcher.state is ToolLifecycleState.CANCELLED
    assert log[:3] == ["probe:start", "probe:cancel", "probe:stop"]  # on_cancel → on_stop
    assert TokenWatcher.seen == [("cancel", True), ("stop", True)]


async def test_a_stopped_toolset_had_its_token_fired_after_on_stop(session: ToolSession) -> None:
    TokenWatcher.seen.clear()
    watcher = await session.start(TokenWatcher)

    await session.stop()

    assert TokenWatcher.seen == [("stop", False)]
    assert watcher.cancel_token is not None
    assert watcher.cancel_token.is_cancelled


async def test_a_background_task_exits_when_the_token_fires(
    session: ToolSession, log: list[str]
) -> None:
    probe = await session.start(Probe)
    assert await eventually(lambda: probe.heartbeats >= 3, within=WAIT)

    session.token.cancel()  # the session's token: each toolset holds a child of it

    assert await eventually(lambda: "probe:background-exit" in log, within=WAIT)
    beats = probe.heartbeats
    await asyncio.sleep(0.05)
    assert probe.heartbeats == beats


@pytest.mark.parametrize("end", ["stop", "cancel"])
async def test_ending_a_session_ends_the_background_task(
    session: ToolSession, log: list[str], end: str
) -> None:
    await session.start(Probe)

    await getattr(session, end)()

    assert await eventually(lambda: "probe:background-exit" in log, within=WAIT)


async def test_a_start_that_overruns_start_timeout_fails(session: ToolSession) -> None:
    class Hanging(Toolset):
        start_timeout = 0.1

        async def on_start(self, cancel: CancellationToken) -> None:
            await asyncio.sleep(30)

    started = time.monotonic()
    hanging = await session.start(Hanging)

    assert time.monotonic() - started < 1
    assert hanging.state is ToolLifecycleState.FAILED
    assert hanging.error.startswith("TimeoutError")


# -- start failure: failed, hidden, unavailable ---------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_a_failed_start_is_recorded_and_logged(
    session: ToolSession, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="assistant.lifecycle")

    broken = await session.start(Broken)

    assert broken.state is ToolLifecycleState.FAILED
    assert broken.error == "ConnectionError: the backend is down"
    assert broken.cancel_token is not None
    assert broken.cancel_token.is_cancelled
    assert session.failed() == {Broken}
    assert "Toolset broken failed to start" in caplog.text


@pytest.mark.django_db(transaction=True)
async def test_a_failed_toolsets_tools_leave_that_sessions_catalog(
    session: ToolSession, diagnostician: Any
) -> None:
    await session.start(Broken)

    visible = sync_to_async(visible_tools)
    here = {tool.operation for tool in await visible(diagnostician, session=session)}
    fresh = ToolSession()
    elsewhere = {tool.operation for tool in await visible(diagnostician, session=fresh)}
    specs = await sync_to_async(get_catalog)(diagnostician, session=session)
    catalog = {spec["function"]["name"] for spec in specs}
    await fresh.stop()

    assert "broken_tool" not in here
    assert "broken_tool" not in catalog
    assert {"probe_state", "sluggish_tool"} <= here
    # another session tries it afresh (as a call there would), and it fails there too
    assert "broken_tool" not in elsewhere
    assert fresh.instance(Broken) is not session.instance(Broken)


@pytest.mark.django_db(transaction=True)
async def test_a_failed_toolsets_tool_answers_unavailable_and_is_audited(
    session: ToolSession, diagnostician: Any
) -> None:
    await session.start(Broken)

    outcome = await adispatch("broken_tool", {}, user=diagnostician, session=session)

    assert outcome.decision == "unavailable"
    assert outcome.code == "unavailable"
    assert outcome.status == 503
    assert outcome.text == "broken_tool is not available right now."
    entry = await AuditEntry.objects.aget(pk=outcome.audit_id)
    assert entry.decision == AuditEntry.Decision.UNAVAILABLE
    assert entry.operation == "broken_tool"


@pytest.mark.django_db(transaction=True)
async def test_a_failed_toolset_is_not_retried_in_the_same_session(
    session: ToolSession, diagnostician: Any
) -> None:
    broken = await session.start(Broken)

    first = await adispatch("broken_tool", {}, user=diagnostician, session=session)
    second = await adispatch("broken_tool", {}, user=diagnostician, session=session)

    assert first.decision == second.decision == "unavailable"
    assert session.instance(Broken) is broken


@pytest.mark.django_db(transaction=True)
async def test_a_toolset_tool_answers_not_ready_while_starting_then_runs(
    session: ToolSession, diagnostician: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Sluggish, "delay", 0.5)
    starting = session.begin()

    early = await adispatch("sluggish_tool", {}, user=diagnostician, session=session)

    assert early.decision == "not_ready"
    assert early.code == "not_ready"
    assert early.text == "sluggish_tool is still starting; try again."
    entry = await AuditEntry.objects.aget(pk=early.audit_id)
    assert entry.decision == AuditEntry.Decision.NOT_READY

    await asyncio.wait_for(starting, WAIT)
    late = await adispatch("sluggish_tool", {}, user=diagnostician, session=session)

    assert late.decision == "executed"
    assert late.text == "ready"


@pytest.mark.django_db(transaction=True)
async def test_permission_is_checked_before_readiness(
    session: ToolSession, plain_user: Any
) -> None:
    await session.start(Broken)

    outcome = await adispatch("broken_tool", {}, user=plain_user, session=session)

    # refused (as a tool unknown to them), never not_ready: readiness would tell it exists
    assert outcome.decision == "unknown"
    assert outcome.code == "unknown_operation"


# -- instances: one per session, restarted on next use -------------------------------------------


def instance_id(outcome: Any) -> int:
    assert outcome.decision == "executed", outcome.text
    return int(outcome.result.data["id"])


@pytest.mark.django_db(transaction=True)
async def test_one_instance_serves_the_whole_session(
    session: ToolSession, diagnostician: Any, log: list[str]
) -> None:
    first = await adispatch("probe_state", {}, user=diagnostician, session=session)
    second = await adispatch("probe_state", {}, user=diagnostician, session=session)

    assert instance_id(first) == instance_id(second) == id(session.instance(Probe))
    assert first.text.startswith("probe started")
    assert log.count("probe:start") == 1


@pytest.mark.django_db(transaction=True)
async def test_a_new_session_gets_a_new_instance(session: ToolSession, diagnostician: Any) -> None:
    other = ToolSession()
    try:
        here = await adispatch("probe_state", {}, user=diagnostician, session=session)
        there = await adispatch("probe_state", {}, user=diagnostician, session=other)

        assert instance_id(here) != instance_id(there)
        assert session.instance(Probe) is not other.instance(Probe)
    finally:
        await other.stop()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("end", ["stop", "cancel"])
async def test_a_stopped_or_cancelled_toolset_restarts_on_next_use(
    session: ToolSession, diagnostician: Any, log: list[str], end: str
) -> None:
    old = await session.start(Probe)
    await getattr(session, end)()

    outcome = await adispatch("probe_state", {}, user=diagnostician, session=session)

    new = session.instance(Probe)
    assert new is not None
    assert new is not old
    assert instance_id(outcome) == id(new)
    assert new.state is Started
    assert new.cancel_token is not None
    assert not new.cancel_token.is_cancelled
    assert log.count("probe:start") == 2


@pytest.mark.django_db(transaction=True)
async def test_a_call_without_a_session_starts_the_toolset_for_itself_and_stops_it(
    diagnostician: Any, log: list[str]
) -> None:
    outcome = await adispatch("probe_state", {}, user=diagnostician)

    assert outcome.decision == "executed"
    assert log[:2] == ["probe:start", "probe:stop"]


@pytest.mark.django_db
def test_sync_dispatch_runs_a_toolset_tool(diagnostician: Any, log: list[str]) -> None:
    outcome = dispatch("probe_state", {}, user=diagnostician)

    assert outcome.decision == "executed"
    assert outcome.text.startswith("probe started")
    assert log[:2] == ["probe:start", "probe:stop"]
    assert AuditEntry.objects.get(pk=outcome.audit_id).decision == "executed"


@pytest.mark.django_db(transaction=True)
async def test_a_turn_without_a_session_stops_the_toolsets_it_started(
    diagnostician: Any, log: list[str]
) -> None:
    result = await arun_turn(diagnostician, "probe state")

    assert [o.decision for o in result.outcomes] == ["executed"]
    assert log[:2] == ["probe:start", "probe:stop"]


# -- call scope ----------------------------------------------------------------------------------


class PerCall(Toolset):
    """A call-scoped toolset declared by a test: it notes each hook, and may wait in a call."""

    name = "lifecycle_test_per_call"
    scope = "call"
    hooks: ClassVar[list[str]] = []
    waiting: ClassVar[asyncio.Event | None] = None

    async def on_start(self, cancel: CancellationToken) -> None:
        self.hooks.append(f"start {id(self)}")

    async def on_stop(self) -> None:
        self.hooks.append(f"stop {id(self)}")

    async def on_cancel(self) -> None:
        self.hooks.append(f"cancel {id(self)}")

    @assistant_tool(
        operation="per_call_here",
        domain="diagnostics",
        description="Report which instance answered, after waiting if asked to",
        risk_level="safe",
        public=True,
    )
    async def per_call_here(self, call: ToolCall, wait: bool = False) -> ToolResult:
        if wait and self.waiting is not None:
            self.waiting.set()
            await asyncio.sleep(WAIT * 5)
        return ToolResult(text=f"instance {id(self)}", data={"id": id(self)})


@pytest.fixture
def per_call_site() -> ToolRegistry:
    site = ToolRegistry("lifecycle-call-test")
    register_toolset(site=site)(PerCall)
    PerCall.hooks = []
    PerCall.waiting = None
    return site


@pytest.mark.django_db(transaction=True)
async def test_a_call_scoped_toolset_starts_for_each_call_and_stops_after_it(
    per_call_site: ToolRegistry, diagnostician: Any, session: ToolSession
) -> None:
    await asyncio.wait_for(session.begin(), WAIT)  # (nothing of it starts with the session)
    assert PerCall.hooks == []

    first, second = [
        await adispatch(
            "per_call_here", {}, user=diagnostician, site=per_call_site, session=session
        )
        for _ in range(2)
    ]

    one, two = first.result.data["id"], second.result.data["id"]
    assert PerCall.hooks == [f"start {one}", f"stop {one}", f"start {two}", f"stop {two}"]
    assert session.state(PerCall) is None  # nothing held between calls


@pytest.mark.django_db(transaction=True)
async def test_cancelling_the_session_cancels_a_call_scoped_instance_mid_call(
    per_call_site: ToolRegistry, diagnostician: Any
) -> None:
    session = ToolSession(site=per_call_site)
    PerCall.waiting = asyncio.Event()
    call = asyncio.ensure_future(
        adispatch(
            "per_call_here",
            {"wait": True},
            user=diagnostician,
            site=per_call_site,
            session=session,
        )
    )
    await asyncio.wait_for(PerCall.waiting.wait(), WAIT)

    await asyncio.wait_for(session.cancel(), WAIT)
    call.cancel()
    with contextlib.suppress(Exception, asyncio.CancelledError):
        await asyncio.wait_for(call, WAIT)

    [started] = [hook for hook in PerCall.hooks if hook.startswith("start")]
    instance = started.split()[1]
    assert PerCall.hooks == [f"start {instance}", f"cancel {instance}"]  # ended once


# -- process scope -------------------------------------------------------------------------------


class Counter(Toolset):
    """A process-scoped toolset declared by a test, registered on a registry of its own."""

    name = "lifecycle_test_counter"
    scope = "process"
    stops: ClassVar[int] = 0

    async def on_stop(self) -> None:
        type(self).stops += 1

    @assistant_tool(
        operation="count_here",
        domain="diagnostics",
        description="Report which counter instance answered",
        risk_level="safe",
        public=True,
    )
    async def count_here(self, call: ToolCall) -> ToolResult:
        return ToolResult(text=f"counter {id(self)}", data={"id": id(self)})


@pytest.fixture
def counter_site() -> ToolRegistry:
    """A fresh registry holding ``Counter`` (its toolsets are its own)."""
    site = ToolRegistry("lifecycle-test")
    register_toolset(site=site)(Counter)
    Counter.stops = 0
    return site


def test_registering_a_toolset_on_another_registry_leaves_the_global_toolsets_alone() -> None:
    before = registered_toolsets()

    class Elsewhere(Toolset):
        name = "lifecycle_test_elsewhere"

        @assistant_tool(
            operation="elsewhere",
            domain="diagnostics",
            description="Lives on a registry of its own",
            risk_level="safe",
            public=True,
        )
        async def elsewhere(self, call: ToolCall) -> ToolResult:
            return ToolResult(text="here")

    site = ToolRegistry("elsewhere")
    register_toolset(site=site)(Elsewhere)

    assert "elsewhere" in site
    assert "elsewhere" not in registry
    # Every session starts (and checks for failure) each globally listed toolset: one
    # declared for another registry must not join them.
    assert registered_toolsets() == before
    assert registered_toolsets(site) == [Elsewhere]


@pytest.mark.django_db(transaction=True)
async def test_a_process_scoped_toolset_is_shared_by_every_session(
    counter_site: ToolRegistry, diagnostician: Any
) -> None:
    process = ToolSession(scope="process")
    first, second = ToolSession(parent=process), ToolSession(parent=process)
    try:
        one = await adispatch(
            "count_here", {}, user=diagnostician, site=counter_site, session=first
        )
        two = await adispatch(
            "count_here", {}, user=diagnostician, site=counter_site, session=second
        )

        assert one.decision == two.decision == "executed"
        assert one.result is not None
        assert two.result is not None
        assert one.result.data["id"] == two.result.data["id"] == id(process.instance(Counter))
        assert first.owner_of(Counter) is process
        assert first.instance(Counter) is process.instance(Counter)

        await first.stop()
        await second.cancel()
        assert process.state(Counter) is Started  # a chat session ending leaves it running
        assert Counter.stops == 0
    finally:
        await process.stop()

    assert process.state(Counter) is ToolLifecycleState.STOPPED
    assert Counter.stops == 1


async def test_without_a_server_loop_a_process_scoped_toolset_lives_with_its_session() -> None:
    assert process_session() is None
    session = new_session()
    try:
        counter = await session.start(Counter)

        assert session.parent is None
        assert session.owner_of(Counter) is session
        assert counter.state is Started
    finally:
        await session.stop()
    assert counter.state is ToolLifecycleState.STOPPED


async def test_a_session_on_a_server_loop_is_attached_to_its_process_session() -> None:
    process = bind_process_session()
    try:
        assert bind_process_session() is process  # one per loop
        assert process_session() is process
        session = new_session()
        assert session.parent is process
        assert session.owner_of(Counter) is process
        assert session.owner_of(Probe) is session
    finally:
        await stop_process_session()
    assert process_session() is None


async def test_lifespan_binds_the_process_session_and_stops_it_at_shutdown() -> None:
    passed_through: list[str] = []

    async def inner(scope: Any, receive: Any, send: Any) -> None:
        passed_through.append(scope["type"])

    app = LifespanMiddleware(inner)
    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    server = asyncio.ensure_future(app({"type": "lifespan"}, inbox.get, send))
    await inbox.put({"type": "lifespan.startup"})
    assert await eventually(lambda: len(sent) == 1, within=WAIT)
    assert sent == [{"type": "lifespan.startup.complete"}]

    process = process_session()
    assert process is not None
    assert process.scope == "process"
    counter = await new_session().start(Counter)  # started on first use, held by the process
    assert process.instance(Counter) is counter
    await app({"type": "http"}, inbox.get, send)

    await inbox.put({"type": "lifespan.shutdown"})
    await asyncio.wait_for(server, WAIT)

    assert sent == [
        {"type": "lifespan.startup.complete"},
        {"type": "lifespan.shutdown.complete"},
    ]
    assert passed_through == ["http"]
    assert counter.state is ToolLifecycleState.STOPPED
    assert process_session() is None


# -- registration mistakes -----------------------------------------------------------------------


def test_register_toolset_refuses_a_class_that_is_not_a_toolset() -> None:
    class NotAToolset:
        pass

    with pytest.raises(ToolDefinitionError, match="needs a Toolset subclass"):
        register_toolset(site=ToolRegistry("mistakes"))(NotAToolset)  # type: ignore[arg-type]


def test_register_toolset_refuses_an_unknown_scope() -> None:
    class Everywhere(Toolset):
        scope = "thread"

        @assistant_tool(
            operation="everywhere",
            domain="diagnostics",
            description="Has a scope nobody knows",
            risk_level="safe",
            public=True,
        )
        async def everywhere(self, call: ToolCall) -> ToolResult:
            return ToolResult(text="here")

    site = ToolRegistry("mistakes")
    with pytest.raises(ToolDefinitionError, match="scope must be 'session', 'process' or 'call'"):
        register_toolset(site=site)(Everywhere)
    assert "everywhere" not in site


def test_register_toolset_refuses_a_toolset_without_tools() -> None:
    before = registered_toolsets()

    class Empty(Toolset):
        name = "lifecycle_test_empty"

    with pytest.raises(ToolDefinitionError, match="needs @assistant_tool methods"):
        register_toolset(site=ToolRegistry("mistakes"))(Empty)
    assert registered_toolsets() == before


def test_a_toolset_method_is_not_registered_on_its_own() -> None:
    class Unregistered(Toolset):
        @assistant_tool(
            operation="lifecycle_test_unregistered",
            domain="diagnostics",
            description="Declared, never registered with its class",
            risk_level="safe",
            public=True,
        )
        async def tool(self, call: ToolCall) -> ToolResult:
            return ToolResult(text="here")

    assert "lifecycle_test_unregistered" not in registry


# -- the dropped-while-started warning -----------------------------------------------------------


class Quiet(Toolset):
    """No background task, so nothing but its session keeps it alive (never registered)."""

    name = "lifecycle_test_quiet"


async def test_a_toolset_dropped_while_started_logs_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="assistant.lifecycle")
    session = ToolSession()
    quiet = await session.start(Quiet)
    assert quiet.state is Started

    del quiet, session
    gc.collect()

    assert "Toolset Quiet was dropped while started: on_stop was never called" in caplog.text


async def test_a_stopped_toolset_is_dropped_quietly(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="assistant.lifecycle")
    session = ToolSession()
    await session.start(Quiet)
    await session.stop()

    del session
    gc.collect()

    assert "dropped while started" not in caplog.text
