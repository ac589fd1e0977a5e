"""What a chat socket sends, and how fast: frames one at a time or in bursts (JSON arrays), held
while the client reads below ``SOCKET_MAX_PENDING_BYTES``, the socket closed if it stops reading."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from typing import Any

from channels.generic.websocket import AsyncWebsocketConsumer

from ...conf import assistant_settings
from ...exceptions import AssistantError
from ...stream import events

logger = logging.getLogger("assistant.consumers")
TOO_SLOW = 4008  # the client left more than SOCKET_MAX_PENDING_BYTES unread
# daphne refuses to send a frame over 1 MiB (its --websocket_max_message_size): a snapshot
# carries no more than half that of message text and tool calls, as JSON encodes them
SNAPSHOT_MAX_BYTES = 512 * 1024
DRAIN_PATIENCE = 2.0  # seconds a socket past its cap may go without the client reading a byte
# A client that offers this websocket subprotocol receives each burst of a run's events as one
# message, a JSON array of AG-UI events; without it, every event is a message of its own.
BURSTS = "assistant.bursts"
# ... in arrays of at most this much: far below daphne's 1 MiB, as a snapshot
BURST_MAX_BYTES = SNAPSHOT_MAX_BYTES


class SocketOutput(AsyncWebsocketConsumer):
    """A websocket consumer whose output is bounded: what it sends waits while its client reads."""

    bursts = False  # the client asked for bursts as JSON arrays (the BURSTS subprotocol)
    in_flight = 0  # bytes handed to the server whose send has not returned yet
    too_slow = False  # the client stopped reading: closing, nothing more is sent
    current: str | None = None  # the conversation the socket's errors are about
    user: Any = None

    async def send_frame(self, frame: dict[str, Any]) -> None:
        """Send one frame, unless this client stopped reading (then close it, once)."""
        await self.send_text(json.dumps(frame, separators=(",", ":")))

    async def send_text(self, data: str) -> None:
        """Send one frame already serialised (as ``send_frame`` does)."""
        if self.too_slow:
            return
        self.in_flight += len(data)
        try:
            await self.send(text_data=data)
        finally:
            self.in_flight -= len(data)
        cap = assistant_settings.SOCKET_MAX_PENDING_BYTES
        if self.pending_bytes() > cap:
            await self.drain(cap)

    def pending_bytes(self) -> int:
        """What is waiting to reach the client: in our sends, and in the server's write buffer.

        Servers that apply backpressure (uvicorn) make ``send`` wait; daphne's returns at once
        and buffers, so its transport is asked how much it holds.
        """
        return self.in_flight + _server_backlog(self.base_send)

    async def drain(self, cap: int) -> None:
        """Hold this socket's output until the client reads below ``cap``; close it if it stops."""
        loop = asyncio.get_running_loop()
        pending, progressed = self.pending_bytes(), loop.time()
        while pending > cap and not self.too_slow:
            await asyncio.sleep(0.05)
            left = self.pending_bytes()
            if left < pending:
                progressed = loop.time()
            elif loop.time() - progressed > DRAIN_PATIENCE:
                await self.close_too_slow()
            pending = left

    async def close_too_slow(self) -> None:
        self.too_slow = True
        logger.warning(
            "Closing the websocket of user %s with %s: over %s bytes unread, none read for %s s",
            getattr(self.user, "pk", None),
            TOO_SLOW,
            assistant_settings.SOCKET_MAX_PENDING_BYTES,
            DRAIN_PATIENCE,
        )
        await self.close(code=TOO_SLOW)

    async def send_error(self, code: str, message: str, **details: Any) -> None:
        frame = events.frame(
            events.custom("assistant.error", {"code": code, "message": message, **details}),
            thread_id=self.current or "",
            run_id=None,
        )
        await self.send_frame(frame)

    async def send_refusal(self, refused: AssistantError) -> None:
        """An error frame for a refusal; one to retry later (throttled, the database down) says
        when (``retry_after``, seconds)."""
        if hasattr(refused, "retry_after"):
            await self.send_error(refused.code, refused.message, retry_after=refused.retry_after)
        else:
            await self.send_error(refused.code, refused.message)

    async def assistant_events(self, message: dict[str, Any]) -> None:
        texts = message.get("texts")
        if texts is None:  # (from a process of an earlier release)
            texts = [json.dumps(frame, separators=(",", ":")) for frame in message["frames"]]
        if self.bursts:  # serialised once by the publisher, for every socket
            for burst in _arrays(texts, BURST_MAX_BYTES):
                await self.send_text(burst)
            return
        for text in texts:
            await self.send_text(text)


def _arrays(texts: list[str], budget: int) -> list[str]:
    """Events as JSON arrays of at most ``budget`` characters; one that is larger on its own
    goes as a frame of its own, as it would without bursts."""
    sent: list[str] = []
    held: list[str] = []
    size = 0
    for text in texts:
        if held and size + len(text) + 2 > budget:  # (the array: brackets and commas)
            sent.append(f"[{','.join(held)}]")
            held, size = [], 0
        if len(text) + 2 > budget:
            sent.append(text)
            continue
        held.append(text)
        size += len(text) + 1
    if held:
        sent.append(f"[{','.join(held)}]")
    return sent


def _server_backlog(send: Any) -> int:
    """Bytes the ASGI server holds for this socket, where it says (daphne's Twisted transport)."""
    for _ in range(4):  # channels' session middleware wraps the server's send
        if isinstance(send, functools.partial):  # daphne: partial(server.handle_reply, protocol)
            transport = getattr(send.args[0], "transport", None) if send.args else None
            return _buffered(transport)
        send = getattr(getattr(send, "__self__", None), "real_send", None)
        if send is None:
            break
    return 0


def _buffered(transport: Any) -> int:
    size = getattr(transport, "get_write_buffer_size", None)  # an asyncio transport
    if callable(size):
        return int(size())
    # a Twisted FileDescriptor: what is left of its write buffer, and what waits to join it
    data = getattr(transport, "dataBuffer", b"")
    return (
        len(data)
        - int(getattr(transport, "offset", 0))
        + int(getattr(transport, "_tempDataLen", 0))
    )
