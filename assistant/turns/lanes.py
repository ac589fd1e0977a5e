"""Where turns run: turn threads and slots, stop requests and news of permission changes.

Per server process, ``TURN_THREADS`` threads run the turns' short synchronous steps, each
with its own database connection, closed after ``LANE_IDLE_CLOSE`` idle seconds; a turn awaiting
its model holds none of them. Per event loop, ``MAX_CONCURRENT_TURNS`` slots bound the turns in
flight, and one control channel receives stop requests for every turn running here and news of
permission changes.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import queue
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import Executor, Future
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from asgiref.sync import ThreadSensitiveContext, async_to_sync, sync_to_async
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.db import close_old_connections, connections, transaction
from django.db.models.signals import m2m_changed, post_delete, post_save

from ..access.permissions import USER_FLAGS, access_changed, credentials_changed, hearing_news
from ..conf import assistant_settings
from ..models import AccessToken

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


def broadcast_access_change(kind: str = "assistant.access") -> None:
    """Tell the other server processes that permissions changed (a sync caller's twin), or
    with ``kind="assistant.credentials"`` that a session ended or a token was revoked."""
    layer = get_channel_layer()
    if layer is None or isinstance(layer, InMemoryChannelLayer):
        return  # no other process to tell
    message = {"type": kind, "origin": process_id()}
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
    if update_fields is not None and not set(update_fields) & {*USER_FLAGS, "password"}:
        return  # e.g. a login stamping last_login (a password ends the user's other sessions)
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
    watch_credential_changes()


def ended_credentials() -> None:
    """Make every credential found holding stale, in this process and every other one."""
    credentials_changed()
    broadcast_access_change("assistant.credentials")


def _on_credential_change(sender: Any, **kwargs: Any) -> None:
    if kwargs.get("created"):
        return  # a new session or token ends nothing
    transaction.on_commit(ended_credentials, using=kwargs.get("using"))


def watch_credential_changes() -> None:
    """Make every credential found holding (``Credential.known_to_hold``) stale, in every process,
    when a session ends (signing out deletes it) or a token is revoked or deleted."""
    from importlib import import_module

    from django.apps import apps
    from django.conf import settings
    from django.contrib.sessions.backends.db import SessionStore

    models: list[Any] = [AccessToken]
    store = import_module(settings.SESSION_ENGINE).SessionStore
    if issubclass(store, SessionStore):  # (a session in the cache alone ends unseen)
        models.append(store.get_model_class())
    if apps.is_installed("rest_framework.authtoken"):
        models.append(apps.get_model("authtoken", "Token"))
    if apps.is_installed("oauth2_provider"):
        from oauth2_provider.models import get_access_token_model

        models.append(get_access_token_model())
    for model in models:
        post_delete.connect(
            _on_credential_change, sender=model, dispatch_uid=f"assistant.{model}.ends"
        )
    # a token's revocation is a save (a session's saves are every request's: not watched)
    post_save.connect(_on_credential_change, sender=AccessToken, dispatch_uid="assistant.revoked")
    if apps.is_installed("oauth2_provider"):
        model = get_access_token_model()
        post_save.connect(_on_credential_change, sender=model, dispatch_uid="assistant.expires")


class _Worker:
    """One thread of ``TurnThreads``: it runs what it is handed, one call at a time."""

    def __init__(self, pool: TurnThreads, index: int) -> None:
        self.pool = pool
        self.handoff: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self.thread = threading.Thread(
            target=self._run, name=f"assistant-turn-{index}", daemon=True
        )

    def _run(self) -> None:
        while True:
            item = self._next_or_wait()
            if item is None:
                return
            future, fn, args, kwargs = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:
                future.set_exception(exc)
            else:
                future.set_result(result)
            del item, future, fn, args, kwargs

    def _next_or_wait(self) -> _Item | None:
        item = self.pool.next_for(self)
        if item is not None or self.pool.stopped:
            return item
        idle = assistant_settings.LANE_IDLE_CLOSE
        try:
            return self.handoff.get(timeout=idle)
        except queue.Empty:
            _close_lane_connections()  # idle a while: its database connection goes
            return self.handoff.get()


_Item = tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class TurnThreads(Executor):
    """The threads that run turns' short synchronous steps (store a message, run a tool, audit).

    At most ``size`` threads, each with its own database connection, started as needed; a
    step that finds all busy waits for the first free one. The thread idle the shortest time is
    handed the next step, so a steady load keeps reusing the same few (and their connections)
    while the ones a burst woke close theirs after ``LANE_IDLE_CLOSE`` idle seconds: a process
    holds about as many connections as it ran steps at once lately, whatever its turns await.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []  # most recently idle last
        self._backlog: collections.deque[_Item] = collections.deque()
        self._workers: list[_Worker] = []
        self._shutdown = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        item: _Item = (future, fn, args, kwargs)
        with self._lock:
            if self._shutdown:
                raise RuntimeError("TurnThreads is shut down")
            if self._idle:
                self._idle.pop().handoff.put(item)
            elif len(self._workers) < self.size:
                worker = _Worker(self, len(self._workers))
                self._workers.append(worker)
                worker.handoff.put(item)
                worker.thread.start()
            else:
                self._backlog.append(item)
        return future

    def next_for(self, worker: _Worker) -> _Item | None:
        """The next waiting step for a worker that finished one, or None (it goes idle)."""
        with self._lock:
            if self._backlog:
                return self._backlog.popleft()
            if self._shutdown:
                return None
            self._idle.append(worker)
            return None

    @property
    def stopped(self) -> bool:
        return self._shutdown

    @property
    def busy(self) -> int:
        """How many threads are running a step now."""
        with self._lock:
            return len(self._workers) - len(self._idle)

    def close_connections(self) -> None:
        """Close the idle threads' database connections now (tests, before their database goes)."""
        with self._lock:
            idle = list(self._idle)
            self._idle.clear()
        done = [self._hand(worker, _close_lane_connections) for worker in idle]
        for future in done:
            future.result()

    def _hand(self, worker: _Worker, fn: Callable[[], Any]) -> Future[Any]:
        future: Future[Any] = Future()
        worker.handoff.put((future, fn, (), {}))
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._shutdown = True
            idle, self._idle = self._idle, []
            if cancel_futures:
                while self._backlog:
                    self._backlog.popleft()[0].cancel()
        for worker in idle:
            worker.handoff.put(None)
        if wait:
            for worker in self._workers:
                if worker.thread is not threading.current_thread():
                    worker.thread.join(timeout=5)


_threads: tuple[int, TurnThreads | None] = (0, None)
_threads_lock = threading.Lock()


def turn_threads() -> TurnThreads:
    """This process's turn threads (a process forked after they started gets its own)."""
    global _threads
    with _threads_lock:
        pid, threads = _threads
        size = assistant_settings.TURN_THREADS
        if threads is None or pid != os.getpid() or threads.size != size:
            if threads is not None and pid == os.getpid():
                threads.shutdown(wait=False)  # (TURN_THREADS changed): its threads end when idle
            threads = TurnThreads(size)
            _threads = (os.getpid(), threads)
        return threads


def close_turn_connections() -> None:
    """Close the database connections of this process's idle turn threads now (tests, before
    their database goes)."""
    pid, threads = _threads
    if threads is not None and pid == os.getpid():
        threads.close_connections()


def _close_lane_connections() -> None:
    """Close this thread's database connections (it has been idle a while)."""
    try:
        connections.close_all()
    except Exception:
        logger.exception("Closing an idle turn thread's database connection failed")


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
