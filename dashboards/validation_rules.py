"""Validation rules for dashboards, run by the built-in ``run_llm_validation`` tool."""

from __future__ import annotations

from typing import Any

import sqlparse
from sqlparse import tokens

from assistant.validation import Outcome, Verdict, validation_rule

from .models import Dashboard

DANGLING = {
    "SELECT",
    "FROM",
    "WHERE",
    "AND",
    "OR",
    "NOT",
    "BY",
    "ORDER BY",
    "GROUP BY",
    "JOIN",
    "ON",
    "HAVING",
    "AS",
    "IN",
    "LIKE",
    "WITH",
    "UNION",
    "LIMIT",
    "SET",
    "=",
    ",",
}


def sql_problems(sql: Any) -> list[str]:
    """Why this SQL cannot be a chart's query (empty when it parses as one read-only statement)."""
    if not isinstance(sql, str) or not sql.strip():
        return ["has no SQL"]
    statements = [statement for statement in sqlparse.parse(sql) if statement.value.strip(" ;\n\t")]
    if len(statements) != 1:
        return [f"has {len(statements)} statements; a chart runs exactly one"]
    statement = statements[0]
    kind = statement.get_type()  # type: ignore[no-untyped-call]
    if kind == "UNKNOWN":
        first = next((token.value for token in statement.flatten() if not token.is_whitespace), "")  # type: ignore[no-untyped-call]
        return [f"does not start with a SQL statement ({first!r})"]
    if kind != "SELECT":
        return [f"is a {kind} statement; a chart may only read (SELECT)"]
    problems = []
    flat = [token for token in statement.flatten() if not token.is_whitespace]  # type: ignore[no-untyped-call]
    flat = [token for token in flat if token.ttype not in tokens.Comment]
    depth = 0
    for token in flat:
        if token.ttype in tokens.Punctuation and token.value in "()":
            depth += 1 if token.value == "(" else -1
            if depth < 0:
                break
    if depth:
        problems.append("has unbalanced parentheses")
    errors = [token.value for token in flat if token.ttype in tokens.Error]
    if errors:
        problems.append(f"does not parse near {errors[0]!r} (an unterminated quote?)")
    meaningful = [token for token in flat if token.value != ";"]
    if meaningful and (
        meaningful[-1].normalized.upper() in DANGLING
        and (
            meaningful[-1].ttype in tokens.Keyword
            or meaningful[-1].ttype in tokens.Punctuation
            or meaningful[-1].ttype in tokens.Operator
        )
    ):
        problems.append(f"ends in the middle of a clause ({meaningful[-1].value!r})")
    return problems


def _charts(dashboard: Dashboard) -> list[dict[str, Any]]:
    charts = dashboard.charts
    return (
        [chart if isinstance(chart, dict) else {} for chart in charts]
        if isinstance(charts, list)
        else []
    )


@validation_rule(
    name="dashboard_charts_titled",
    description="Every chart of a dashboard has a title",
    models=["dashboards.Dashboard"],
)
def charts_titled(dashboard: Dashboard, options: dict[str, Any], run: Any) -> Verdict:
    charts = _charts(dashboard)
    if not charts:
        return Verdict(outcome=Outcome.WARN, message="the dashboard has no charts")
    untitled = [
        index for index, chart in enumerate(charts, 1) if not str(chart.get("title") or "").strip()
    ]
    if untitled:
        shown = ", ".join(str(index) for index in untitled)
        return Verdict(
            outcome=Outcome.FAIL,
            message=f"chart {shown} of {len(charts)} has no title",
            details={"untitled": untitled},
        )
    return Verdict(outcome=Outcome.PASS, message=f"all {len(charts)} charts are titled")


@validation_rule(
    name="dashboard_sql_parses",
    description="Every chart's SQL parses as one read-only statement",
    models=["dashboards.Dashboard"],
)
def sql_parses(dashboard: Dashboard, options: dict[str, Any], run: Any) -> Verdict:
    charts = _charts(dashboard)
    broken = {}
    for index, chart in enumerate(charts, 1):
        problems = sql_problems(chart.get("sql"))
        if problems:
            broken[str(index)] = {"title": chart.get("title") or "", "problems": problems}
    if broken:
        first = next(iter(broken.items()))
        label = first[1]["title"] or f"chart {first[0]}"
        return Verdict(
            outcome=Outcome.FAIL,
            message=f"{len(broken)} of {len(charts)} charts have bad SQL; {label} "
            f"{first[1]['problems'][0]}",
            details={"charts": broken},
        )
    return Verdict(outcome=Outcome.PASS, message=f"the SQL of all {len(charts)} charts parses")


@validation_rule(
    name="dashboard_has_owner",
    description="The dashboard has an owner",
    models=["dashboards.Dashboard"],
)
def has_owner(dashboard: Dashboard, options: dict[str, Any], run: Any) -> Verdict:
    if dashboard.owner_id is None:
        return Verdict(outcome=Outcome.FAIL, message="no owner is set")
    return Verdict(outcome=Outcome.PASS, message=f"owned by {dashboard.owner}")
