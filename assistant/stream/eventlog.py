"""Recent events per conversation, numbered, for replay after a reconnect (memory or Redis)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from django.core.signals import setting_changed
from django.dispatch import receiver

from ..conf import assistant_settings


def first_seq() -> int:
    """Where a conversation's numbering starts when its log has no counter: now, in microseconds.

    A counter goes when its log expires (``EVENT_LOG_TTL`` after the last event), Redis loses it
    or the process restarts; numbers that started again at 1 would fall below what open tabs
    last saw, and they drop frames numbered at or below that as already shown. Starting from the
    clock keeps every new number above the old ones (well below 2**53: exact in JavaScript).
    """
    return time.time_ns() // 1000


def is_gap(after: int, oldest: int, last: int) -> bool:
    """Whether a client that saw up to ``after`` missed frames the log no longer has: some were
    trimmed, or the numbering started again (after a number this log never reached)."""
    return after > last or (after < last and oldest > after + 1)


@dataclass(frozen=True, slots=True)
class Replay:
    """Frames numbered above what a client saw, whether some were already dropped, the last seq."""

    frames: list[dict[str, Any]]
    gap: bool
    last: int


class EventLog(Protocol):
    async def append_many(
        self, thread_id: str, frames: list[dict[str, Any]], bodies: list[str] | None = None
    ) -> int:
        """Number and keep several frames at once, in order; returns the last number.

        ``bodies``, when given, are the frames already serialised as compact JSON, without
        their ``seq``.
        """

    async def since(self, thread_id: str, after: int) -> Replay:
        """Frames numbered above ``after`` (and whether any in between were already dropped)."""

    async def redact(self, thread_id: str, scrub: Callable[[str], str]) -> int:
        """Rewrite every kept frame's text through ``scrub``; returns how many frames changed."""


@dataclass(slots=True)
class _Kept:
    """One conversation's log in memory: its counter, its recent frames, when it last grew."""

    counter: int
    frames: deque[dict[str, Any]]
    touched: float


class MemoryEventLog:
    """One process's log: the embedded default (in-memory channel layer, one server process).

    As in Redis, a conversation's log goes ``ttl`` seconds after its last event (the oldest are
    forgotten as others grow): a long-running process does not keep every conversation it saw.
    """

    def __init__(self, keep: int, ttl: float = 86400) -> None:
        self.keep = keep
        self.ttl = ttl
        self._lock = threading.Lock()
        self._logs: dict[str, _Kept] = {}  # the least recently grown first

    def _live(self, thread_id: str, now: float) -> _Kept | None:
        log = self._logs.get(thread_id)
        return log if log is not None and now - log.touched < self.ttl else None

    async def append_many(
        self, thread_id: str, frames: list[dict[str, Any]], bodies: list[str] | None = None
    ) -> int:
        with self._lock:
            now = time.monotonic()  # (under the lock: the logs stay in the order they grew)
            log = self._live(thread_id, now)
            self._logs.pop(thread_id, None)
            if log is None:
                log = _Kept(first_seq(), deque(maxlen=self.keep), now)
            self._logs[thread_id] = log  # (last: the most recently grown)
            log.touched = now
            for frame in frames:
                log.counter += 1
                frame["seq"] = log.counter
                log.frames.append(frame)
            while True:  # the least recently grown go once their time is up
                stale = next(iter(self._logs))
                if now - self._logs[stale].touched < self.ttl:
                    break
                del self._logs[stale]
            return log.counter

    async def since(self, thread_id: str, after: int) -> Replay:
        with self._lock:
            log = self._live(thread_id, time.monotonic())
            if log is None:
                return Replay([], is_gap(after, 1, 0), 0)
            kept = [frame for frame in log.frames if frame["seq"] > after]
            oldest = log.frames[0]["seq"] if log.frames else log.counter + 1
            last = log.counter
        return Replay(kept, is_gap(after, oldest, last), last)

    async def redact(self, thread_id: str, scrub: Callable[[str], str]) -> int:
        changed = 0
        with self._lock:
            log = self._logs.get(thread_id)
            for frame in log.frames if log is not None else ():
                clean = scrubbed(frame, scrub)
                if clean != frame:
                    frame.clear()
                    frame.update(clean)  # in place: whoever holds the frame sees it redacted
                    changed += 1
        return changed


