"""Publishing a turn's events: numbered, kept for replay, sent to the conversation's sockets.

A publisher sends a burst of frames at a time to the channel-layer group every socket watching
the conversation joins.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Callable
from typing import Any, cast
from urllib.parse import urlsplit

from channels.layers import get_channel_layer

from ..conf import assistant_settings
from .eventlog import RedisEventLog, event_log, scrubbed

logger = logging.getLogger("assistant.broadcast")


def group_name(thread_id: Any) -> str:
    """The channel-layer group every socket watching a conversation joins."""
    return f"assistant.conversation.{thread_id}"


class Publisher:
    """Numbers a turn's frames, keeps them for replay and sends them, in order, in bursts.

    A burst gathers for ``ASSISTANT["BURST_WINDOW"]`` seconds or until ``close``. A turn that
    ends sooner is one burst, sent by ``close`` in the turn's own task; a longer turn's earlier
    bursts go out from a task the window's timer starts, one after another.
    """

    def __init__(self, thread_id: str) -> None:
        self.thread_id = thread_id
        self._pending: list[dict[str, Any]] = []
        self._timer: asyncio.TimerHandle | None = None  # the gathering burst's window
        self._task: asyncio.Task[None] | None = None  # sending a burst whose window ended
        self._closing = False
        self._scrub: Callable[[str], str] | None = None
        # where a burst goes that neither the log nor the layer took (Redis down): the inbox of
        # the socket that started the turn, in this process, which sends what it finds there;
        # others see the stored reply on their resume
        self.undelivered: asyncio.Queue[list[str]] | None = None

    def put(self, frame: dict[str, Any]) -> None:
        self._pending.append(frame)
        if self._timer is None and self._task is None and not self._closing:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(assistant_settings.BURST_WINDOW, self._window_ended)

    def flush(self) -> None:
        """Send what is gathered now, without waiting for its window (the turn is about to wait
        on the outside world: nothing more would join the burst meanwhile)."""
        if self._timer is not None:
            self._timer.cancel()
            self._window_ended()

    def _window_ended(self) -> None:
        self._timer = None
        self._task = asyncio.ensure_future(self._send_due())
        self._task.add_done_callback(self._sent)

    def _sent(self, task: asyncio.Task[None]) -> None:
        """The due burst went (or its task was cancelled, even before it began)."""
        self._task = None
        if self._pending and self._timer is None and not self._closing:
            # put meanwhile: they gather a window of their own
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(assistant_settings.BURST_WINDOW, self._window_ended)

    async def _send_due(self) -> None:
        batch, self._pending = self._pending, []
        await self._send(batch)

    async def _send(self, batch: list[dict[str, Any]]) -> None:
        # A turn's outcome never depends on publishing: a failure is logged, the turn goes on
        # (frames the log could not number go out with ``seq`` 0).
        bodies = []
        for frame in batch:  # each frame is serialised once, without its number
            frame.pop("seq", None)
            bodies.append(json.dumps(frame, separators=(",", ":")))
            frame["seq"] = 0
        log, layer = event_log(), get_channel_layer()
        group = group_name(self.thread_id)
        try:
            channel = published_by(log, layer, group)
        except Exception:  # (channels-redis's internals changed): the layer sends the burst
            logger.exception("Publishing through the event log is unavailable")
            channel = None
        try:
            if channel is not None:  # one round trip: the log's script publishes the burst too
                heard = await cast(RedisEventLog, log).append_published(
                    self.thread_id, batch, bodies, channel
                )
                if heard == 0 and self.undelivered is not None:
                    # no socket subscribed, not even the one that started the turn: Redis is
                    # back from an outage and the subscriptions are not yet
                    self._deliver_here(numbered(bodies, batch))
                return
            await log.append_many(self.thread_id, batch, bodies)
        except Exception as exc:
            logger.exception("Keeping events for replay failed (conversation %s)", self.thread_id)
            if channel is not None and not _refused(exc):
                return  # the reply was lost: the script may have published them already
        if layer is None:
            return
        texts = numbered(bodies, batch)
        try:
            await layer.group_send(group, {"type": "assistant.events", "texts": texts})
        except Exception:
            logger.exception("Sending events failed (conversation %s)", self.thread_id)
            self._deliver_here(texts)

    def _deliver_here(self, texts: list[str]) -> None:
        """The burst to the socket that started the turn, if one did, when no layer carried it."""
        if self.undelivered is not None:
            self.undelivered.put_nowait(texts)

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
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._task is not None:  # the burst before goes first (a cancelled one's stay)
            await asyncio.wait([self._task])
        batch, self._pending = self._pending, []
        if batch:  # sent even if the caller is cancelled meanwhile (a shutdown)
            await asyncio.shield(self._send(batch))
        if self._scrub is not None:
            try:
                await event_log().redact(self.thread_id, self._scrub)
            except Exception:
                logger.exception("Redacting the kept events of %s failed", self.thread_id)


def numbered(bodies: list[str], frames: list[dict[str, Any]]) -> list[str]:
    """What the sockets send as it is: each body with its frame's number added."""
    return [
        f'{body[:-1]},"seq":{frame["seq"]}}}' for body, frame in zip(bodies, frames, strict=True)
    ]


def published_by(log: Any, layer: Any, group: str) -> str | None:
    """The pub/sub channel of ``group`` when the event log's script can publish to it itself.

    That is when the layer is channels-redis's pub/sub layer packing messages as plain msgpack
    (no ``symmetric_encryption_keys``) and the group's shard is the Redis server the log
    writes to (any database: pub/sub channels are server-wide). Otherwise None: the log keeps
    the burst and the layer sends it, two round trips.
    """
    if not isinstance(log, RedisEventLog) or layer is None:
        return None
    if type(layer).__module__ != "channels_redis.pubsub":
        return None
    serializer = getattr(layer, "_serializer", None)
    if type(serializer).__name__ != "MsgPackSerializer":
        return None
    if getattr(serializer, "crypter", None) or getattr(serializer, "random_prefix_length", 0):
        return None
    loop_layer = layer._get_layer()
    channel: str = loop_layer._get_group_channel_name(group)
    address = loop_layer._get_shard(channel).host.get("address")  # (a sentinel config has none)
    if not isinstance(address, str) or not same_server(address, log.url):
        return None
    return channel


@functools.cache
def same_server(first: str, second: str) -> bool:
    """Whether two Redis URLs name one server and user (their databases may differ)."""
    a, b = urlsplit(first), urlsplit(second)
    if "unix" in (a.scheme, b.scheme):
        return (a.scheme, a.path, a.username) == (b.scheme, b.path, b.username)
    # (one user: the log's may publish where the layer's may, under Redis ACLs)
    return (a.hostname, a.port or 6379, a.username) == (b.hostname, b.port or 6379, b.username)


def _refused(exc: Exception) -> bool:
    """Whether the script surely published nothing: Redis answered it with an error (its PUBLISH
    is its last step), or it was never sent (no connection free in time, or none could be made),
    rather than the answer getting lost on the way."""
    from redis.exceptions import ConnectionError, MaxConnectionsError, ResponseError

    if isinstance(exc, ResponseError | MaxConnectionsError):
        return True
    if isinstance(exc, ConnectionError) and isinstance(exc.__cause__, ConnectionRefusedError):
        return True  # (no connection to send it on: Redis is down)
    # (the blocking pool's wait ran out: "No connection available.")
    return isinstance(exc, ConnectionError) and isinstance(exc.__cause__, TimeoutError)
