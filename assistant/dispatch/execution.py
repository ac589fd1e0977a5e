"""Running a call: toolsets made ready, the tool's ``prepare``, the handler (sync, async, deadlines)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django.utils.translation import gettext_lazy

from ..core.cancellation import CancellationToken
from ..core.declaration import AssistantTool
from ..core.lifecycle import ToolLifecycleState, ToolSession, Toolset, new_session
from ..core.registry import PREVIEW_KINDS, Prepared, ToolCall, ToolResult
from ..core.storable import shows_something, typed_text
from ..exceptions import Cancelled, InvalidEntities, ToolNotReady, ToolTimeout, ToolUnavailable
from .calls import Call, Decision, DispatchCancelled, Outcome, _as_result


def failed_toolsets(
    toolsets: Iterable[type[Toolset] | None], session: ToolSession | None
) -> dict[type[Toolset], str]:
    """The toolsets a call from here would find failed, with their errors (``make_ready``'s answer).

    Each is readied where that call would run, as ``make_ready`` readies it: in ``session``, or
    without one in a session of its own (a call's own, stopped after), so a context with no
    server loop (WSGI, a command) gets the answer a call would. A call-scoped toolset starts for
    each call and is never judged ahead of one.
    """
    wanted = {t for t in toolsets if t is not None and t.scope != "call"}
    if not wanted:
        return {}
    if session is not None and not any(session.needs_start(t) for t in wanted):
        return _failures(session, wanted)  # (nothing to start: no hop to a loop)
    return async_to_sync(_readied_failures)(wanted, session)


async def _readied_failures(
    wanted: set[type[Toolset]], session: ToolSession | None
) -> dict[type[Toolset], str]:
    where = session if session is not None else new_session()
    try:
        await asyncio.gather(*(where.ready(toolset) for toolset in wanted))
        return _failures(where, wanted)
    finally:
        if session is None:
            await where.stop()


def _failures(session: ToolSession, wanted: set[type[Toolset]]) -> dict[type[Toolset], str]:
    failed = {}
    for toolset in wanted:
        instance = session.instance(toolset)
        if instance is not None and instance.state is ToolLifecycleState.FAILED:
            failed[toolset] = instance.error
    return failed


async def make_ready(call: Call) -> Outcome | None:
    """Find (or start) the call's toolset instance: not_ready while starting, unavailable if failed."""
    tool, session = call.tool, call.context.session
    assert tool is not None
    if tool.toolset is None:
        return None
    assert session is not None
    if tool.toolset.scope == "call":
        call.toolset = await session.start_for_call(tool.toolset)  # (ended by ``release``)
        if call.toolset.state is not ToolLifecycleState.STARTED:
            return call.stop(
                Decision.UNAVAILABLE,
                ToolUnavailable(f"{tool.operation} is not available right now."),
            )
        return None
    state = await session.ready(tool.toolset)
    if state is ToolLifecycleState.CREATED:
        return call.stop(
            Decision.NOT_READY, ToolNotReady(f"{tool.operation} is still starting; try again.")
        )
    instance = session.instance(tool.toolset)
    if instance is None or state is not ToolLifecycleState.STARTED:
        return call.stop(
            Decision.UNAVAILABLE, ToolUnavailable(f"{tool.operation} is not available right now.")
        )
    call.toolset = instance
    return None


async def release(call: Call) -> None:
    """The instance a call-scoped toolset started for this call ends with it."""
    instance, call.toolset = call.toolset, None
    if instance is not None and type(instance).scope == "call":
        assert call.context.session is not None
        await asyncio.shield(call.context.session.end_call(instance))


def prepare(call: Call) -> Outcome | None:
    """The tool's own resolution and checks, before anyone is asked (its ``prepare`` hook)."""
    tool = call.tool
    assert tool is not None and tool.prepare is not None
    try:
        if tool.prepare_is_async:
            prepared = async_to_sync(tool.prepare)(call.tool_call(), **call.values)
        else:
            prepared = tool.prepare(call.tool_call(), **call.values)
    except Exception as exc:
        return call.failed(exc)
    return _prepared(call, prepared)


async def aprepare(call: Call) -> Outcome | None:
    """``prepare`` from the event loop: an async hook awaited, a sync one in the sync thread."""
    tool = call.tool
    assert tool is not None and tool.prepare is not None
    if not tool.prepare_is_async:
        return await sync_to_async(prepare)(call)
    try:
        prepared = await tool.prepare(call.tool_call(), **call.values)
    except Exception as exc:
        return call.failed(exc)
    return await sync_to_async(_prepared)(call, prepared)


def _prepared(call: Call, prepared: Any) -> Outcome | None:
    """Take what the hook made: a reply ends the call (``clarify``), a ``Prepared`` goes on."""
    tool = call.tool
    assert tool is not None
    if isinstance(prepared, ToolResult | str):
        return call.finish(Decision.CLARIFY, result=_as_result(prepared, tool.operation))
    if not isinstance(prepared, Prepared):
        return call.failed(
            TypeError(f"{tool.operation}'s prepare returned {type(prepared).__name__}")
        )
    problem = _misshapen(prepared)
    if problem is not None:
        return call.failed(ValueError(f"{tool.operation}'s prepare returned {problem}"))
    if prepared.entities is not None:
        try:  # the handler gets what prepare resolved, held to the same signature
            call.values = tool.validate(prepared.entities)
        except InvalidEntities as exc:
            return call.failed(TypeError(f"{tool.operation}'s prepare resolved {exc.message}"))
    call.prepared = prepared
    return None


def _misshapen(prepared: Prepared) -> str | None:
    """What in a ``Prepared`` the pending action could not store or show, if anything."""
    if not isinstance(prepared.summary, str):
        return "a summary that is not text"
    if not isinstance(prepared.confirm_phrase, str) or len(prepared.confirm_phrase) > 200:
        return "a confirm phrase that is not text of at most 200 characters"
    if prepared.confirm_phrase and not shows_something(typed_text(prepared.confirm_phrase)):
        return "a confirm phrase with nothing visible to type"  # (an empty answer would match)
    preview = prepared.preview
    if preview is not None and (
        not isinstance(preview, dict) or preview.get("kind") not in PREVIEW_KINDS
    ):
        return "a preview of no known kind"
    return None


# -- running the handler --------------------------------------------------------------------------


def run_sync(call: Call) -> Outcome:
    """Run the handler on this thread (an async one through ``async_to_sync``)."""
    tool = call.tool
    assert tool is not None
    if tool.timeout is not None:
        return _run_sync_with_deadline(call)
    try:
        if tool.is_async:
            value = async_to_sync(_awaited)(tool, call.tool_call(), call.values)
        else:
            value = tool.handler(call.tool_call(), **call.values)
    except Exception as exc:
        return call.failed(exc)
    return _ended(call, value)


def _run_sync_with_deadline(call: Call) -> Outcome:
    """A thread cannot be interrupted: at the deadline the handler's token fires, and whatever
    it returns afterwards is discarded as a timeout (an async handler is cut off outright)."""
    tool = call.tool
    assert tool is not None and tool.timeout is not None
    expired = threading.Event()
    call.cancel = deadline_token = (call.cancel or CancellationToken()).child()

    def expire() -> None:
        expired.set()
        deadline_token.cancel()

    timer = threading.Timer(tool.timeout, expire)
    timer.daemon = True
    timer.start()
    try:
        if tool.is_async:
            value = async_to_sync(_awaited)(tool, call.tool_call(), call.values)
        else:
            value = tool.handler(call.tool_call(), **call.values)
    except TimeoutError as exc:
        return _timed_out(call) if tool.is_async else call.failed(exc)
    except Exception as exc:
        return _timed_out(call) if expired.is_set() else call.failed(exc)
    finally:
        timer.cancel()
    if expired.is_set():
        return _timed_out(call)
    return _ended(call, value)


def _ended(call: Call, value: Any) -> Outcome:
    """A handler returned: its result, unless the run was stopped meanwhile."""
    if call.cancel is not None and call.cancel.is_cancelled:
        outcome = stopped(call, "while running")
        outcome.result = _as_result(value, call.operation) if value is not None else None
        return outcome
    return call.finished(value)


async def run_async(call: Call) -> Outcome:
    """Run the handler from the event loop (a sync one in a thread); a stop raises
    ``DispatchCancelled`` with the call's ``cancelled`` outcome, for the caller to audit."""
    tool = call.tool
    assert tool is not None
    if tool.timeout is not None:
        call.cancel = (call.cancel or CancellationToken()).child()
    tool_call = call.tool_call()
    try:
        if tool.is_async:
            running = tool.handler(tool_call, **call.values)
        else:
            running = sync_to_async(tool.handler)(tool_call, **call.values)
        if tool.timeout is None:
            value = await running
        else:
            value = await asyncio.wait_for(running, tool.timeout)
    except TimeoutError:
        if tool.timeout is None:
            return call.failed(TimeoutError("timed out"))
        assert call.cancel is not None
        call.cancel.cancel()  # a sync handler in its thread sees its token fire
        return _timed_out(call)
    except asyncio.CancelledError:
        # The run was stopped while the handler ran: the caller audits that, then goes on.
        raise DispatchCancelled(stopped(call, "while running")) from None
    except Exception as exc:
        return call.failed(exc)
    return call.finished(value)


async def _awaited(tool: AssistantTool, tool_call: ToolCall, values: dict[str, Any]) -> Any:
    """An async handler run from sync code, cut off at its timeout like on the async path."""
    running = tool.handler(tool_call, **values)
    if tool.timeout is None:
        return await running
    return await asyncio.wait_for(running, tool.timeout)


# What a stopped call's user reads, by when it was stopped (``stopped``'s ``when``).
STOPPED = {
    "while running": gettext_lazy("Stopped while running."),
    "before it ran": gettext_lazy("Stopped before it ran."),
}


def stopped(call: Call, when: str) -> Outcome:
    """The outcome of a call stopped ``when`` (while running, before it ran)."""
    return call.finish(
        Decision.CANCELLED,
        error=Cancelled(STOPPED.get(when, when)),
        error_summary=f"stopped {when}",
    )


def _timed_out(call: Call) -> Outcome:
    assert call.tool is not None
    error = ToolTimeout(
        f"{call.tool.operation} took longer than {call.tool.timeout:g} s and was stopped."
    )
    return call.finish(Decision.TIMEOUT, error=error, error_summary=error.message)


async def in_one_hop(function: Callable[..., Outcome], *args: Any, **kwargs: Any) -> Outcome:
    """Run sync pipeline work in the sync thread; if the run is stopped, wait for what it decided.

    The hop runs in a task of its own, shielded: asgiref would pass a cancellation on into
    whatever the thread awaits through ``async_to_sync`` (an ``on_commit`` telling other
    processes of a change, say), cutting the pipeline short of its audit.
    """
    future = asyncio.ensure_future(sync_to_async(function)(*args, **kwargs))
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        pass
    # A thread cannot be interrupted: the handler sees its token and returns early. Until it
    # does, the hop is waited for through any further cancellation (a shutdown's): nothing of
    # the caller's goes on while the thread may still be writing.
    while True:
        try:
            outcome: Outcome = await asyncio.shield(future)
        except asyncio.CancelledError:
            if future.done():
                raise  # (the hop's own task was cancelled before it began)
            continue
        raise DispatchCancelled(outcome)


def runs_in_loop(tool: AssistantTool | None) -> bool:
    """Whether a tool's call takes the async path: an async handler, or a toolset's (on a loop)."""
    return tool is not None and (tool.is_async or tool.toolset is not None)