CLUSTER_SCHEMES = ("redis+cluster://", "rediss+cluster://")
POOL_SIZE = 100  # connections to Redis per event loop, at most
POOL_WAIT = 10.0  # seconds a burst may wait for one


def cluster_url(url: str) -> str | None:
    """The first node's plain URL when ``url`` names a Redis Cluster (``redis+cluster://``)."""
    if not url.startswith(CLUSTER_SCHEMES):
        return None
    return url.replace("+cluster://", "://", 1)


class RedisEventLog:
    """Shared by every server process: a counter and a sorted set per conversation, with a TTL.

    On a Redis Cluster (a ``redis+cluster://`` URL) both keys of a conversation share one hash
    tag, so its script and transactions stay in one slot.
    """

    def __init__(self, url: str, keep: int, ttl: int) -> None:
        self.url = url
        self.keep = keep
        self.ttl = ttl
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = (
            weakref.WeakKeyDictionary()
        )
        self._append: Any = None

    def _client(self) -> Any:
        import redis.asyncio as redis

        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            cluster = cluster_url(self.url)
            if cluster is not None:
                client = redis.RedisCluster.from_url(cluster)
            else:
                # A burst waits for a free connection rather than failing at once (the default
                # pool raises MaxConnectionsError past 100: 400 turns at once lost their frames).
                pool = redis.BlockingConnectionPool.from_url(
                    self.url, max_connections=POOL_SIZE, timeout=POOL_WAIT
                )
                client = redis.Redis.from_pool(pool)
            self._clients[loop] = client
        return client

    @staticmethod
    def _keys(thread_id: str) -> tuple[str, str]:
        # One hash tag for both: a Redis Cluster keeps them in one slot, as the script needs.
        return f"assistant:events:{{{thread_id}}}:seq", f"assistant:events:{{{thread_id}}}:frames"

    async def append_many(
        self,
        thread_id: str,
        frames: list[dict[str, Any]],
        bodies: list[str] | None = None,
        publish: str | None = None,
    ) -> int:
        """As ``EventLog.append_many``; with ``publish`` (a channels-redis pub/sub channel on
        this log's Redis, msgpack without encryption), the script also publishes the burst
        there, as the layer's ``group_send`` of ``{"type": "assistant.events", "texts": [...]}``
        would: one round trip for both."""
        last, _ = await self._append_burst(thread_id, frames, bodies, publish)
        return last

    async def append_published(
        self, thread_id: str, frames: list[dict[str, Any]], bodies: list[str], channel: str
    ) -> int:
        """As ``append_many`` with ``publish``; returns how many subscribers heard the burst
        (PUBLISH's count: none while the sockets' subscriptions are not back after an outage),
        or -1 when that is unknown: on a cluster PUBLISH counts only its own node's."""
        _, heard = await self._append_burst(thread_id, frames, bodies, channel)
        return -1 if cluster_url(self.url) is not None else heard

    async def _append_burst(
        self,
        thread_id: str,
        frames: list[dict[str, Any]],
        bodies: list[str] | None,
        publish: str | None,
    ) -> tuple[int, int]:
        client = self._client()
        if self._append is None:
            self._append = client.register_script(APPEND_SCRIPT)
        if bodies is None:
            bodies = [json.dumps(_unnumbered(frame), separators=(",", ":")) for frame in frames]
        # one argument for the whole burst: compact JSON never holds a raw newline
        payload = "\n".join(bodies)
        last, heard = await self._append(
            keys=self._keys(thread_id),
            args=[self.keep, self.ttl, len(frames), payload, first_seq() - 1, publish or ""],
            client=client,
        )
        last = int(last)
        for offset, frame in enumerate(frames):
            frame["seq"] = last - len(frames) + 1 + offset
        return last, int(heard)

    async def since(self, thread_id: str, after: int) -> Replay:
        client = self._client()
        seq_key, frames_key = self._keys(thread_id)
        async with client.pipeline(transaction=True) as pipe:  # one moment: last matches frames
            pipe.get(seq_key)
            pipe.zrange(frames_key, 0, 0, withscores=True)
            pipe.zrangebyscore(frames_key, f"({after}", "+inf", withscores=True)
            last, oldest, raw = await pipe.execute()
        last = int(last or 0)
        oldest_seq = int(oldest[0][1]) if oldest else last + 1
        frames = [_stored_frame(member, seq) for member, seq in raw]
        return Replay(frames, is_gap(after, oldest_seq, last), last)

    async def redact(self, thread_id: str, scrub: Callable[[str], str]) -> int:
        client = self._client()
        _, frames_key = self._keys(thread_id)
        changes = []
        for member, seq in await client.zrange(frames_key, 0, -1, withscores=True):
            frame = _stored_frame(member, seq)
            clean = scrubbed(frame, scrub)
            if clean != frame:
                del clean["seq"]
                payload = json.dumps(clean, separators=(",", ":"))
                changes.append((member, int(seq), f"{int(seq)} {payload}"))
        if changes:
            async with client.pipeline(transaction=True) as pipe:
                for old, seq, new in changes:
                    pipe.zrem(frames_key, old)
                    pipe.zadd(frames_key, {new: seq})
                await pipe.execute()
        return len(changes)


