"""Websocket load: N clients x M messages against the example project on a real ASGI server.

Run: ``.venv/bin/python tests/benchmarks/ws_load.py [--clients 200] [--messages 5] [--think 2 5]``
It needs PostgreSQL (127.0.0.1:5432) and Redis (127.0.0.1:6379): it creates a scratch database,
serves config.asgi with daphne (or --server uvicorn) on 127.0.0.1 over channels-redis (the
pub/sub layer, or --layer core), sends every message as a keyword-planner turn running a safe
tool, and prints throughput, the server's (and PostgreSQL's and Redis's) CPU time per turn,
p50/p95/p99 time to RUN_FINISHED, turns stored versus sent, and the PostgreSQL connections the
server held (most at once during the run, and after its lanes idled).

Without ``--think`` each client sends its next message as soon as the last run finished (closed
loop: a throughput test). With ``--think MIN MAX`` each client starts at a random moment within
the first MAX seconds and thinks a uniformly random MIN..MAX seconds after each reply, as people
chatting do. Target (issue #18): 600 clients thinking 2-5 s on one server process, p95 under 1 s,
no lost or duplicated turn. ``--floor`` puts the bare Channels consumer of floor.py under the
same load. On the 2-core development box, 2026-12-02 (6 messages, ``--ramp 10``), the floor
reached p95 220 ms at 600 clients. Ours reached 27 ms at 300, 839-968 ms at 450 and 2.4-2.7 s at
600 (README). Later that day, on a slow spell of the same machine, with the chat's bursts and one
Redis round trip a burst: the floor p95 174 ms at 300 clients, 807 ms at 450, 1.3 s at 600; ours
130 ms at 225, 845 ms at 300, 3.5 s at 450 (5.3 s with ``--frames``). 2026-12-03, once a first
turn's queries were compiled once per process: 600 clients at p95 606-922 ms counting the
arrivals, 429-583 ms after them (the code before, run beside it: 1.41-1.49 s). ``--frames`` makes its
clients take one event a message. ``--switch-interval`` made no difference beyond the noise on an
earlier machine.
The CPU per turn set beside the floor's, closed loop, is turn_cost.py's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
ADMIN_URL = "postgres://postgres@127.0.0.1:5432/postgres"
BENCH_DB = "assistant_ws_bench"
REDIS_URL = "redis://127.0.0.1:6379/15"
BURSTS = True  # clients of the chat ask for a run's events in bursts (--frames: one a message)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def recreate_database() -> None:
    import psycopg

    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {BENCH_DB}")


def drop_database() -> None:
    import psycopg

    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")


def server_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings",
        DATABASE_URL=f"postgres://postgres@127.0.0.1:5432/{BENCH_DB}",
        REDIS_URL=os.environ.get("WS_LOAD_REDIS_URL", REDIS_URL),
        DJANGO_DEBUG="0",
        DJANGO_SECRET_KEY="benchmark-only-secret-key",  # DEBUG off refuses the repository key
        DJANGO_ALLOWED_HOSTS="127.0.0.1,localhost",
    )
    return env


def prepare(clients: int) -> list[str]:
    """Migrate the scratch database and sign in one user per client; returns session keys."""
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=server_env(), check=True
    )
    os.environ.update(server_env())
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.auth.models import User
    from django.contrib.sessions.backends.db import SessionStore

    keys = []
    users = [User(username=f"load-{index}") for index in range(clients)]
    for user in users:
        user.set_unusable_password()  # no hashing: sessions are made here directly
    User.objects.bulk_create(users)
    for user in User.objects.filter(username__startswith="load-"):
        session = SessionStore()
        session[SESSION_KEY] = str(user.pk)
        session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
        session[HASH_SESSION_KEY] = user.get_session_auth_hash()
        session.create()
        keys.append(session.session_key)
    return keys


APPLICATION_NAME = "assistant-ws-load"  # the server's PostgreSQL sessions (libpq's PGAPPNAME)


def start_server(
    kind: str,
    port: int,
    app: str = "config.asgi:application",
    switch: float | None = None,
    application: str = APPLICATION_NAME,
) -> subprocess.Popen[bytes]:
    if kind == "uvicorn":
        command = ["-m", "uvicorn", app, "--host", "127.0.0.1"]
        command += ["--port", str(port), "--log-level", "warning", "--lifespan", "off"]
    else:
        command = ["-m", "daphne", "-b", "127.0.0.1", "-p", str(port), app]
    if switch is not None:  # the server's sys.setswitchinterval, then the server as -m runs it
        module, arguments = command[1], command[2:]
        run = f"import runpy, sys; sys.setswitchinterval({switch}); "
        run += f"sys.argv = [{module!r}, *{arguments!r}]; "
        run += f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)"
        command = ["-c", run]
    process = subprocess.Popen(
        [sys.executable, *command],
        cwd=ROOT,
        env={**server_env(), "PGAPPNAME": application},
        stdout=subprocess.DEVNULL,
        stderr=open(os.environ.get("WS_LOAD_SERVER_LOG", os.devnull), "wb"),  # noqa: SIM115
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return process
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError("the server did not start")


def shut_down(server: subprocess.Popen[bytes] | None) -> None:
    """Stop the server, close this process's connections and drop the scratch database."""
    if server is not None:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
    from django.db import connections

    connections.close_all()
    drop_database()


