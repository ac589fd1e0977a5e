"""The turn threads: per server process, ``TURN_THREADS`` threads run the turns' short
synchronous steps, each with its own database connection, closed after ``LANE_IDLE_CLOSE`` idle
seconds; a turn awaiting its model holds none of them."""

from __future__ import annotations

import collections
import logging
import os
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

from django.db import connections

from ..conf import assistant_settings

logger = logging.getLogger("assistant.runner")


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
