"""Where turns run: worker lanes, batched publishing of their events, and stop requests.

Per server process and event loop there are ``MAX_CONCURRENT_TURNS`` lanes, each one sync
thread that keeps its database connection between turns; one control channel that receives
stop requests for every turn running here and news of permission changes; and, per turn, a
publisher that numbers its frames, keeps them for replay and sends them to the
conversation's sockets a burst at a time.
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from asgiref.sync import ThreadSensitiveContext, async_to_sync, sync_to_async
from channels.layers import get_channel_layer
from django.db import close_old_connections

from . import events
from .conf import assistant_settings
from .eventlog import event_log, scrubbed

if TYPE_CHECKING:
    from .lifecycle import CancellationToken

logger = logging.getLogger("assistant.runner")
BATCH_WINDOW = 0.005  # seconds a publisher waits to gather a burst of frames into one send
RELAY_LOOK_BACK = 5.0  # seconds the job relay re-reads behind its watermark


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
                await asyncio.sleep(BATCH_WINDOW)
            batch, self._pending = self._pending, []
            if batch:
                await self._send(batch)
            if self._closing and not self._pending:
                return

    async def _send(self, batch: list[dict[str, Any]]) -> None:
        # A turn's outcome never depends on publishing: a failure is logged, the turn goes on
        # (frames the log could not number go out without a ``seq``).
        try:
            await event_log().append_many(self.thread_id, batch)
        except Exception:
            logger.exception("Keeping events for replay failed (conversation %s)", self.thread_id)
        layer = get_channel_layer()
        if layer is None:
            return
        try:
            await layer.group_send(
                group_name(self.thread_id), {"type": "assistant.events", "frames": batch}
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
        if self._task is not None:
            await asyncio.shield(self._task)
        if self._scrub is not None:
            try:
                await event_log().redact(self.thread_id, self._scrub)
            except Exception:
                logger.exception("Redacting the kept events of %s failed", self.thread_id)


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
                self._ready = None
                ready.set_exception(exc)
                ready.exception()  # whoever waits on it raises; nothing left unretrieved
                raise
            self._tasks = [
                asyncio.ensure_future(self._listen(channel)),
                asyncio.ensure_future(self._rejoin(channel)),
            ]
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
                    from .permissions import permissions_changed

                    permissions_changed(broadcast=False)
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


def broadcast_access_change() -> None:
    """Tell the other server processes that permissions changed (a sync caller's twin)."""
    from channels.layers import InMemoryChannelLayer

    layer = get_channel_layer()
    if layer is None or isinstance(layer, InMemoryChannelLayer):
        return  # no other process to tell
    message = {"type": "assistant.access", "origin": process_id()}
    try:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            async_to_sync(layer.group_send)(CONTROL_GROUP, message)
        else:
            keep(loop.create_task(layer.group_send(CONTROL_GROUP, message)))
    except Exception:
        # Other processes still reload within ASSISTANT["ACCESS_MAX_AGE"] seconds.
        logger.exception("Telling other processes that permissions changed failed")


class _LoopState:
    """What belongs to one event loop: its lanes and its control channel."""

    def __init__(self, lanes: int) -> None:
        self.lanes: asyncio.Queue[ThreadPoolExecutor] = asyncio.Queue()
        for index in range(lanes):
            self.lanes.put_nowait(
                ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"assistant-turn-{index}")
            )
        self.control = Control()


_states: dict[asyncio.AbstractEventLoop, _LoopState] = {}


def loop_state() -> _LoopState:
    loop = asyncio.get_running_loop()
    state = _states.get(loop)
    if state is None:
        for old in [old for old in _states if old.is_closed()]:
            stale = _states.pop(old)  # a closed loop's lanes and listener are gone with it
            while not stale.lanes.empty():
                stale.lanes.get_nowait().shutdown(wait=False)
        state = _states[loop] = _LoopState(assistant_settings.MAX_CONCURRENT_TURNS)
    return state


