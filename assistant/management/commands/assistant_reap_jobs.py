"""``manage.py assistant_reap_jobs``: fail the running jobs whose worker stopped beating."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from ...conf import assistant_settings
from ...jobs import reap_stale_jobs


class Command(BaseCommand):
    help = "Mark failed the running jobs whose worker has not sent a heartbeat for a while."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--stale-after",
            type=float,
            default=None,
            metavar="SECONDS",
            help=f"silence that counts as dead (default ASSISTANT['JOB_STALE_AFTER'] = "
            f"{assistant_settings.JOB_STALE_AFTER:g})",
        )
        parser.add_argument("--dry-run", action="store_true", help="list them, change nothing")

    def handle(self, *args: Any, stale_after: float | None, dry_run: bool, **options: Any) -> None:
        if stale_after is not None and stale_after <= 0:
            from django.core.management.base import CommandError

            raise CommandError("--stale-after must be a positive number of seconds")
        jobs = reap_stale_jobs(stale_after=stale_after, dry_run=dry_run)
        verb = "Would mark failed" if dry_run else "Marked failed"
        for job in jobs:
            self.stdout.write(f"{verb}: {job.pk} {job.operation or job.function} on {job.worker}")
        self.stdout.write(f"{len(jobs)} stale job{'s' if len(jobs) != 1 else ''}")
