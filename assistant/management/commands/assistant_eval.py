"""``manage.py assistant_eval GOLDEN.json``: replay golden conversations through the planner."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...conf import assistant_settings
from ...exceptions import EvalError
from ...turns.evals import CaseResult, load_cases, run_cases, store_run
from ...validation import Outcome

MARKS = {Outcome.PASS: "pass", Outcome.FAIL: "FAIL", Outcome.WARN: "warn"}


class Command(BaseCommand):
    help = (
        "Plan each golden conversation with the configured planner (or --planner), judge the "
        "calls it proposes without running them, store the run as a validation run, and exit "
        "non-zero if any case fails. Two --model options compare two models side by side."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("golden", help="a JSON file: a list of cases, or {'cases': [...]}")
        parser.add_argument("--planner", choices=["keywords", "llm"], help="default: PLANNER")
        parser.add_argument(
            "--model",
            action="append",
            default=[],
            help="the LLM model to evaluate instead of LLM MODEL; twice: side by side",
        )
        parser.add_argument("--json", action="store_true", help="one JSON object per case")
        parser.add_argument(
            "--strict", action="store_true", help="count warnings (repeated calls) as failures"
        )
        parser.add_argument(
            "--no-store", action="store_true", help="do not store the run as a validation run"
        )

    def handle(self, *args: Any, golden: str, **options: Any) -> None:
        models: list[str] = options["model"]
        if len(models) > 2:
            raise CommandError("at most two --model options: one, or two side by side")
        planner = options["planner"] or assistant_settings.PLANNER
        try:
            cases = load_cases(golden)
        except EvalError as exc:
            raise CommandError(exc.message) from None
        runs = {}
        for model in models or [""]:
            results = run_cases(cases, planner=options["planner"], model=model or None)
            runs[model] = results
            if options["json"]:
                for result in results:
                    self.stdout.write(_json(_row(result)))
            elif len(models) < 2:
                self.stdout.write("\n".join(_line(result) for result in results))
            if not options["no_store"]:
                named = model or (assistant_settings.llm["MODEL"] if planner == "llm" else "")
                run = store_run(golden, planner, named or "", results)
                self.stdout.write(f"Stored as validation run #{run.pk} ({run.status}).")
        if len(models) == 2 and not options["json"]:
            self.stdout.write(side_by_side(models, runs))
        self.conclude(runs, options["strict"], len(cases))

    def conclude(self, runs: dict[str, list[CaseResult]], strict: bool, total: int) -> None:
        failed = 0
        summaries = []
        for model, results in runs.items():
            bad = sum(
                r.outcome == Outcome.FAIL or (strict and r.outcome == Outcome.WARN) for r in results
            )
            failed += bad
            skipped = total - len(results)
            summaries.append(
                (f"{model}: " if model else "")
                + f"{len(results) - bad} of {len(results)} cases passed"
                + (f" ({skipped} written for another planner skipped)" if skipped else "")
            )
        summary = "; ".join(summaries)
        if failed:
            raise CommandError(f"{summary}; {failed} failed.", returncode=1)
        self.stdout.write(self.style.SUCCESS(summary + "."))


def _row(result: CaseResult) -> dict[str, Any]:
    return result.verdict().details | {"outcome": result.outcome, "why": result.message}


def _calls(result: CaseResult) -> str:
    shown = [f"{call.operation}({_json(call.entities)})" for call in result.proposed]
    return ", ".join(shown) or "no call"


def _line(result: CaseResult) -> str:
    facts = f"{_calls(result)} · {result.planner or '-'} · {result.steps} steps"
    facts += f" · {result.seconds:.1f} s" + (
        f" · {len(result.repeats)} repeats" if result.repeats else ""
    )
    return f"[{MARKS[Outcome(result.outcome)]}] {result.case.name}: {result.message} — {facts}"


def side_by_side(models: list[str], runs: dict[str, list[CaseResult]]) -> str:
    """Each case on one line, each model's verdict, calls, steps and time beside each other."""
    first, second = (runs[model] for model in models)
    width = max([len(r.case.name) for r in first] + [4])
    lines = [f"{'case':<{width}} | {models[0]:<48} | {models[1]}"]
    for one, other in zip(first, second, strict=True):
        lines.append(f"{one.case.name:<{width}} | {_cell(one):<48} | {_cell(other)}")
    lines.append(f"{'total':<{width}} | {_total(first):<48} | {_total(second)}")
    return "\n".join(lines)


def _cell(result: CaseResult) -> str:
    tools = ",".join(call.operation for call in result.proposed) or "-"
    return f"{MARKS[Outcome(result.outcome)]} {tools} {result.steps}st {result.seconds:.1f}s"


def _total(results: list[CaseResult]) -> str:
    passed = sum(r.outcome != Outcome.FAIL for r in results)
    tokens = sum(r.usage.get("total_tokens", 0) for r in results)
    seconds = sum(r.seconds for r in results)
    return f"{passed}/{len(results)} passed, {tokens} tokens, {seconds:.0f} s"


def _json(value: Any) -> str:
    return json.dumps(value, default=str)
