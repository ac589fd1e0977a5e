"""Server CPU per chat turn over the websocket, side by side with a bare Channels floor.

Run: ``.venv/bin/python tests/benchmarks/turn_cost.py [--clients 50] [--messages 10] [--rounds 3]``
It needs PostgreSQL (127.0.0.1:5432) and Redis (127.0.0.1:6379): as ws_load, it creates a
scratch database and serves the example project under one daphne process on the channels-redis
pub/sub layer and the Redis event log, with the floor (tests/benchmarks/floor.py: the same rows
and the same 13 frames from a bare consumer) at ``/ws/floor/`` of the same process. Each round
runs both sides, in alternating order: N clients connect, then each sends M "who am i" turns
(a keyword turn running one safe tool), one after another; the server process's CPU time (from
/proc) between all connected and all finished, over the turns, is that side's figure. It prints
every round, min and median per side, the queries and transactions per turn (the last round's,
counted in the server process; connects excluded, the first message of a socket opens its
conversation) and the ratio (issue #18: ours at most 1.5 times the floor).
Ours runs twice a round: "assistant" asks for a run's events in bursts (the ``assistant.bursts``
subprotocol, as the chat page does), "frames" takes one event a message (the default wire
format); a ratio is printed for each. ``--only floor|assistant|frames`` runs one side alone (to
attach a profiler to the server).
Measured 2026-12-01 (50 x 10, 3 rounds, a loaded 2-core box): floor 4.1-4.6 ms; ours 10.3 ms
(2.4-2.5x) before the issue's levers, 8.1-8.9 ms (1.8-1.9x) after; 5.6 queries per turn on both
sides, transactions 2.0 per turn before, 0.1 after. Later (5 rounds, a quiet but noisier box,
the throttle in the first hop, the allowed tools kept per snapshot, 15 ms bursts): the rounds'
own ratios about 2.0x (medians 1.99 and 2.02), the sides' medians 1.75-1.84x. 2026-12-02, on a
quieter machine: 2.02x; 1.86x once a burst gathered until the turn's end or 50 ms (it was 2.0
bursts a turn at 50 clients, now 1.1) and dispatch did less per call (README, "What a turn
costs"). ``ASSISTANT_MAX_CONCURRENT_TURNS=1`` in the environment gives 1.66x: concurrency costs
about 0.7 ms a turn.

``--count-loop`` also counts, per turn and by kind, the server's event-loop callbacks (a task's
step is one) and thread hops: figures the machine's speed does not move (the counting itself
slows every callback a little, so read CPU figures from a run without it). 2026-12-02: the
floor 19 callbacks and 2.2 hops a turn, ours 70 and 3.3 before that day's changes, 62-67 and 3.2
after (fewer with fewer bursts a turn).

``--together SECONDS`` runs the three sides at once instead, each on a daphne process of its
own with ``--clients`` clients of its own sending turns back to back, and measures each
process's CPU over the same window of SECONDS (a round; round 0 warms up). A machine whose speed
swings by half between rounds (seen on the development box: the same Python loop took 270-464 ms
from one run to the next) slows every side of a round alike there; interleaved rounds swung
1.4-2.2x on that box. Later on 2026-12-02 (a slow, noisy spell of that machine), with bursts for
the chat page and one Redis round trip a burst: together (20 clients a side, 5 windows of 10 s)
1.30x in bursts (rounds 1.22-1.43), 1.42x one event a message; interleaved (50 x 10, 5 rounds)
1.60x and 1.72x by the rounds' own ratios (README).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ws_load

ws_load.BENCH_DB = "assistant_cost_bench"
# "assistant" asks for bursts, as the chat page does; "frames" takes one event a message (the
# default wire format, what any other AG-UI websocket client gets)
FLOOR_APP = "tests.benchmarks.floor_asgi:application"  # the example project with the floor
SIDES = {"floor": "/ws/floor/", "assistant": "/ws/assistant/", "frames": "/ws/assistant/"}


async def client(
    url: str,
    session: str,
    messages: int,
    connected: asyncio.Barrier,
    go: asyncio.Event,
    bursts: bool,
) -> int:
    finished = 0
    async with ws_load.connect(url, session, open_timeout=60, bursts=bursts) as ws:
        await connected.wait()
        await go.wait()
        conversation = None
        for _ in range(messages):
            conversation = await one_turn(ws, conversation)
            finished += 1
    return finished


async def one_turn(ws: Any, conversation: str | None) -> str:
    """Send a "who am i" turn and read its run to the end; the conversation it went to."""
    frame: dict[str, object] = {"type": "message", "text": "who am i"}
    if conversation:
        frame["conversation"] = conversation
    await ws.send(json.dumps(frame))
    async for event in ws_load.events(ws):
        if event["type"] == "RUN_FINISHED":
            return str(event["threadId"])
        if event["type"] == "RUN_ERROR" or event.get("name") == "assistant.error":
            raise RuntimeError(event)
    raise AssertionError("unreachable: events() ends only by raising")


def db_counts(port: int) -> dict[str, Any]:
    """The server process's database queries and commits so far (floor_asgi counts them), and
    with ``--count-loop`` its loop callbacks and thread hops by kind."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/bench/db/", timeout=10) as response:
        counted: dict[str, Any] = json.loads(response.read())
    return counted


