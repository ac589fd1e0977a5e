"""``manage.py assistant_prune_audit --older-than-days N [--dry-run]``: audit retention."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from ...models import AuditEntry


class Command(BaseCommand):
    help = "Delete audit entries older than N days (the only way audit entries are removed)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--older-than-days", type=int, required=True, metavar="N")
        parser.add_argument("--dry-run", action="store_true", help="count them, delete nothing")

    def handle(self, *args: Any, older_than_days: int, dry_run: bool, **options: Any) -> None:
        if older_than_days < 1:
            raise CommandError("--older-than-days must be at least 1")
        cutoff = timezone.now() - timedelta(days=older_than_days)
        if dry_run:
            count = AuditEntry.objects.filter(created_at__lt=cutoff).count()
            self.stdout.write(
                f"Would delete {count} audit entries older than {cutoff:%Y-%m-%d %H:%M}."
            )
            return
        deleted = AuditEntry.objects.prune(cutoff)
        self.stdout.write(f"Deleted {deleted} audit entries older than {cutoff:%Y-%m-%d %H:%M}.")
