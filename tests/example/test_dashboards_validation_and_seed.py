"""The dashboards' validation rules (through the built-in run_llm_validation) and the demo's
seeding, with the grants it makes."""

from __future__ import annotations

from collections.abc import Callable
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command

from assistant.models import ValidationFinding, ValidationRun
from dashboards.validation_rules import sql_problems
from tests.example.dashboard_calls import dispatch, job_of, state
from tests.example.dashboards_world import World

pytestmark = pytest.mark.django_db


# -- validation of dashboards (the built-in run_llm_validation with the dashboard rules) --------


def test_validation_finds_the_seeded_defects(world: World, run_jobs: Callable[[], Any]) -> None:
    with run_jobs():
        response = dispatch(world.operator, "run_llm_validation", target="dashboards.Dashboard")

    assert response.json()["decision"] == "executed"
    job = job_of(response)
    assert job.status == "succeeded"
    run = ValidationRun.objects.get()
    failed = {
        (finding.rule, finding.target_repr)
        for finding in ValidationFinding.objects.filter(run=run, outcome="fail")
    }
    assert failed == {
        ("dashboard_charts_titled", "Customer churn (dev)"),
        ("dashboard_charts_titled", "Customer churn (staging)"),
        ("dashboard_charts_titled", "Data quality (dev)"),
        ("dashboard_sql_parses", "Marketing funnel (dev)"),
        ("dashboard_sql_parses", "Marketing funnel (staging)"),
        ("dashboard_sql_parses", "Support tickets (dev)"),
        ("dashboard_sql_parses", "Product usage (dev)"),
        ("dashboard_sql_parses", "Product usage (staging)"),
        ("dashboard_sql_parses", "Data quality (dev)"),
        ("dashboard_has_owner", "Hiring pipeline (dev)"),
        ("dashboard_has_owner", "Hiring pipeline (staging)"),
    }
    assert (run.status, run.failed) == ("failed", 11)
    warned = set(
        ValidationFinding.objects.filter(run=run, outcome="warn").values_list("rule", "message")
    )
    assert warned == {("llm_review", "no LLM configured")}


def test_the_viewer_may_not_validate(world: World) -> None:
    response = dispatch(world.viewer, "run_llm_validation", target="dashboards.Dashboard")

    assert response.status_code == 404  # (no part in validation: as if it did not exist)
    assert not ValidationRun.objects.exists()


@pytest.mark.parametrize(
    ("sql", "problems"),
    [
        ("SELECT 1", []),
        ("WITH a AS (SELECT 1) SELECT * FROM a", []),
        ("select a from t where x is null;", []),
        ("", ["has no SQL"]),
        ("SELEC a FORM t", ["does not start with a SQL statement ('SELEC')"]),
        ("SELECT 1; SELECT 2", ["has 2 statements; a chart runs exactly one"]),
        ("DELETE FROM t", ["is a DELETE statement; a chart may only read (SELECT)"]),
        ("SELECT count(* FROM t", ["has unbalanced parentheses"]),
        ("SELECT a FROM t WHERE", ["ends in the middle of a clause ('WHERE')"]),
        ("SELECT $ FROM t", ["does not parse near '$' (an unterminated quote?)"]),
    ],
)
def test_sql_problems(sql: str, problems: list[str]) -> None:
    assert sql_problems(sql) == problems


# -- seeding --------------------------------------------------------------------------------


def test_seeding_twice_changes_nothing(world: World) -> None:
    before = state()
    grants = sorted(world.operator.get_all_permissions() | world.viewer.get_all_permissions())

    out = StringIO()
    call_command("demo_dashboards", stdout=out)

    assert state() == before
    assert (
        sorted(
            world.fresh(world.operator).get_all_permissions()
            | world.fresh(world.viewer).get_all_permissions()
        )
        == grants
    )
    assert "(0 created now)" in out.getvalue()


def test_seeding_with_reset_puts_the_seeded_dashboards_back(world: World) -> None:
    changed = world.dashboard("web-traffic", "prod")
    changed.title = "Changed"
    changed.save()

    call_command("demo_dashboards", "--reset", stdout=StringIO())

    changed.refresh_from_db()
    assert changed.title == "Web traffic"


def test_the_demo_grants_environments_as_the_issue_says(world: World) -> None:
    from dashboards.references import may

    for slug in ("dev", "staging", "prod"):
        env = world.env(slug)
        assert may(world.admin, "change", env)
        assert may(world.operator, "change", env) is (slug != "prod")
        assert may(world.operator, "view", env)
        assert not may(world.viewer, "view", env)
