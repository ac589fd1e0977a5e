"""``manage.py assistant_eval GOLDEN.json``: replay golden conversations through the planner."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...exceptions import EvalError
from ...turns.evals import load_cases, run_cases
from ...validation import Outcome

MARKS = {Outcome.PASS: "pass", Outcome.FAIL: "FAIL", Outcome.WARN: "warn"}


class Command(BaseCommand):
    help = (
        "Plan each golden conversation with the configured planner (or --planner), judge the "
        "calls it proposes without running them, and exit non-zero if any case fails."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("golden", help="a JSON file: a list of cases, or {'cases': [...]}")
        parser.add_argument("--planner", choices=["keywords", "llm"], help="default: PLANNER")
        parser.add_argument("--json", action="store_true", help="one JSON object per case")
        parser.add_argument(
            "--strict", action="store_true", help="count warnings (extra calls) as failures"
        )

    def handle(
        self, *args: Any, golden: str, planner: str | None, json: bool, strict: bool, **options: Any
    ) -> None:
        try:
            cases = load_cases(golden)
        except EvalError as exc:
            raise CommandError(exc.message) from None
        results = run_cases(cases, planner=planner)
        for result in results:
            if json:
                self.stdout.write(_json(result.verdict().details | {"outcome": result.outcome}))
            else:
                self.stdout.write(
                    f"[{MARKS[Outcome(result.outcome)]}] {result.case.name}: {result.message}"
                )
        failed = sum(
            r.outcome == Outcome.FAIL or (strict and r.outcome == Outcome.WARN) for r in results
        )
        summary = f"{len(results) - failed} of {len(results)} cases passed"
        if failed:
            raise CommandError(f"{summary}; {failed} failed.", returncode=1)
        self.stdout.write(self.style.SUCCESS(summary + "."))


def _json(value: Any) -> str:
    return json.dumps(value, default=str)