@asynccontextmanager
async def lane() -> AsyncIterator[None]:
    """Run the body's sync work on a free lane: one thread, its own database connection."""
    lanes = loop_state().lanes
    executor = await lanes.get()
    try:
        async with ThreadSensitiveContext(executor=executor):
            await sync_to_async(close_old_connections)()
            try:
                yield
            finally:
                await sync_to_async(close_old_connections)()
    finally:
        lanes.put_nowait(executor)


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


class JobRelay:
    """Brings job progress and completion from the database to the chat, in every web process.

    Workers only write rows (they may run with no channel layer at all, or another one); while
    sockets are connected, each web process polls for jobs that changed and sends an
    ``assistant.job`` event (and the completion message) to their conversation. It also reaps
    jobs whose worker went silent.
    """

    def __init__(self) -> None:
        self.watchers = 0
        self.task: asyncio.Task[None] | None = None
        # job id → (updated_at last sent, completion message sent): what was already relayed
        # within the look-back window
        self.sent: dict[Any, tuple[Any, bool]] = {}

    def acquire(self) -> None:
        self.watchers += 1
        if self.task is None or self.task.done():
            self.task = asyncio.ensure_future(self._run())

    def release(self) -> None:
        self.watchers = max(0, self.watchers - 1)

    async def _run(self) -> None:
        from django.utils import timezone

        since = timezone.now()
        last_reap = 0.0
        loop = asyncio.get_running_loop()
        while self.watchers > 0:
            await asyncio.sleep(assistant_settings.JOB_RELAY_INTERVAL)
            try:
                since = await self.relay(since)
                if loop.time() - last_reap > assistant_settings.JOB_STALE_AFTER / 2:
                    last_reap = loop.time()
                    from .jobs import reap_stale_jobs

                    await sync_to_async(reap_stale_jobs)()
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("Relaying job progress failed; retrying")

    async def relay(self, since: Any) -> Any:
        """Send what changed after ``since``; returns the new watermark.

        It looks a few seconds behind the watermark: a row committed late, or stamped by a
        worker whose clock runs behind, is still seen; what was already sent is skipped.
        """
        from datetime import timedelta

        window = timedelta(seconds=RELAY_LOOK_BACK)
        changed, messages = await sync_to_async(_changed_jobs)(since - window)
        for job, event in changed:
            last, message_sent = self.sent.get(job.pk, (None, False))
            message = messages.get(job.pk)
            fresh = last is None or job.updated_at > last
            announce = message is not None and not message_sent
            if not (fresh or announce):
                continue
            publisher = Publisher(str(job.conversation_id))
            if fresh:
                publisher.put(_frame(events.custom("assistant.job", event), job.conversation_id))
            if announce:
                for frame in _message_frames(message):
                    publisher.put(frame)
            await publisher.close()
            self.sent[job.pk] = (job.updated_at, message_sent or announce)
            since = max(since, job.updated_at)
        horizon = since - window
        self.sent = {pk: entry for pk, entry in self.sent.items() if entry[0] >= horizon}
        return since


def _changed_jobs(since: Any) -> tuple[list[Any], dict[Any, Any]]:
    from .jobs import job_event
    from .models import Job

    jobs = list(
        Job.objects.filter(updated_at__gt=since, conversation__isnull=False)
        .select_related("completion_message")
        .order_by("updated_at")[:500]
    )
    messages = {job.pk: job.completion_message for job in jobs if job.completion_message}
    return [(job, job_event(job)) for job in jobs], messages


def _frame(event: Any, thread_id: Any) -> dict[str, Any]:
    return events.frame(event, thread_id=str(thread_id), run_id=None)


def _message_frames(message: Any) -> list[dict[str, Any]]:
    message_id = str(message.pk)
    thread_id = message.conversation_id
    return [
        _frame(events.text_start(message_id), thread_id),
        _frame(events.text_content(message_id, message.text), thread_id),
        _frame(events.text_end(message_id), thread_id),
    ]


_relays: dict[asyncio.AbstractEventLoop, JobRelay] = {}


def job_relay() -> JobRelay:
    loop = asyncio.get_running_loop()
    relay = _relays.get(loop)
    if relay is None:
        for old in [old for old in _relays if old.is_closed()]:
            del _relays[old]
        relay = _relays[loop] = JobRelay()
    return relay
