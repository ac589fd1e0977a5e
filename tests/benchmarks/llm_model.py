"""A scripted OpenAI-compatible streaming model for the LLM benchmarks, on asyncio (thousands of streams at once).

Run: ``.venv/bin/python -m tests.benchmarks.llm_model --port 8765 [--ttft 0.6] [--rate 50]``
A request whose last message is not a tool result is answered with one call of ``--tool`` (when
the request offers it, else with text); one after a tool result with ``--tokens`` tokens of text.
Each reply's first chunk comes ``--ttft`` seconds after the request and the tokens ``--rate`` a
second after it, on a fixed schedule (a late wake-up does not delay the tokens after it); with
``--reply-seconds`` every reply lasts that long instead (keep-alive comments until a tool call),
except in a conversation whose user said "warm up".
``GET /stats`` answers the streams in flight now and at most so far (``GET /stats?reset=1``
starts the most over), the requests and the replies finished.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from dataclasses import dataclass, replace
from typing import Any

from tests.openai_peer import USAGE, _chunk

WARM_UP = "warm up"  # a conversation that says this is answered at the normal pace
WORDS = ("the", "server", "is", "fine", "and", "your", "account", "looks", "right", "today")


@dataclass(frozen=True, kw_only=True)
class Script:
    """What every reply is: when its first chunk comes, how fast its tokens, how many, which tool."""

    ttft: float = 0.6
    rate: float = 50.0
    tokens: int = 120
    tool: str = "whoami"
    reply_seconds: float | None = None

    def text_seconds(self) -> float:
        """The scripted time of the text reply, first chunk to last."""
        if self.reply_seconds is not None:
            return self.reply_seconds
        return self.ttft + max(0, self.tokens - 1) / self.rate

    def call_seconds(self) -> float:
        """The scripted time of the tool-call reply."""
        return self.reply_seconds if self.reply_seconds is not None else self.ttft

    def turn_seconds(self) -> float:
        """The model's own time in a turn: one tool call, then the text."""
        return self.call_seconds() + self.text_seconds()


@dataclass
class Stats:
    in_flight: int = 0
    most: int = 0
    requests: int = 0
    replies: int = 0

    def as_dict(self) -> dict[str, int]:
        return {
            "in_flight": self.in_flight,
            "max_in_flight": self.most,
            "requests": self.requests,
            "replies": self.replies,
        }