# Number a batch, keep it and trim the log in one round trip. A member is "<seq> <json>": the
# number makes equal frames distinct members and is the frame's "seq" when it is read back. A
# counter that is gone starts again from ARGV[5] (first_seq, less one). With ARGV[6] (a pub/sub
# channel) the burst is published there too, last (an error before it published nothing), each
# frame with its "seq", packed as channels-redis packs a group message (msgpack; Redis's
# cmsgpack packs a Lua string as a msgpack str). It returns the last number and how many
# subscribers heard the burst (-1: not published).
APPEND_SCRIPT = """
local count = tonumber(ARGV[3])
redis.call('SET', KEYS[1], ARGV[5], 'NX')
local last = redis.call('INCRBY', KEYS[1], count)
local seq = last - count
local texts = {}
for frame in string.gmatch(ARGV[4], '[^\\n]+') do
    seq = seq + 1
    local number = string.format('%d', seq)
    redis.call('ZADD', KEYS[2], seq, number .. ' ' .. frame)
    if ARGV[6] ~= '' then
        texts[#texts + 1] = string.sub(frame, 1, -2) .. ',"seq":' .. number .. '}'
    end
end
redis.call('ZREMRANGEBYRANK', KEYS[2], 0, -tonumber(ARGV[1]) - 1)
redis.call('EXPIRE', KEYS[2], ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[2])
local heard = -1
if ARGV[6] ~= '' then
    heard = redis.call('PUBLISH', ARGV[6], cmsgpack.pack({type = 'assistant.events', texts = texts}))
end
return {last, heard}
"""


def scrubbed(value: Any, scrub: Callable[[str], str]) -> Any:
    """A copy of a frame (or any JSON value) with every string passed through ``scrub``."""
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        return {scrub(str(key)): scrubbed(item, scrub) for key, item in value.items()}
    if isinstance(value, list):
        return [scrubbed(item, scrub) for item in value]
    return value


def _unnumbered(frame: dict[str, Any]) -> dict[str, Any]:
    """The frame as it is kept: its number is the member's, not the JSON's."""
    return {key: value for key, value in frame.items() if key != "seq"}


def _stored_frame(member: bytes, seq: float) -> dict[str, Any]:
    frame: dict[str, Any] = json.loads(member.partition(b" ")[2])
    frame["seq"] = int(seq)
    return frame


_log: EventLog | None = None


def event_log() -> EventLog:
    """The configured log: ``ASSISTANT["EVENT_LOG"]`` is None (memory) or a Redis URL."""
    global _log
    if _log is None:
        url = assistant_settings.EVENT_LOG
        keep = assistant_settings.EVENT_LOG_KEEP
        if url:
            _log = RedisEventLog(url, keep=keep, ttl=assistant_settings.EVENT_LOG_TTL)
        else:
            _log = MemoryEventLog(keep=keep, ttl=assistant_settings.EVENT_LOG_TTL)
    return _log


@receiver(setting_changed)
def _reset_on_change(*, setting: str, **kwargs: Any) -> None:
    global _log
    if setting == "ASSISTANT":
        _log = None
