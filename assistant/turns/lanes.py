"""Where turns run: per event loop, ``MAX_CONCURRENT_TURNS`` slots bound the turns in flight and
one control channel (``control``) hears stop requests; a turn's sync steps run on the process's
turn threads (``threads``), with a request's connection hygiene; its background tasks are kept.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.db import close_old_connections, connections

from ..conf import assistant_settings
from .control import Control
from .threads import turn_threads

logger = logging.getLogger("assistant.runner")


class _LoopState:
    """What belongs to one event loop: its turn slots and its control channel."""

    def __init__(self, slots: int) -> None:
        self.slots = asyncio.Semaphore(slots)
        self.control = Control()


_states: dict[asyncio.AbstractEventLoop, _LoopState] = {}


def loop_state() -> _LoopState:
    loop = asyncio.get_running_loop()
    state = _states.get(loop)
    if state is None:
        for old in [old for old in _states if old.is_closed()]:
            del _states[old]  # a closed loop's slots and listener are gone with it
        state = _states[loop] = _LoopState(assistant_settings.MAX_CONCURRENT_TURNS)
    return state


class Hygiene:
    """A turn's connection hygiene, as a request has it: old connections are closed when a turn
    begins and when it ends, inside the turn's own first and last steps (no hops of their own)."""

    def __init__(self) -> None:
        self.ended = False

    def begin(self) -> None:
        """Called first in the turn's first sync step."""
        close_old_connections()

    def end(self) -> None:
        """Called last in the turn's last sync step (else ``on_turn_threads`` does it in a hop of
        its own): a connection kept for no time (``CONN_MAX_AGE`` 0) closes, as at a request's
        end. Kept ones are left for the next turn's ``begin``: that thread's connection may not
        be the one this turn began on, and marking it checked anew would cost its next step a
        health check (``CONN_HEALTH_CHECKS``), a second one a turn."""
        for connection in connections.all(initialized_only=True):
            if connection.settings_dict.get("CONN_MAX_AGE") == 0:
                connection.close_if_unusable_or_obsolete()
        self.ended = True


@asynccontextmanager
async def on_turn_threads() -> AsyncIterator[Hygiene]:
    """Run the body's sync steps on the process's turn threads: each step takes a thread (and
    its database connection) for as long as it runs, none is held between steps.

    The body calls ``begin()`` in its first sync step and, where it can, ``end()`` in its last.
    """
    async with ThreadSensitiveContext(executor=turn_threads()):
        hygiene = Hygiene()
        try:
            yield hygiene
        finally:
            if not hygiene.ended:
                await sync_to_async(hygiene.end)()


@asynccontextmanager
async def turn_slot(queued: Callable[[], Awaitable[None]] | None = None) -> AsyncIterator[None]:
    """Hold one of this process's ``MAX_CONCURRENT_TURNS`` slots; ``queued`` is awaited first
    when none is free (to tell the user the turn waits)."""
    slots = loop_state().slots
    if slots.locked() and queued is not None:
        await queued()
    async with slots:
        yield


RUNNING: set[asyncio.Task[Any]] = set()


def keep(task: asyncio.Task[Any]) -> asyncio.Task[Any]:
    """Hold a reference to a background task while it runs, and log how it failed, if it did."""
    RUNNING.add(task)
    task.add_done_callback(_forget)
    return task


def _forget(task: asyncio.Task[Any]) -> None:
    RUNNING.discard(task)
    if not task.cancelled() and task.exception() is not None:
        logger.error("A background turn failed", exc_info=task.exception())
