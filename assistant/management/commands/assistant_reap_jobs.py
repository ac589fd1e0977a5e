"""``manage.py assistant_reap_jobs``: fail the running jobs whose worker stopped beating."""

from __future__ import annotations

from typing import Any

from ...jobs import reap_stale_jobs
from ._reaping import ReaperCommand


class Command(ReaperCommand):
    help = "Mark failed the running jobs whose worker has not sent a heartbeat for a while."

    stale_setting = "JOB_STALE_AFTER"

    def handle(self, *args: Any, **options: Any) -> None:
        stale_after, dry_run = self.stale_after(options), options["dry_run"]
        jobs = reap_stale_jobs(stale_after=stale_after, dry_run=dry_run)
        verb = "Would mark failed" if dry_run else "Marked failed"
        for job in jobs:
            self.stdout.write(f"{verb}: {job.pk} {job.operation or job.function} on {job.worker}")
        self.stdout.write(f"{len(jobs)} stale job{'s' if len(jobs) != 1 else ''}")