def connect(url: str, session: str, open_timeout: float, bursts: bool | None = None) -> Any:
    """A signed-in websocket; on the chat path it asks for bursts (unless ``--frames``), as the
    chat page does."""
    import websockets

    if bursts is None:
        bursts = BURSTS and url.endswith("/ws/assistant/")
    return websockets.connect(
        url,
        origin="http://127.0.0.1",
        additional_headers={"Cookie": f"sessionid={session}"},
        open_timeout=open_timeout,
        max_size=None,
        subprotocols=["assistant.bursts"] if bursts else None,
    )


async def events(ws: Any, patience: float = 60) -> AsyncIterator[dict[str, Any]]:
    """The socket's AG-UI events one at a time, whether they come one a message or in bursts
    (each within ``patience`` seconds)."""
    while True:
        data = json.loads(await asyncio.wait_for(ws.recv(), timeout=patience))
        for event in data if isinstance(data, list) else [data]:
            yield event


async def client(
    url: str,
    session: str,
    messages: int,
    latencies: list[float],
    runs: set[str],
    firsts: list[float],
    sent: list[int],
    think: tuple[float, float] | None = None,
    ramp: float = 0.0,
    steady: list[float] | None = None,
    began: float = 0.0,
) -> int:
    finished = 0
    if think is not None:
        await asyncio.sleep(random.uniform(0, ramp))  # people do not all arrive at once
    async with connect(url, session, open_timeout=30) as ws:
        conversation = None
        for index in range(messages):
            if think is not None and index:
                await asyncio.sleep(random.uniform(*think))
            frame: dict[str, object] = {"type": "message", "text": "who am i"}
            if conversation:
                frame["conversation"] = conversation
            started = time.perf_counter()
            await ws.send(json.dumps(frame))
            sent.append(1)
            async for event in events(ws):
                if event["type"] == "RUN_STARTED":
                    firsts.append(time.perf_counter() - started)
                if event["type"] == "RUN_FINISHED":
                    latencies.append(time.perf_counter() - started)
                    if steady is not None and started - began > ramp:
                        steady.append(latencies[-1])
                    conversation = event["threadId"]
                    runs.add(event["runId"])
                    finished += 1
                    break
                if event["type"] == "RUN_ERROR":
                    raise RuntimeError(event)
    return finished


async def load(
    port: int,
    sessions: list[str],
    messages: int,
    think: tuple[float, float] | None,
    connections: list[int],
    sent: list[int],
    path: str = "/ws/assistant/",
    ramp: float = 0.0,
    steady: list[float] | None = None,
) -> tuple[float, list[float], set[str], int]:
    url = f"ws://127.0.0.1:{port}{path}"
    latencies: list[float] = []
    runs: set[str] = set()
    firsts: list[float] = []
    watcher = asyncio.ensure_future(watch_connections(connections))
    started = time.perf_counter()
    results = await asyncio.gather(
        *(
            client(url, key, messages, latencies, runs, firsts, sent, think, ramp, steady, started)
            for key in sessions
        ),
        return_exceptions=True,
    )
    elapsed = time.perf_counter() - started
    watcher.cancel()
    failures = [r for r in results if isinstance(r, BaseException)]
    for failure in failures[:3]:
        print("  client failed:", repr(failure)[:200])
    if firsts:
        print(
            f"  time to RUN_STARTED: p50 {percentile(firsts, 0.5) * 1000:.0f} ms, "
            f"p95 {percentile(firsts, 0.95) * 1000:.0f} ms"
        )
    return elapsed, latencies, runs, len(failures)


