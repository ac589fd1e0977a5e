"""``manage.py assistant_run_due_validations``: start every scheduled validation that is due.

Cron-friendly and idempotent: two schedulers that overlap start a due run once.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from ...validation import run_due_validations


class Command(BaseCommand):
    help = "Trigger every enabled scheduled validation task that is due (each slot runs once)."

    def handle(self, *args: Any, **options: Any) -> None:
        runs = run_due_validations()
        for run in runs:
            self.stdout.write(f"Started run {run.pk} of {run.task.name}")
        self.stdout.write(f"{len(runs)} due validation{'s' if len(runs) != 1 else ''} started")
