"""Background jobs through django-tasks-db on PostgreSQL: enqueue latency and jobs drained per second.

Run: ``.venv/bin/python tests/benchmarks/jobs_bench.py [--jobs 1000] [--workers 1,2,4] [--repeat 3]``
It needs PostgreSQL (127.0.0.1:5432): it creates a scratch database, migrates the example project
(config.settings) into it, times ``JobManager.enqueue`` of a no-op job (one ``Job`` row plus one
task row), then for each worker count enqueues ``--jobs`` no-op jobs and lets that many
``manage.py db_worker --batch`` processes drain them. Throughput is counted from the first task
a worker took to the last one it finished (worker start-up excluded), and over the stretch while
every worker ran; the wall time with start-up is printed beside it. Rounds alternate between the
worker counts; medians are printed. Every job must have run exactly once. The scratch database is
dropped at the end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from assistant.jobs import JobContext

ROOT = Path(__file__).resolve().parents[2]
ADMIN_URL = "postgres://postgres@127.0.0.1:5432/postgres"
BENCH_DB = "assistant_jobs_bench"
WORKER_TIMEOUT = 600  # seconds one round may take before the bench gives up


def noop(job: JobContext) -> None:
    """The benchmarked job: nothing but the job machinery around it."""


def recreate_database() -> None:
    import psycopg

    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {BENCH_DB}")


def drop_database() -> None:
    import psycopg

    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")


def project_env() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "REDIS_URL"}
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings",
        DATABASE_URL=f"postgres://postgres@127.0.0.1:5432/{BENCH_DB}",
        DJANGO_DEBUG="0",  # DEBUG keeps every query in memory
        DJANGO_SECRET_KEY="benchmark-only-secret-key",  # DEBUG off refuses the repository key
    )
    return env


def prepare() -> None:
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v", "0"],
        cwd=ROOT,
        env=project_env(),
        check=True,
    )
    os.environ.pop("REDIS_URL", None)
    os.environ.update(project_env())
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def enqueue(count: int) -> list[float]:
    """Enqueue ``count`` no-op jobs; returns each enqueue's duration in seconds."""
    from assistant.jobs import JobManager
    from tests.benchmarks import jobs_bench  # the importable name, not __main__

    manager = JobManager()
    durations = []
    for _ in range(count):
        started = time.perf_counter()
        manager.enqueue(jobs_bench.noop)
        durations.append(time.perf_counter() - started)
    return durations


def drain(workers: int) -> float:
    """Start ``workers`` batch workers at once; returns the wall time until the last one exits."""
    command = [sys.executable, "manage.py", "db_worker", "--batch", "--no-startup-delay"]
    command += ["--no-reload", "--queue-name", "*", "-v", "0"]
    started = time.perf_counter()
    processes = [
        subprocess.Popen(command, cwd=ROOT, env=project_env(), stdout=subprocess.DEVNULL)
        for _ in range(workers)
    ]
    try:
        for process in processes:
            if process.wait(timeout=WORKER_TIMEOUT) != 0:
                raise RuntimeError(f"db_worker exited with {process.returncode}")
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=10)
    return time.perf_counter() - started


def round_figures(jobs: int) -> dict[str, Any]:
    """What the workers did with this round's jobs, checked: each ran exactly once."""
    from django_tasks_db.models import DBTaskResult

    from assistant.models import Job

    statuses = Counter(Job.objects.values_list("status", flat=True))
    tasks = Counter(DBTaskResult.objects.values_list("status", flat=True))
    if statuses != {"succeeded": jobs} or tasks != {"SUCCESSFUL": jobs}:
        raise RuntimeError(f"not every job ran exactly once: jobs {statuses}, tasks {tasks}")
    spans = list(DBTaskResult.objects.values_list("worker_ids", "started_at", "finished_at"))
    first, last = min(span[1] for span in spans), max(span[2] for span in spans)
    # While every worker was up: from the last one's first task to the first one's last task.
    by_worker: dict[str, list[tuple[Any, Any]]] = {}
    for (worker,), started, finished in spans:
        by_worker.setdefault(worker, []).append((started, finished))
    all_up = max(min(s for s, _ in runs) for runs in by_worker.values())
    one_done = min(max(f for _, f in runs) for runs in by_worker.values())
    steady = [span for span in spans if span[1] >= all_up and span[2] <= one_done]
    steady_seconds = (one_done - all_up).total_seconds()
    return {
        "seconds": (last - first).total_seconds(),
        "steady_rate": len(steady) / steady_seconds if steady_seconds > 0 else float("nan"),
        "per_worker": sorted((len(runs) for runs in by_worker.values()), reverse=True),
    }


def clear() -> None:
    from django_tasks_db.models import DBTaskResult

    from assistant.models import Job

    Job.objects.all().delete()
    DBTaskResult.objects.all().delete()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000, help="jobs per round (default 1000)")
    parser.add_argument("--workers", default="1,2,4", help="worker counts (default 1,2,4)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds per worker count (median)")
    args = parser.parse_args()
    counts = [int(count) for count in args.workers.split(",")]
    load = os.getloadavg()[0]

    recreate_database()
    try:
        prepare()
        latencies: list[float] = []
        rounds: dict[int, list[dict[str, Any]]] = {count: [] for count in counts}
        for _ in range(args.repeat):
            for workers in counts:
                clear()
                latencies += enqueue(args.jobs)
                wall = drain(workers)
                rounds[workers].append({"wall": wall, **round_figures(args.jobs)})

        micro = [value * 1e6 for value in latencies]
        print(
            f"[jobs_bench: django-tasks-db on PostgreSQL, {args.jobs} no-op jobs per round, "
            f"{args.repeat} rounds per worker count, medians]"
        )
        print(f"  machine: {os.cpu_count()} CPUs, load average {load:.2f} at start")
        print(
            f"  enqueue latency ({len(micro)} enqueues, Job row + task row, autocommit): "
            f"p50 {percentile(micro, 0.50):.0f} µs, p95 {percentile(micro, 0.95):.0f} µs, "
            f"p99 {percentile(micro, 0.99):.0f} µs, mean {statistics.mean(micro):.0f} µs"
        )
        base = None
        for workers, figures in rounds.items():
            rates = [args.jobs / figure["seconds"] for figure in figures]
            rate = statistics.median(rates)
            base = base or rate
            steady = statistics.median(figure["steady_rate"] for figure in figures)
            wall = statistics.median(figure["wall"] for figure in figures)
            print(
                f"  {workers} worker{'s' if workers > 1 else ' '}: {rate:6.1f} jobs/s "
                f"(x{rate / base:.2f}; rounds {min(rates):.0f}-{max(rates):.0f}), "
                f"{steady:6.1f} jobs/s while all ran, {wall:5.2f} s wall with start-up; "
                f"jobs per worker {figures[-1]['per_worker']}"
            )
        print("  every job ran exactly once (one succeeded Job and one SUCCESSFUL task each)")
    finally:
        from django.apps import apps

        if apps.ready:
            from django.db import connections

            connections.close_all()
        drop_database()


if __name__ == "__main__":
    main()