def server_connections(application: str = APPLICATION_NAME) -> int:
    """PostgreSQL sessions the server process holds now (its own, by application name)."""
    import psycopg

    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
            [application],
        ).fetchone()
    return int(row[0]) if row else 0


async def watch_connections(counts: list[int]) -> None:
    """Sample the server's connections twice a second while the load runs."""
    while True:
        counts.append(await asyncio.to_thread(server_connections))
        await asyncio.sleep(0.5)


def connections_after_idle(within: float = 30.0) -> tuple[int, float]:
    """Wait until the server's connection count stops falling; it and how long that took."""
    started = time.monotonic()
    last = server_connections()
    while time.monotonic() - started < within:
        time.sleep(1)
        now = server_connections()
        if now == last and now <= 2:
            break
        last = now
    return last, time.monotonic() - started


def database_counters() -> dict[str, int]:
    """The scratch database's transaction, row and WAL counters (PostgreSQL's statistics)."""
    import psycopg

    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        row = conn.execute(
            "SELECT xact_commit, tup_inserted, tup_updated, tup_deleted, tup_returned + tup_fetched,"
            " pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint"
            " FROM pg_stat_database WHERE datname = %s",
            [BENCH_DB],
        ).fetchone()
    names = ("commits", "inserted", "updated", "deleted", "read", "wal_bytes")
    return dict(zip(names, row or (0,) * len(names), strict=True))


def redis_counters() -> dict[str, int]:
    """Commands and bytes the Redis server has handled so far (all clients)."""
    import redis

    client = redis.Redis.from_url(os.environ.get("WS_LOAD_REDIS_URL", REDIS_URL))
    try:
        stats = client.info("stats")
    finally:
        client.close()
    return {
        "commands": int(stats["total_commands_processed"]),
        "bytes_in": int(stats["total_net_input_bytes"]),
        "bytes_out": int(stats["total_net_output_bytes"]),
    }


def per_turn(after: dict[str, int], before: dict[str, int], turns: int) -> str:
    return ", ".join(f"{(after[k] - before[k]) / turns:.1f} {k}" for k in after)