def per_turn(before: dict[str, Any], after: dict[str, Any], turns: int) -> dict[str, Any]:
    """What was counted between two readings, per turn (the kinds of callbacks as a dict)."""
    kinds = {
        kind: (n - before["kinds"].get(kind, 0)) / max(1, turns)
        for kind, n in after["kinds"].items()
    }
    counted: dict[str, Any] = {
        key: (after[key] - before[key]) / max(1, turns) for key in ("queries", "commits")
    }
    counted["hops"] = kinds.pop("(thread hop)", 0.0)
    counted["callbacks"] = sum(kinds.values())
    counted["kinds"] = kinds
    return counted


async def side(
    pid: int, port: int, url: str, sessions: list[str], messages: int, bursts: bool
) -> tuple[float, int, dict[str, Any]]:
    """CPU seconds of the server per turn on one side, the turns that finished, and the
    queries and commits (and loop callbacks) per turn."""
    connected = asyncio.Barrier(len(sessions) + 1)
    go = asyncio.Event()
    clients = [
        asyncio.ensure_future(client(url, key, messages, connected, go, bursts)) for key in sessions
    ]
    await asyncio.wait_for(connected.wait(), timeout=120)
    await asyncio.sleep(0.5)  # whatever a connect starts in the background settles
    counted = db_counts(port)
    before = ws_load.cpu_seconds(pid)
    go.set()
    results = await asyncio.gather(*clients, return_exceptions=True)
    used = ws_load.cpu_seconds(pid) - before
    failures = [r for r in results if isinstance(r, BaseException)]
    for failure in failures[:3]:
        print("  client failed:", repr(failure)[:200])
    turns = sum(r for r in results if isinstance(r, int))
    return used / max(1, turns), turns, per_turn(counted, db_counts(port), turns)


async def looping_client(
    url: str, session: str, bursts: bool, done: list[int], stop: asyncio.Event
) -> None:
    """Sends "who am i" turns one after another until ``stop``; counts each finished one."""
    async with ws_load.connect(url, session, open_timeout=60, bursts=bursts) as ws:
        conversation = None
        while not stop.is_set():
            conversation = await one_turn(ws, conversation)
            done[0] += 1


