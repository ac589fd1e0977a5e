"""Where turns run: worker lanes, stop requests and news of permission changes.

Per server process and event loop there are ``MAX_CONCURRENT_TURNS`` lanes, each one sync
thread (started when first needed) that keeps its database connection between turns while it is
busy and closes it after ``LANE_IDLE_CLOSE`` idle seconds; and one control channel that receives
stop requests for every turn running here and news of permission changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import uuid
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from asgiref.sync import ThreadSensitiveContext, async_to_sync, sync_to_async
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.db import close_old_connections, connections, transaction
from django.db.models.signals import m2m_changed, post_delete, post_save

from .conf import assistant_settings
from .permissions import USER_FLAGS, access_changed, hearing_news

if TYPE_CHECKING:
    from .cancellation import CancellationToken

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


def permissions_changed(*, broadcast: bool = True) -> None:
    """Make every access snapshot in this process stale, and (by default) in every other one."""
    access_changed()
    if broadcast:
        broadcast_access_change()


def _on_access_change(sender: Any, **kwargs: Any) -> None:
    action = kwargs.get("action")
    if action is not None and not action.startswith("post_"):
        return  # m2m_changed: only once the change is made
    update_fields = kwargs.get("update_fields")
    if update_fields is not None and not set(update_fields) & set(USER_FLAGS):
        return  # e.g. a login stamping last_login
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group, Permission

    if kwargs.get("created") and sender in (get_user_model(), Group, Permission):
        return  # a new user, group or permission: nobody holds anything through it yet
    transaction.on_commit(permissions_changed, using=kwargs.get("using"))


def watch_access_changes() -> None:
    """Connect the receivers that make access snapshots stale when permissions change."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group, Permission
    from guardian.utils import get_group_obj_perms_model, get_user_obj_perms_model

    user_model = get_user_model()
    for model in (
        user_model,
        Group,
        Permission,
        get_user_obj_perms_model(),
        get_group_obj_perms_model(),
    ):
        post_save.connect(_on_access_change, sender=model, dispatch_uid=f"assistant.{model}.save")
        post_delete.connect(
            _on_access_change, sender=model, dispatch_uid=f"assistant.{model}.delete"
        )
    for relation in (
        getattr(user_model, "groups", None),
        getattr(user_model, "user_permissions", None),
        Group.permissions,
    ):
        through = getattr(relation, "through", None)
        if through is not None:
            m2m_changed.connect(
                _on_access_change, sender=through, dispatch_uid=f"assistant.{through}.m2m"
            )


class Lane:
    """One turn lane: a sync thread of its own, so its database connection is its own too."""

    def __init__(self, index: int) -> None:
        self.executor = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=f"assistant-turn-{index}"
        )
        self.idle_since: float | None = None  # None: running a turn, or its connection is closed
        self.timer: asyncio.TimerHandle | None = None


def _close_lane_connections() -> None:
    """Close this lane thread's database connections (it has been idle a while)."""
    try:
        connections.close_all()
    except Exception:
        logger.exception("Closing an idle lane's database connection failed")


class _LoopState:
    """What belongs to one event loop: its lanes and its control channel.

    Free lanes are taken last released first: a steady load keeps reusing the same few lanes
    (and their connections), so the lanes a burst woke go idle and close theirs. A process then
    holds about as many connections as it ran turns at once in the last ``LANE_IDLE_CLOSE``
    seconds, not ``MAX_CONCURRENT_TURNS``.
    """

    def __init__(self, lanes: int) -> None:
        self.lanes: asyncio.LifoQueue[Lane] = asyncio.LifoQueue()
        for index in reversed(range(lanes)):
            self.lanes.put_nowait(Lane(index))  # lane 0 on top
        self.control = Control()

    async def take(self) -> Lane:
        lane = await self.lanes.get()
        lane.idle_since = None
        return lane

    def release(self, lane: Lane) -> None:
        """Give a lane back; unless it runs another turn first, its connection closes when idle."""
        idle = assistant_settings.LANE_IDLE_CLOSE
        if idle is not None:
            loop = asyncio.get_running_loop()
            lane.idle_since = loop.time()
            if lane.timer is None:  # (a pending one looks again when it fires)
                lane.timer = loop.call_later(idle, self._close_if_idle, lane)
        self.lanes.put_nowait(lane)

    def _close_if_idle(self, lane: Lane) -> None:
        lane.timer = None
        if lane.idle_since is None:
            return  # running a turn; released again, it starts a new timer
        loop = asyncio.get_running_loop()
        idle = assistant_settings.LANE_IDLE_CLOSE or 0.0
        left = lane.idle_since + idle - loop.time()
        if left > 0:  # it ran a turn since the timer was set
            lane.timer = loop.call_later(left, self._close_if_idle, lane)
            return
        lane.idle_since = None
        # On the lane's own thread, where its connection lives; a turn that takes the lane
        # meanwhile queues behind this and opens a fresh connection. (RuntimeError: the lane was
        # shut down with a closed loop's.)
        with contextlib.suppress(RuntimeError):
            lane.executor.submit(_close_lane_connections)


_states: dict[asyncio.AbstractEventLoop, _LoopState] = {}


def loop_state() -> _LoopState:
    loop = asyncio.get_running_loop()
    state = _states.get(loop)
    if state is None:
        for old in [old for old in _states if old.is_closed()]:
            stale = _states.pop(old)  # a closed loop's lanes and listener are gone with it
            while not stale.lanes.empty():
                stale.lanes.get_nowait().executor.shutdown(wait=False)
        state = _states[loop] = _LoopState(assistant_settings.MAX_CONCURRENT_TURNS)
    return state


class Hygiene:
    """A lane's connection hygiene, as a request has it: old connections are closed when a turn
    begins and when it ends, inside the turn's own first and last hops (no hops of their own)."""

    def __init__(self) -> None:
        self.ended = False

    def begin(self) -> None:
        """Called first in the turn's first sync step."""
        close_old_connections()

    def end(self) -> None:
        """Called last in the turn's last sync step (else the lane does it in a hop of its own)."""
        close_old_connections()
        self.ended = True


@asynccontextmanager
async def lane() -> AsyncIterator[Hygiene]:
    """Run the body's sync work on a free lane: one thread, its own database connection.

    The body calls ``begin()`` in its first sync step and, where it can, ``end()`` in its last.
    """
    state = loop_state()
    taken = await state.take()
    try:
        async with ThreadSensitiveContext(executor=taken.executor):
            hygiene = Hygiene()
            try:
                yield hygiene
            finally:
                if not hygiene.ended:
                    await sync_to_async(close_old_connections)()
    finally:
        state.release(taken)


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
