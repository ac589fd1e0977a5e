"""``manage.py assistant_reap_turns``: close as interrupted the turns dead server processes left."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...conf import assistant_settings
from ...liveness import reap_interrupted_turns


class Command(BaseCommand):
    help = (
        "Close as interrupted the turns left unanswered by server processes that stopped "
        "beating, and tell their conversations."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--stale-after",
            type=float,
            default=None,
            metavar="SECONDS",
            help=f"silence that counts as dead (default ASSISTANT['TURN_STALE_AFTER'] = "
            f"{assistant_settings.TURN_STALE_AFTER:g})",
        )
        parser.add_argument("--dry-run", action="store_true", help="list them, change nothing")

    def handle(self, *args: Any, stale_after: float | None, dry_run: bool, **options: Any) -> None:
        if stale_after is not None and stale_after <= 0:
            raise CommandError("--stale-after must be a positive number of seconds")
        turns = reap_interrupted_turns(stale_after=stale_after, dry_run=dry_run)
        verb = "Would close" if dry_run else "Closed as interrupted"
        for turn in turns:
            self.stdout.write(
                f"{verb}: {turn.named} in conversation {turn.conversation_id} "
                f"(process {turn.process})"
            )
        self.stdout.write(f"{len(turns)} interrupted turn{'s' if len(turns) != 1 else ''}")
