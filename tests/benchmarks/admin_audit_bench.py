"""Admin audit benchmark: 1,000,000 audit entries in PostgreSQL, changelist timings, export memory.

Run: ``.venv/bin/python tests/benchmarks/admin_audit_bench.py [--rows 1000000]`` (PostgreSQL on
127.0.0.1:5432). It creates a scratch database, seeds the rows with one INSERT … SELECT, and
prints the time of the changelist's first page, a filtered page, a search and a deep page, and
the peak Python memory of streaming the filtered export. Targets (issue #7): every page under
300 ms, export in constant memory.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ADMIN_URL = "postgres://postgres@127.0.0.1:5432/postgres"
BENCH_DB = "assistant_admin_bench"


def recreate_database() -> None:
    import psycopg

    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {BENCH_DB}")


def drop_database() -> None:
    import psycopg

    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")


def setup() -> None:
    os.environ["DATABASE_URL"] = f"postgres://postgres@127.0.0.1:5432/{BENCH_DB}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.conf import settings

    settings.ALLOWED_HOSTS = ["testserver"]
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def seed(rows: int) -> None:
    from django.contrib.auth.models import User
    from django.db import connection

    users = [User.objects.create_user(f"user{index}", password="x") for index in range(20)]
    first = users[0].pk
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO assistant_auditentry
                (created_at, user_id, username, operation, domain, risk_level, decision,
                 entities, duration_ms, error, source, request_ip, conversation_id,
                 pending_action_id, reason, client)
            SELECT now() - (n || ' seconds')::interval,
                   %(first)s + n %% 20,
                   'user' || (n %% 20),
                   (ARRAY['ping','list_orders','approve_order','cancel_order','show_report'])[1 + n %% 5],
                   (ARRAY['diagnostics','orders','orders','orders','reports'])[1 + n %% 5],
                   (ARRAY['safe','safe','guarded','dangerous','safe'])[1 + n %% 5],
                   (ARRAY['executed','executed','executed','denied','failed','invalid',
                          'confirmation_requested','confirmed'])[1 + n %% 8],
                   '{"page": 1}'::jsonb, (n %% 50)::float, '', 'rest', NULL, NULL, NULL, '', ''
            FROM generate_series(1, %(rows)s) AS n
            """,
            {"first": first, "rows": rows},
        )
        cursor.execute("ANALYZE assistant_auditentry")
    print(f"  seeded {rows:,} entries in {time.perf_counter() - started:.1f} s")


def timed(client, url: str, repeat: int = 5) -> float:
    client.get(url)  # warm caches
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        response = client.get(url)
        samples.append(time.perf_counter() - started)
        assert response.status_code == 200, (url, response.status_code)
    return statistics.median(samples) * 1000


def export_peak(client, url: str) -> tuple[float, int]:
    tracemalloc.start()
    started = time.perf_counter()
    response = client.get(url)
    size = 0
    for chunk in response.streaming_content:
        size += len(chunk)
    elapsed = time.perf_counter() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / 1024 / 1024, size, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    rows = parser.parse_args().rows
    recreate_database()
    try:
        setup()
        from django.contrib.auth.models import User
        from django.test import Client

        print(f"[admin audit changelist, PostgreSQL, {rows:,} entries]")
        seed(rows)
        admin = User.objects.create_superuser("bench-admin", "a@example.com", "x")
        client = Client()
        client.force_login(admin)
        base = "/admin/assistant/auditentry/"
        pages = {
            "first page": base,
            "filtered (decision=denied)": base + "?decision__exact=denied",
            "filtered (operation + user)": base + "?operation=cancel_order&username=user3",
            "search (username)": base + "?q=user7",
            "date drill-down (today)": base
            + "?created_at__day={d.day}&created_at__month={d.month}&created_at__year={d.year}",
            "page 50": base + "?p=50",
        }
        from django.utils import timezone

        today = timezone.now()
        worst = 0.0
        for name, url in pages.items():
            ms = timed(client, url.format(d=today))
            worst = max(worst, ms)
            print(f"  {name:<30} {ms:7.1f} ms")
        print(f"  worst page: {worst:.1f} ms   target < 300 ms")
        for label, limit in (("denied only", "?decision__exact=denied"), ("everything", "")):
            peak, size, elapsed = export_peak(client, base + "export/csv/" + limit)
            print(
                f"  CSV export ({label}): {size / 1024 / 1024:.1f} MiB streamed in {elapsed:.1f} s, "
                f"peak Python memory {peak:.1f} MiB"
            )
    finally:
        from django.db import connections

        connections.close_all()
        drop_database()


if __name__ == "__main__":
    main()
