"""Publishing a turn's events: numbered, kept for replay, sent to the conversation's sockets.

A publisher sends a burst of frames at a time to the channel-layer group every socket watching
the conversation joins.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

from channels.layers import get_channel_layer

from .conf import assistant_settings
from .eventlog import event_log, scrubbed

logger = logging.getLogger("assistant.broadcast")


def group_name(thread_id: Any) -> str:
    """The channel-layer group every socket watching a conversation joins."""
    return f"assistant.conversation.{thread_id}"


class Publisher:
    """Numbers a turn's frames, keeps them for replay and sends them, in order, in bursts."""

    def __init__(self, thread_id: str) -> None:
        self.thread_id = thread_id
        self._pending: list[dict[str, Any]] = []
        self._wakeup = asyncio.Event()
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self._nap: asyncio.Future[None] | None = None  # gathering a burst; close() ends it
        self._scrub: Callable[[str], str] | None = None

    def put(self, frame: dict[str, Any]) -> None:
        self._pending.append(frame)
        self._wakeup.set()
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            if not self._closing:
                await self._gather()
            batch, self._pending = self._pending, []
            if batch:
                await self._send(batch)
            if self._closing and not self._pending:
                return

    async def _gather(self) -> None:
        """Wait ``ASSISTANT["BURST_WINDOW"]`` for more frames, or until the turn closes: a turn
        that ends sooner is one burst, however long its steps wait on a busy process."""
        loop = asyncio.get_running_loop()
        self._nap = nap = loop.create_future()
        timer = loop.call_later(assistant_settings.BURST_WINDOW, _wake, nap)
        try:
            await nap
        finally:
            timer.cancel()
            self._nap = None

    async def _send(self, batch: list[dict[str, Any]]) -> None:
        # A turn's outcome never depends on publishing: a failure is logged, the turn goes on
        # (frames the log could not number go out with ``seq`` 0).
        bodies = []
        for frame in batch:  # each frame is serialised once, without its number
            frame.pop("seq", None)
            bodies.append(json.dumps(frame, separators=(",", ":")))
            frame["seq"] = 0
        try:
            await event_log().append_many(self.thread_id, batch, bodies)
        except Exception:
            logger.exception("Keeping events for replay failed (conversation %s)", self.thread_id)
        layer = get_channel_layer()
        if layer is None:
            return
        # what the sockets send as it is: the body with its number added
        texts = [
            f'{body[:-1]},"seq":{frame["seq"]}}}' for body, frame in zip(bodies, batch, strict=True)
        ]
        try:
            await layer.group_send(
                group_name(self.thread_id), {"type": "assistant.events", "texts": texts}
            )
        except Exception:
            logger.exception("Sending events failed (conversation %s)", self.thread_id)

    def redact(self, scrub: Callable[[str], str]) -> None:
        """Pass frames not yet sent through ``scrub``; the kept ones follow once all are sent."""
        self._scrub = scrub
        for frame in self._pending:
            clean = scrubbed(frame, scrub)
            frame.clear()
            frame.update(clean)

    async def close(self) -> None:
        """Send whatever is still pending and stop; every frame has its ``seq`` afterwards."""
        self._closing = True
        self._wakeup.set()
        if self._nap is not None:
            _wake(self._nap)
        if self._task is not None:
            await asyncio.shield(self._task)
        if self._scrub is not None:
            try:
                await event_log().redact(self.thread_id, self._scrub)
            except Exception:
                logger.exception("Redacting the kept events of %s failed", self.thread_id)


def _wake(nap: asyncio.Future[None]) -> None:
    if not nap.done():
        nap.set_result(None)
