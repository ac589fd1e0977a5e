"""A real OpenAI-compatible chat-completions server on 127.0.0.1 that plays a scripted conversation.

Tests queue replies with ``peer.script(...)``; each POST to ``/v1/chat/completions`` plays the next
one, streamed as server-sent events (or as one JSON body when the request says ``stream: false``),
and every request body is kept in ``peer.requests`` so a test can assert what the model was sent.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal
from urllib.parse import urlsplit

import pytest

# What the peer reports for each streamed reply when asked (stream_options.include_usage).
USAGE = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
LONGEST_STALL = 30.0  # seconds; a stall also ends the moment the peer shuts down
_ids = itertools.count(1)


@dataclass(frozen=True, kw_only=True)
class ToolCallSpec:
    """One function call the model makes; its arguments stream in ``pieces`` deltas."""

    name: str
    arguments: str
    id: str | None
    pieces: int = 3


def call(
    name: str, arguments: dict[str, Any] | str = "", *, id: str | None = "auto", pieces: int = 3
) -> ToolCallSpec:
    """A tool call; ``arguments`` as a dict is JSON-encoded, as a string is sent verbatim."""
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    call_id = f"call_peer_{next(_ids)}" if id == "auto" else id
    return ToolCallSpec(name=name, arguments=raw, id=call_id, pieces=pieces)


@dataclass(frozen=True, kw_only=True)
class Reply:
    """What the peer does with one request."""

    deltas: tuple[str, ...] = ()
    calls: tuple[ToolCallSpec, ...] = ()
    status: int = 200
    error: dict[str, Any] | None = None
    stall_before: float = 0.0  # seconds before the response headers
    trickle: float = 0.0  # seconds of SSE keep-alive comments before the first chunk
    then: Literal["done", "stall", "drop", "forever"] = "done"
    chunks: tuple[dict[str, Any], ...] | None = None  # played verbatim instead (stream shapes)
    usage: dict[str, int] | None = None  # reported instead of USAGE, when asked for usage
    # run in the peer's thread as the request arrives, before any answer (what happens
    # elsewhere while the model thinks: a token revoked, a session ended)
    meanwhile: Callable[[], None] | None = None
    every: float = 0.05  # then="forever": seconds between the words that keep coming
    hang_up: bool = False  # read the request, then close the connection without a word

    @property
    def finish_reason(self) -> str:
        return "tool_calls" if self.calls else "stop"


def text(*deltas: str, then: Literal["done", "stall", "drop"] = "done") -> Reply:
    """Streamed words; ``then="stall"`` hangs after them, ``then="drop"`` cuts the connection."""
    return Reply(deltas=deltas, then=then)


def tool_calls(*calls: ToolCallSpec, said: tuple[str, ...] = ()) -> Reply:
    """Tool calls (after some words, if ``said``), their arguments interleaved by index."""
    return Reply(deltas=said, calls=calls)


def endless(*deltas: str, every: float = 0.05) -> Reply:
    """Streamed words, then one more word every ``every`` seconds for as long as anyone listens."""
    return Reply(deltas=deltas, then="forever", every=every)


def raw(*chunks: dict[str, Any]) -> Reply:
    """Exactly these chunk bodies, in order, then ``[DONE]`` (the stream shapes of real servers)."""
    return Reply(chunks=chunks)


def error(status: int, message: str, kind: str = "server_error") -> Reply:
    """An HTTP error with OpenAI's error body."""
    body = {"error": {"message": message, "type": kind, "param": None, "code": None}}
    return Reply(status=status, error=body)


def stall(seconds: float = LONGEST_STALL) -> Reply:
    """Accept the request and say nothing at all for ``seconds``."""
    return Reply(stall_before=seconds, deltas=("too late",))


def hang_up() -> Reply:
    """Read the request and close the connection without answering: what a client sees when it
    reuses a keep-alive connection the server closed at that moment (llama.cpp's server does)."""
    return Reply(hang_up=True)


def trickle(seconds: float, *deltas: str) -> Reply:
    """Keep the connection warm with SSE comments for ``seconds`` before any real chunk."""
    return Reply(trickle=seconds, deltas=deltas)


