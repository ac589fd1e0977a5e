"""``manage.py assistant_reap_turns``: close as interrupted the turns dead server processes left."""

from __future__ import annotations

from typing import Any

from ...liveness import reap_interrupted_turns
from ._reaping import ReaperCommand


class Command(ReaperCommand):
    help = (
        "Close as interrupted the turns left unanswered by server processes that stopped "
        "beating, and tell their conversations."
    )

    stale_setting = "TURN_STALE_AFTER"

    def handle(self, *args: Any, **options: Any) -> None:
        stale_after, dry_run = self.stale_after(options), options["dry_run"]
        turns = reap_interrupted_turns(stale_after=stale_after, dry_run=dry_run)
        verb = "Would close" if dry_run else "Closed as interrupted"
        for turn in turns:
            self.stdout.write(
                f"{verb}: {turn.named} in conversation {turn.conversation_id} "
                f"(process {turn.process})"
            )
        self.stdout.write(f"{len(turns)} interrupted turn{'s' if len(turns) != 1 else ''}")