class ModelServer:
    """HTTP/1.1 with keep-alive; streamed replies in chunked transfer encoding."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.stats = Stats()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers = {
                    key.strip().lower(): value.strip()
                    for key, _, value in (line.partition(":") for line in lines[1:] if line)
                }
                body = await reader.readexactly(int(headers.get("content-length") or 0))
                if method == "GET" and target.startswith("/stats"):
                    if "reset=1" in target:
                        self.stats.most = self.stats.in_flight
                    await self.respond(writer, 200, self.stats.as_dict())
                elif method == "POST" and target.rstrip("/").endswith("/chat/completions"):
                    await self.complete(writer, json.loads(body or b"{}"))
                else:
                    await self.respond(writer, 404, {"error": {"message": f"No route {target}"}})
                if headers.get("connection", "").lower() == "close":
                    break
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass  # the client went away (or spoke something else): nothing more to say
        finally:
            writer.close()

    async def respond(self, writer: asyncio.StreamWriter, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        writer.write(
            f"HTTP/1.1 {status} OK\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n".encode()
            + data
        )
        await writer.drain()

    async def complete(self, writer: asyncio.StreamWriter, body: dict[str, Any]) -> None:
        started = time.monotonic()
        self.stats.requests += 1
        self.stats.in_flight += 1
        self.stats.most = max(self.stats.most, self.stats.in_flight)
        try:
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n"
            )
            await writer.drain()
            model = str(body.get("model", ""))
            messages = body.get("messages") or [{}]
            offered = {tool["function"]["name"] for tool in body.get("tools") or ()}
            asked = [m.get("content") for m in messages if m.get("role") == "user"]
            script = self.script
            if WARM_UP in asked:  # a warm-up turn before a slow model's run: the normal pace
                script = replace(script, reply_seconds=None)
            if messages[-1].get("role") != "tool" and script.tool in offered:
                await self.call(writer, model, started, script)
            else:
                await self.text(writer, model, started, script)
            if (body.get("stream_options") or {}).get("include_usage"):
                usage = {**_chunk(model, {}), "choices": [], "usage": USAGE}
                await self.send(writer, usage)
            await self.chunk(writer, b"data: [DONE]\n\n")
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            self.stats.replies += 1
        finally:
            self.stats.in_flight -= 1

    async def call(
        self, writer: asyncio.StreamWriter, model: str, started: float, script: Script
    ) -> None:
        first = started + script.call_seconds()
        while time.monotonic() < first - 1:  # a slow model keeps the connection warm
            await asyncio.sleep(1)
            await self.chunk(writer, b": keep-alive\n\n")
        await asyncio.sleep(first - time.monotonic())
        await self.send(writer, _chunk(model, {"role": "assistant", "content": ""}))
        opening = {
            "index": 0,
            "id": f"call_{id(writer):x}_{self.stats.requests}",
            "type": "function",
        }
        opening["function"] = {"name": script.tool, "arguments": "{}"}
        await self.send(writer, _chunk(model, {"tool_calls": [opening]}))
        await self.send(writer, _chunk(model, {}, "tool_calls"))

    async def text(
        self, writer: asyncio.StreamWriter, model: str, started: float, script: Script
    ) -> None:
        tokens = max(1, script.tokens)
        first, gap = started + script.ttft, 1 / script.rate
        if script.reply_seconds is not None:  # the tokens spread over the rest of the reply
            gap = max(0.0, script.reply_seconds - script.ttft) / max(1, tokens - 1)
        await asyncio.sleep(first - time.monotonic())
        await self.send(writer, _chunk(model, {"role": "assistant", "content": ""}))
        for index in range(tokens):
            await asyncio.sleep(first + index * gap - time.monotonic())
            word = WORDS[index % len(WORDS)]
            await self.send(writer, _chunk(model, {"content": (" " if index else "") + word}))
        await self.send(writer, _chunk(model, {}, "stop"))

    async def send(self, writer: asyncio.StreamWriter, chunk: dict[str, Any]) -> None:
        await self.chunk(writer, b"data: " + json.dumps(chunk).encode() + b"\n\n")

    async def chunk(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        await writer.drain()


async def serve(script: Script, port: int) -> None:
    """Serve ``script`` on 127.0.0.1:``port`` until cancelled."""
    model = ModelServer(script)
    server = await asyncio.start_server(model.handle, "127.0.0.1", port, backlog=4096)
    async with server:
        await server.serve_forever()


def arguments(parser: argparse.ArgumentParser) -> None:
    """The script's flags (shared with llm_load.py, which passes them on)."""
    parser.add_argument("--ttft", type=float, default=0.6, help="seconds to the first token")
    parser.add_argument("--rate", type=float, default=50.0, help="tokens a second after it")
    parser.add_argument("--tokens", type=int, default=120, help="tokens of the text reply")
    parser.add_argument("--tool", default="whoami", help="the tool the first reply calls")


def script_of(args: argparse.Namespace, reply_seconds: float | None = None) -> Script:
    return Script(
        ttft=args.ttft,
        rate=args.rate,
        tokens=args.tokens,
        tool=args.tool,
        reply_seconds=reply_seconds,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    arguments(parser)
    parser.add_argument(
        "--reply-seconds", type=float, help="make every reply last this long (a slow model)"
    )
    args = parser.parse_args()
    asyncio.run(serve(script_of(args, args.reply_seconds), args.port))


if __name__ == "__main__":
    main()
