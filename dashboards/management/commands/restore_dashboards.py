"""Restore an environment's dashboards from a backup written by the run_backup tool."""

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from dashboards.archive import RestoreError, restore
from dashboards.models import Backup


class Command(BaseCommand):
    help = (
        "Make a backup's environment hold exactly the dashboards archived in it again "
        "(checks the file's size and sha256 first)."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("backup_id", type=int, help="the Backup's id (run_backup answers it)")
        parser.add_argument(
            "--dry-run", action="store_true", help="show what would change, change nothing"
        )

    def handle(self, *args: Any, backup_id: int, dry_run: bool, **options: Any) -> None:
        backup = Backup.objects.select_related("environment").filter(pk=backup_id).first()
        if backup is None:
            raise CommandError(f"No backup #{backup_id}.")
        try:
            outcome = restore(backup, dry_run=dry_run)
        except RestoreError as exc:
            raise CommandError(str(exc)) from exc
        verb = "Would restore" if dry_run else "Restored"
        self.stdout.write(
            f"{verb} {backup.environment.name} from backup #{backup.pk}: "
            f"{len(outcome.created)} created, {len(outcome.updated)} updated, "
            f"{len(outcome.deleted)} deleted, {len(outcome.unchanged)} unchanged."
        )
        for label, slugs in (
            ("created", outcome.created),
            ("updated", outcome.updated),
            ("deleted", outcome.deleted),
        ):
            for slug in slugs:
                self.stdout.write(f"  {label}: {slug}")