def _split(raw: str, pieces: int) -> list[str]:
    size = max(1, -(-len(raw) // max(1, pieces)))
    return [raw[start : start + size] for start in range(0, len(raw), size)] or [""]


@dataclass
class Peer:
    """The running server: its ``url`` (ends in /v1), the ``script`` it plays, the ``requests``."""

    url: str = ""
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    targets: list[str] = field(default_factory=list)  # each request's target, as sent
    refuses_stream_options: bool = False  # answer 400, as some older local servers do
    _queue: deque[Reply] = field(default_factory=deque)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stopping: threading.Event = field(default_factory=threading.Event)
    _received: threading.Condition = field(default_factory=threading.Condition)

    def script(self, *replies: Reply) -> None:
        """Queue replies, played one per request in order."""
        with self._lock:
            self._queue.extend(replies)

    @property
    def unplayed(self) -> int:
        with self._lock:
            return len(self._queue)

    def wait_for_requests(self, count: int, timeout: float = 5.0) -> bool:
        """Block until ``count`` requests have arrived (False after ``timeout`` seconds)."""
        with self._received:
            return self._received.wait_for(lambda: len(self.requests) >= count, timeout)

    def _take(self, body: dict[str, Any], headers: dict[str, str]) -> Reply:
        with self._received:
            self.requests.append(body)
            self.headers.append(headers)
            self._received.notify_all()
        if self.refuses_stream_options and "stream_options" in body:
            message = "Unrecognized request argument supplied: stream_options"
            return error(400, message, "invalid_request_error")
        with self._lock:
            if self._queue:
                return self._queue.popleft()
        return error(500, "The test peer has no scripted reply left for this request.")

    def _sleep(self, seconds: float) -> bool:
        """Wait ``seconds``; False when the peer is shutting down instead."""
        return not self._stopping.wait(seconds)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server
    timeout = 10  # a client that never finishes its request cannot hold a thread longer

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the test output is not the place for an access log."""

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        self.server.peer.targets.append(self.path)  # absolute when it came as a proxy's request
        if urlsplit(self.path).path.rstrip("/") != "/v1/chat/completions":
            self._json(404, {"error": {"message": f"No route {self.path}", "type": "not_found"}})
            return
        body = json.loads(raw or b"{}")
        peer = self.server.peer
        reply = peer._take(body, {key.lower(): value for key, value in self.headers.items()})
        # A client that gave up (timeout, cancellation) has nothing left to hear.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self._play(reply, body, peer)

    def _play(self, reply: Reply, body: dict[str, Any], peer: Peer) -> None:
        if reply.meanwhile is not None:
            reply.meanwhile()
        if reply.hang_up:
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if reply.stall_before and not peer._sleep(reply.stall_before):
            return
        if reply.error is not None:
            self._json(reply.status, reply.error)
            return
        model = str(body.get("model", ""))
        if not body.get("stream"):
            self._json(200, _completion(reply, model))
            return
        self._start_stream()
        deadline = time.monotonic() + reply.trickle
        while time.monotonic() < deadline:
            self._write_chunk(b": keep-alive\n\n")
            if not peer._sleep(0.1):
                return
        for chunk in _chunks(reply, model):
            self._write_chunk(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        asked = (body.get("stream_options") or {}).get("include_usage")
        if asked and reply.chunks is None and reply.then == "done":
            usage_only = {**_chunk(model, {}), "choices": [], "usage": reply.usage or USAGE}
            self._write_chunk(b"data: " + json.dumps(usage_only).encode() + b"\n\n")
        if reply.then == "drop":
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        while reply.then == "forever":  # a never-ending stream: chunks keep coming
            tick = _chunk(model, {"content": "and "})
            self._write_chunk(b"data: " + json.dumps(tick).encode() + b"\n\n")
            if not peer._sleep(reply.every):
                return
        if reply.then == "stall" and not peer._sleep(LONGEST_STALL):
            return
        self._write_chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")

    def _json(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)
        self.close_connection = True

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


def _chunk(model: str, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-peer",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }


def _chunks(reply: Reply, model: str) -> Iterator[dict[str, Any]]:
    if reply.chunks is not None:
        yield from reply.chunks
        return
    yield _chunk(model, {"role": "assistant", "content": ""})
    for delta in reply.deltas:
        yield _chunk(model, {"content": delta})
    pieces = [_split(spec.arguments, spec.pieces) for spec in reply.calls]
    for index, spec in enumerate(reply.calls):
        opening: dict[str, Any] = {"index": index, "type": "function"}
        if spec.id is not None:
            opening["id"] = spec.id
        opening["function"] = {"name": spec.name, "arguments": ""}
        yield _chunk(model, {"tool_calls": [opening]})
    # Argument pieces of several calls interleave, as only their index ties them together.
    for round_ in itertools.zip_longest(*pieces):
        for index, piece in enumerate(round_):
            if piece:
                delta = {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}
                yield _chunk(model, delta)
    if reply.then == "done":
        yield _chunk(model, {}, reply.finish_reason)


def _completion(reply: Reply, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": "".join(reply.deltas) or None}
    if reply.calls:
        message["tool_calls"] = [
            {
                "id": spec.id or f"call_{index}",
                "type": "function",
                "function": {"name": spec.name, "arguments": spec.arguments},
            }
            for index, spec in enumerate(reply.calls)
        ]
    return {
        "id": "chatcmpl-peer",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": reply.finish_reason}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


class _Server(ThreadingHTTPServer):
    daemon_threads = False  # server_close() joins every handler, so nothing outlives the test
    request_queue_size = 128  # many turns may connect at once
    block_on_close = True

    def __init__(self, peer: Peer) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.peer = peer


def closed_port_url() -> str:
    """The /v1 URL of a port nothing listens on: connections are refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


@pytest.fixture
def openai_peer() -> Iterator[Peer]:
    """A scripted OpenAI-compatible server for one test; shut down (stalls released) after it."""
    peer = Peer()
    server = _Server(peer)
    peer.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield peer
    finally:
        peer._stopping.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
        assert not thread.is_alive(), "the OpenAI test peer did not shut down"


@pytest.fixture
def use_llm(settings: Any, openai_peer: Peer) -> Any:
    """Switch the project to the LLM planner on the peer; keyword arguments override LLM keys."""
    from django.conf import settings as django_settings

    def configure(**llm: Any) -> Peer:
        settings.ASSISTANT = {
            **django_settings.ASSISTANT,
            "PLANNER": "llm",
            "LLM": {
                "BASE_URL": openai_peer.url,
                "MODEL": "test-model",
                "TIMEOUT": 5,
                "STREAM_TIMEOUT": 5,
                **llm,
            },
        }
        return openai_peer

    return configure