def cpu_of(name: str) -> float:
    """CPU seconds used so far by every process named ``name`` and its reaped children (Linux).

    PostgreSQL's backends come and go; the postmaster's children times keep what exited ones used.
    """
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            head, _, tail = stat.read_text().rpartition(")")
        except OSError:
            continue
        if head.split("(", 1)[-1] == name:
            fields = tail.split()
            total += sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    return total


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (Linux), or NaN elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--messages", type=int, default=5)
    parser.add_argument(
        "--think",
        nargs=2,
        type=float,
        metavar=("MIN", "MAX"),
        help="seconds each client thinks after a reply (uniform); default: none (closed loop)",
    )
    parser.add_argument(
        "--ramp",
        type=float,
        help="seconds over which the clients arrive (open loop; default: the think time's MAX); "
        "turns sent after it are reported apart, as the steady state",
    )
    parser.add_argument(
        "--floor",
        action="store_true",
        help="load the bare Channels consumer of tests/benchmarks/floor.py instead: the same "
        "rows and frames without any of the assistant's machinery, for the ceiling one process "
        "of this machine reaches",
    )
    parser.add_argument(
        "--switch-interval",
        type=float,
        help="the server process's sys.setswitchinterval (seconds; Python's default 0.005): how "
        "long its event loop may wait for the GIL a turn's lane thread holds",
    )
    parser.add_argument(
        "--frames",
        action="store_true",
        help="clients take every event as a message of its own (the default wire format), "
        "not in bursts (the assistant.bursts subprotocol the chat page asks for)",
    )
    parser.add_argument("--server", choices=["daphne", "uvicorn"], default="daphne")
    parser.add_argument(
        "--layer", choices=["pubsub", "core"], default="pubsub", help="the channels-redis layer"
    )
    args = parser.parse_args()
    os.environ["ASSISTANT_CHANNEL_LAYER"] = args.layer
    global BURSTS
    BURSTS = not args.frames

    recreate_database()
    server = None
    try:
        sessions = prepare(args.clients)
        port = free_port()
        app = "tests.benchmarks.floor_asgi:application" if args.floor else "config.asgi:application"
        server = start_server(args.server, port, app, args.switch_interval)
        think = (args.think[0], args.think[1]) if args.think else None
        ramp = args.ramp if args.ramp is not None else (think[1] if think else 0.0)
        steady: list[float] = []
        path = "/ws/floor/" if args.floor else "/ws/assistant/"
        held: list[int] = []
        sent_messages: list[int] = []
        cpu_before = cpu_seconds(server.pid)
        services_before = cpu_of("postgres"), cpu_of("redis-server")
        driver_before = time.process_time()
        database_before, redis_before = database_counters(), redis_counters()
        elapsed, latencies, runs, failed = asyncio.run(
            load(port, sessions, args.messages, think, held, sent_messages, path, ramp, steady)
        )
        cpu_used = cpu_seconds(server.pid) - cpu_before
        postgres_cpu = cpu_of("postgres") - services_before[0]
        redis_cpu = cpu_of("redis-server") - services_before[1]
        driver_cpu = time.process_time() - driver_before
        redis_after = redis_counters()
        idle_connections, idled_in = connections_after_idle()  # (statistics flushed meanwhile)
        database_after = database_counters()

        from assistant.models import AuditEntry, Message

        sent = len(sent_messages)  # (a client that failed to connect sent nothing)
        users = Message.objects.filter(role="user").count()
        replies = Message.objects.filter(role="assistant", status="complete").count()
        audits = AuditEntry.objects.filter(decision="executed").count()
        pace = (
            f"thinking {think[0]:g}-{think[1]:g} s, arriving over {ramp:g} s (open loop)"
            if think
            else "back to back"
        )
        what = "the bare Channels floor" if args.floor else f"channels-redis {args.layer} layer"
        if args.switch_interval is not None:
            what += f", switch interval {args.switch_interval:g} s"
        if not args.floor:
            what += ", one event a message" if args.frames else ", events in bursts"
        print(
            f"[ws_load: {args.clients} clients x {args.messages} messages {pace}, "
            f"one {args.server} process, {what}]"
        )
        print(
            f"  turns finished:     {len(latencies)} of {sent} sent "
            f"({args.clients * args.messages} planned, {failed} clients failed)"
        )
        print(f"  distinct runs:      {len(runs)}")
        print(
            f"  stored:             {users} user messages, {replies} complete replies, {audits} audited calls"
        )
        print(
            f"  lost or duplicated: {max(0, sent - replies)} lost, "
            f"{max(0, replies - users) + max(0, len(latencies) - len(runs))} duplicated"
        )
        print(f"  throughput:         {len(latencies) / elapsed:.1f} turns/s over {elapsed:.1f} s")
        print(
            f"  server CPU:         {cpu_used / max(1, len(latencies)) * 1000:.1f} ms per turn "
            f"({cpu_used / elapsed * 100:.0f} % of one core)"
        )
        turns = max(1, len(latencies))
        print(
            f"  services CPU:       PostgreSQL {postgres_cpu / turns * 1000:.1f} ms per turn "
            f"({postgres_cpu / elapsed * 100:.0f} % of one core), Redis "
            f"{redis_cpu / turns * 1000:.2f} ms per turn ({redis_cpu / elapsed * 100:.0f} %); "
            f"this load driver {driver_cpu / elapsed * 100:.0f} % (the same cores)"
        )
        print(f"  PostgreSQL/turn:    {per_turn(database_after, database_before, turns)}")
        print(
            f"  Redis/turn:         {per_turn(redis_after, redis_before, turns)} "
            "(the whole server: the driver's own polling included)"
        )
        if held:
            print(
                f"  PostgreSQL conns:   at most {max(held)} at once during the run "
                f"(median sample {statistics.median(held):.0f}), "
                f"{idle_connections} after {idled_in:.0f} s idle"
            )
        if latencies:
            print(
                "  time to RUN_FINISHED: "
                f"p50 {percentile(latencies, 0.50) * 1000:.0f} ms, "
                f"p95 {percentile(latencies, 0.95) * 1000:.0f} ms, "
                f"p99 {percentile(latencies, 0.99) * 1000:.0f} ms, "
                f"mean {statistics.mean(latencies) * 1000:.0f} ms   target p95 < 1000 ms"
            )
        if think and steady:
            print(
                f"  after the arrivals: p50 {percentile(steady, 0.50) * 1000:.0f} ms, "
                f"p95 {percentile(steady, 0.95) * 1000:.0f} ms, "
                f"p99 {percentile(steady, 0.99) * 1000:.0f} ms ({len(steady)} turns sent "
                f"after the first {ramp:g} s)"
            )
    finally:
        shut_down(server)


if __name__ == "__main__":
    main()
