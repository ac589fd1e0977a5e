"""Cancellation: a one-way switch shared by a run, its tools and their background work."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

from ..exceptions import Cancelled


class CancellationToken:
    """A one-way switch shared by a run, its tools and their background tasks.

    ``cancel()`` may be called from any thread; ``await token.cancelled()`` wakes async waiters,
    ``token.wait()`` sync ones; ``child()`` tokens are cancelled with their parent, never the
    other way round.
    """

    def __init__(self, parent: CancellationToken | None = None) -> None:
        self._cancelled = False
        self._lock = threading.Lock()
        self._sleep: threading.Event | None = None  # made by the first sync wait(): most never
        self._children: list[CancellationToken] = []
        self._callbacks: list[Callable[[], None]] = []
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        if parent is not None:
            parent._adopt(self)

    def __repr__(self) -> str:
        return f"<CancellationToken {'cancelled' if self.is_cancelled else 'active'}>"

    @property
    def is_cancelled(self) -> bool:
        return self._cancelled

    def child(self) -> CancellationToken:
        return CancellationToken(parent=self)

    def _adopt(self, child: CancellationToken) -> None:
        with self._lock:
            if not self._cancelled:
                self._children.append(child)
                return
        child.cancel()

    def cancel(self) -> None:
        with self._lock:
            if self._cancelled:
                return
            self._cancelled = True
            sleep = self._sleep
            children, self._children = self._children, []
            callbacks, self._callbacks = self._callbacks, []
            waiters, self._waiters = self._waiters, []
        if sleep is not None:
            sleep.set()
        for loop, future in waiters:
            if not loop.is_closed():
                loop.call_soon_threadsafe(_resolve, future)
        for callback in callbacks:
            callback()
        for child in children:
            child.cancel()

    def add_callback(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Run ``callback`` on cancellation (at once if already cancelled); returns a remover."""
        with self._lock:
            if not self._cancelled:
                self._callbacks.append(callback)
                return lambda: self._remove_callback(callback)
        callback()
        return lambda: None

    def _remove_callback(self, callback: Callable[[], None]) -> None:
        with self._lock:
            if callback in self._callbacks:
                self._callbacks.remove(callback)

    async def cancelled(self) -> None:
        """Return once the token is cancelled."""
        if self._cancelled:
            return
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._lock:
            if self._cancelled:
                return
            self._waiters.append((loop, future))
        try:
            await future
        finally:
            with self._lock:
                if (loop, future) in self._waiters:
                    self._waiters.remove((loop, future))

    def wait(self, timeout: float | None = None) -> bool:
        """Block a sync caller until cancelled or ``timeout``; True when cancelled."""
        with self._lock:
            if self._cancelled:
                return True
            if self._sleep is None:
                self._sleep = threading.Event()
            sleep = self._sleep
        return sleep.wait(timeout)

    def raise_if_cancelled(self) -> None:
        if self._cancelled:
            raise Cancelled("The run was stopped.")


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
