"""What the reaper commands share: ``--stale-after`` (checked) and ``--dry-run``."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...conf import assistant_settings


class ReaperCommand(BaseCommand):
    """A command that ends what stopped beating for a while (jobs, turns)."""

    stale_setting = ""  # the ASSISTANT key ``--stale-after`` defaults to

    def add_arguments(self, parser: CommandParser) -> None:
        default = getattr(assistant_settings, self.stale_setting)
        parser.add_argument(
            "--stale-after",
            type=float,
            default=None,
            metavar="SECONDS",
            help=f"silence that counts as dead (default ASSISTANT['{self.stale_setting}'] = "
            f"{default:g})",
        )
        parser.add_argument("--dry-run", action="store_true", help="list them, change nothing")

    def stale_after(self, options: dict[str, Any]) -> float | None:
        """``--stale-after`` as given (None: the setting), or ``CommandError``."""
        value: float | None = options["stale_after"]
        if value is not None and value <= 0:
            raise CommandError("--stale-after must be a positive number of seconds")
        return value
