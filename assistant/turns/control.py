"""Stop requests and the control channel: one per process and event loop, in the group every
process joins, through which a ``cancel`` reaches the turn it names wherever it runs."""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from typing import TYPE_CHECKING

from channels.layers import get_channel_layer

from ..access.caches import access_changed, credentials_changed, hearing_news

if TYPE_CHECKING:
    from ..core.cancellation import CancellationToken

logger = logging.getLogger("assistant.runner")


CONTROL_GROUP = "assistant.control"
CONTROL_REJOIN = 3600.0  # seconds between re-joins (channel layers expire group members)
_process: tuple[int, str] = (0, "")


def process_id() -> str:
    """This process's name in control messages (a worker forked after import gets its own)."""
    global _process
    if _process[0] != os.getpid():
        _process = (os.getpid(), uuid.uuid4().hex)
    return _process[1]


class Control:
    """One channel per process (and event loop) in the group every process joins.

    It carries stop requests for the turns running here (a ``cancel`` may reach any process)
    and news that permissions changed somewhere, so open chats stop trusting their snapshots.
    Turns register here without a round trip to the channel layer.
    """

    def __init__(self) -> None:
        self._ready: asyncio.Future[str] | None = None
        self._tokens: dict[str, dict[str, CancellationToken]] = {}
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        """Join the control group (once); later calls wait for the first to finish.

        Server processes start it when a socket connects: a long-lived loop that runs turns.
        Short-lived loops (a sync view's or command's turn) never join, so none is left behind.
        """
        layer = get_channel_layer()
        if layer is None:
            return
        if self._ready is None:
            self._ready = asyncio.get_running_loop().create_future()
            ready = self._ready
            try:
                channel = await layer.new_channel()
                await layer.group_add(CONTROL_GROUP, channel)
            except BaseException as exc:
                hearing_news(False)
                self._ready = None
                ready.set_exception(exc)
                ready.exception()  # whoever waits on it raises; nothing left unretrieved
                raise
            self._tasks = [
                asyncio.ensure_future(self._listen(channel)),
                asyncio.ensure_future(self._rejoin(channel)),
            ]
            hearing_news()
            self._ready.set_result(channel)
        await self._ready

    async def _listen(self, channel: str) -> None:
        layer = get_channel_layer()
        assert layer is not None
        while True:
            try:
                message = await layer.receive(channel)
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("Receiving control messages failed; retrying")
                await asyncio.sleep(1)
                continue
            if message.get("type") == "assistant.access":
                if message.get("origin") != process_id():
                    access_changed()
                continue
            if message.get("type") == "assistant.credentials":
                if message.get("origin") != process_id():
                    credentials_changed()
                continue
            runs = self._tokens.get(message.get("thread", ""), {})
            for run_id, token in list(runs.items()):
                if message.get("run") in (None, run_id):
                    token.cancel()

    async def _rejoin(self, channel: str) -> None:
        layer = get_channel_layer()
        assert layer is not None
        while True:
            await asyncio.sleep(CONTROL_REJOIN)
            try:
                await layer.group_add(CONTROL_GROUP, channel)
            except Exception:
                logger.exception("Re-joining the control group failed; trying again later")

    def register(self, thread_id: str, run_id: str, token: CancellationToken) -> None:
        """Let stop requests for this run reach its token (from any process, once started)."""
        self._tokens.setdefault(thread_id, {})[run_id] = token

    def unregister(self, thread_id: str, run_id: str) -> None:
        runs = self._tokens.get(thread_id)
        if runs is not None:
            runs.pop(run_id, None)
            if not runs:
                del self._tokens[thread_id]


async def request_stop(thread_id: str, run_id: str | None = None) -> None:
    """Ask whichever process runs a turn on this conversation to stop it (or one run of it)."""
    layer = get_channel_layer()
    if layer is not None:
        await layer.group_send(
            CONTROL_GROUP, {"type": "assistant.cancel", "thread": str(thread_id), "run": run_id}
        )