async def together(
    servers: dict[str, tuple[int, int]], sessions: list[str], seconds: float
) -> dict[str, float]:
    """Every side at once, each on its own server process, each with its own clients: the
    server CPU per turn of each over one common window, so a slow spell of the machine slows
    every side alike."""
    stop = asyncio.Event()
    done = {name: [0] for name in servers}
    tasks = [
        asyncio.ensure_future(
            looping_client(
                f"ws://127.0.0.1:{port}{SIDES[name]}", key, name == "assistant", done[name], stop
            )
        )
        for name, (_, port) in servers.items()
        for key in sessions
    ]
    while sum(done[name][0] for name in servers) < len(tasks):  # all past a first turn
        if any(task.done() for task in tasks):
            break  # (a client failed: reported below)
        await asyncio.sleep(0.1)
    await asyncio.sleep(1)
    before = {name: (ws_load.cpu_seconds(pid), done[name][0]) for name, (pid, _) in servers.items()}
    await asyncio.sleep(seconds)
    after = {name: (ws_load.cpu_seconds(pid), done[name][0]) for name, (pid, _) in servers.items()}
    stop.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    sides = [name for name in servers for _ in sessions]
    failed = [
        (name, r) for name, r in zip(sides, results, strict=True) if isinstance(r, BaseException)
    ]
    for name, failure in failed[:3]:
        print(f"  a client of {name} failed:", repr(failure)[:200])
    return {
        name: (after[name][0] - before[name][0]) / max(1, after[name][1] - before[name][1])
        for name in servers
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--messages", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--only", choices=list(SIDES), help="run one side (to profile the server under it)"
    )
    parser.add_argument(
        "--together",
        type=float,
        metavar="SECONDS",
        help="run every side at once, each on its own daphne process with --clients clients of "
        "its own, and measure each over the same window of SECONDS, every round (for a machine "
        "whose speed swings between rounds)",
    )
    parser.add_argument(
        "--count-loop",
        action="store_true",
        help="count the server's event-loop callbacks and thread hops per turn, by kind (a "
        "figure the machine's speed does not move; counting slows the server a little)",
    )
    args = parser.parse_args()
    if args.count_loop:
        ws_load.os.environ["BENCH_COUNT_LOOP"] = "1"
    if args.together:
        run_together(args)
        return
    sides = [args.only] if args.only else list(SIDES)
    ws_load.os.environ["ASSISTANT_CHANNEL_LAYER"] = "pubsub"
    # two of the sides are ours: a user's turns a round can pass 120/min on a fast machine
    ws_load.os.environ["ASSISTANT_THROTTLE_RATE"] = "100000/min"

    ws_load.recreate_database()
    server = None
    try:
        sessions = ws_load.prepare(args.clients)
        port = ws_load.free_port()
        server = ws_load.start_server("daphne", port, FLOOR_APP)
        figures: dict[str, list[float]] = {name: [] for name in sides}
        db: dict[str, dict[str, float]] = {}
        sent = args.clients * args.messages
        print(
            f"[turn_cost: {args.clients} clients x {args.messages} messages, {args.rounds} "
            "rounds, one daphne process, PostgreSQL + channels-redis pub/sub]"
        )
        for index in range(args.rounds + 1):  # round 0 warms both sides up
            order = sides if index % 2 else sides[::-1]
            for name in order:
                url = f"ws://127.0.0.1:{port}{SIDES[name]}"
                cpu, turns, db[name] = asyncio.run(
                    side(server.pid, port, url, sessions, args.messages, name == "assistant")
                )
                if index:
                    figures[name].append(cpu)
                    print(f"  round {index} {name:<9} {cpu * 1000:6.2f} ms per turn", end="")
                    print(f"  ({turns} of {sent} turns)")
        for name, values in figures.items():
            print(
                f"  {name:<9} CPU per turn: min {min(values) * 1000:.2f} ms, "
                f"median {statistics.median(values) * 1000:.2f} ms; "
                f"{db[name]['queries']:.2f} queries, {db[name]['commits']:.2f} transactions"
            )
            if args.count_loop:
                kinds = sorted(db[name]["kinds"].items(), key=lambda item: -item[1])
                print(
                    f"    {db[name]['callbacks']:.1f} loop callbacks and {db[name]['hops']:.2f} "
                    "thread hops per turn; the most: "
                    + ", ".join(f"{kind} {n:.1f}" for kind, n in kinds[:8] if n >= 0.05)
                )
        if args.only:
            return
        floor = figures["floor"]
        for name, label in (("assistant", "in bursts"), ("frames", "one event a message")):
            ours = figures[name]
            # Each round's sides ran back to back: their ratio cancels the machine's slow swings.
            paired = [mine / bare for mine, bare in zip(ours, floor, strict=True)]
            print(
                f"  ratio ({name}, {label} / floor): median "
                f"{statistics.median(ours) / statistics.median(floor):.2f}x, "
                f"min {min(ours) / min(floor):.2f}x, median of the rounds' own "
                f"{statistics.median(paired):.2f}x ({', '.join(f'{r:.2f}' for r in paired)})"
                "   target <= 1.5x"
            )
    finally:
        ws_load.shut_down(server)


def run_together(args: argparse.Namespace) -> None:
    ws_load.os.environ["ASSISTANT_CHANNEL_LAYER"] = "pubsub"
    # every user sends a turn as soon as the last ended, for minutes: far past 120/min
    ws_load.os.environ["ASSISTANT_THROTTLE_RATE"] = "100000/min"
    ws_load.recreate_database()
    servers: dict[str, subprocess.Popen[bytes]] = {}
    try:
        sessions = ws_load.prepare(args.clients)
        for name in SIDES:
            port = ws_load.free_port()
            servers[name] = ws_load.start_server("daphne", port, FLOOR_APP)
            servers[name].port = port  # type: ignore[attr-defined]
        print(
            f"[turn_cost --together: {args.clients} clients a side, {len(SIDES)} daphne "
            f"processes at once, {args.rounds} windows of {args.together:g} s]"
        )
        targets = {name: (p.pid, p.port) for name, p in servers.items()}  # type: ignore[attr-defined]
        figures: dict[str, list[float]] = {name: [] for name in SIDES}
        for index in range(args.rounds + 1):  # round 0 warms every side up
            cpu = asyncio.run(together(targets, sessions, args.together))
            if index:
                for name, value in cpu.items():
                    figures[name].append(value)
                print(
                    f"  round {index}: "
                    + ", ".join(f"{name} {value * 1000:.2f} ms" for name, value in cpu.items())
                    + f"; assistant/floor {cpu['assistant'] / cpu['floor']:.2f}x, "
                    f"frames/floor {cpu['frames'] / cpu['floor']:.2f}x"
                )
        floor = figures["floor"]
        for name in ("assistant", "frames"):
            paired = [mine / bare for mine, bare in zip(figures[name], floor, strict=True)]
            print(
                f"  {name:<9} / floor: median of the rounds' {statistics.median(paired):.2f}x, "
                f"min {min(paired):.2f}x   target <= 1.5x"
            )
    finally:
        for process in list(servers.values())[1:]:
            process.terminate()
            process.wait(timeout=10)
        ws_load.shut_down(next(iter(servers.values()), None))


if __name__ == "__main__":
    main()
