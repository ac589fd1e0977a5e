"""Planner evaluations on golden conversations: the shipped set for the example project's tools
against the keyword planner and against the replay server, as a command and as validation runs."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from assistant.core.registry import registry
from assistant.models import (
    AuditEntry,
    Conversation,
    Job,
    Message,
    PendingAction,
    ValidationFinding,
)
from assistant.turns.evals import load_cases, run_cases
from assistant.validation import ValidationTaskService
from dashboards.models import Backup
from tests.example.dashboards_world import World
from tests.openai_peer import call, text, tool_calls
from tests.openai_peer import openai_peer as openai_peer  # the fixtures
from tests.openai_peer import use_llm as use_llm

pytestmark = pytest.mark.django_db

GOLDEN = Path(__file__).resolve().parents[2] / "dashboards" / "evals" / "golden.json"


def evaluate(path: Any, *args: str) -> tuple[str, int]:
    out = StringIO()
    try:
        call_command("assistant_eval", str(path), *args, stdout=out)
    except CommandError as exc:
        return out.getvalue() + str(exc), exc.returncode
    return out.getvalue(), 0


def nothing_happened() -> None:
    assert not AuditEntry.objects.exists()
    assert not Job.objects.exists()
    assert not Backup.objects.exists()
    assert not PendingAction.objects.exists()
    assert not Conversation.objects.exists()
    assert not Message.objects.exists()
    assert not get_user_model().objects.filter(username__startswith="__eval").exists()


def write(tmp_path: Path, cases: list[dict[str, Any]]) -> Path:
    path = tmp_path / "golden.json"
    path.write_text(json.dumps(cases))
    return path


def test_the_shipped_golden_set_passes_on_the_keyword_planner_and_changes_nothing(world: World):
    out, code = evaluate(GOLDEN, "--planner", "keywords")

    cases = len([case for case in load_cases(GOLDEN) if case.written_for("keywords")])
    skipped = len(load_cases(GOLDEN)) - cases  # multi-step, ambiguity, injections: a model's
    assert code == 0, out
    assert f"{cases} of {cases} cases passed ({skipped} written for another planner skipped)" in out
    assert out.count("[pass]") == cases
    nothing_happened()


def test_a_wrong_expectation_fails_the_command(world: World, tmp_path: Path):
    path = write(
        tmp_path,
        [
            {
                "user": "viewer",
                "message": "deploy 12 to staging",
                "expect": [{"operation": "deploy_dashboard"}],
            },
            {
                "user": "operator",
                "message": "back up staging",
                "expect": [{"operation": "run_backup", "entities": {"environment": "prod"}}],
            },
            {"user": "operator", "message": "back up staging", "forbid": ["run_backup"]},
        ],
    )

    out, code = evaluate(path, "--planner", "keywords")

    assert code == 1
    assert "0 of 3 cases passed; 3 failed." in out
    assert "expected deploy_dashboard was not proposed as described" in out
    assert "expected run_backup was not proposed as described" in out
    assert "proposed forbidden run_backup" in out
    nothing_happened()


def test_judged_decisions_are_what_dispatch_would_decide(world: World):
    # a real dashboard's id: the judge runs the tool's prepare, which looks it up
    dashboard = str(world.dashboard("support-tickets", "dev").pk)
    (result,) = run_cases(
        load_cases([{"user": "operator", "message": f"deploy {dashboard} to staging"}]),
        planner="keywords",
    )

    assert [(c.operation, c.decision, c.entities) for c in result.proposed] == [
        (
            "deploy_dashboard",
            "confirmation_requested",
            {"dashboard": dashboard, "target": "staging"},
        )
    ]
    # nothing expected: a call is an unexpected one, whatever dispatch would decide
    assert (result.outcome, result.message) == ("fail", "proposed unexpected deploy_dashboard")


def test_the_judge_hears_what_the_tools_prepare_would_refuse(world: World):
    (result,) = run_cases(
        load_cases([{"user": "operator", "message": "deploy 12 source=staging target=prod"}]),
        planner="keywords",
    )

    assert [(c.operation, c.decision) for c in result.proposed] == [("deploy_dashboard", "denied")]


def test_unknown_users_and_roles_fail_their_case_only(world: World, tmp_path: Path):
    path = write(
        tmp_path,
        [
            {"user": "nobody", "message": "hello"},
            {"role": "astronauts", "message": "hello"},
            {
                "user": "operator",
                "message": "health summary",
                "expect": [{"operation": "get_health_summary"}],
            },
        ],
    )

    out, code = evaluate(path, "--planner", "keywords")

    assert code == 1
    assert "no user named 'nobody'" in out
    assert "no role (group) named 'astronauts'" in out
    assert "1 of 3 cases passed" in out


@pytest.mark.parametrize(
    "cases",
    [
        {"cases": "x"},
        [{"message": "hi"}],
        [{"user": "a", "role": "b", "message": "hi"}],
        [{"user": "a"}],
        [{"user": "a", "message": "m", "expect": ["op"]}],
    ],
)
def test_malformed_golden_files_are_refused(tmp_path: Path, cases: Any):
    path = tmp_path / "golden.json"
    path.write_text(json.dumps(cases))

    with pytest.raises(CommandError):
        call_command("assistant_eval", str(path), stdout=StringIO())


def test_on_the_replay_server_the_model_is_judged_by_its_calls(
    world: World, use_llm, tmp_path: Path
):
    peer = use_llm()
    dashboard = str(world.dashboard("support-tickets", "dev").pk)  # prepare looks it up
    peer.script(
        # (a call waiting for confirmation ends the turn, as in a real run: no second step)
        tool_calls(call("deploy_dashboard", {"dashboard": dashboard, "target": "staging"})),
        # A model that gets the second case wrong: backs up prod instead.
        tool_calls(call("run_backup", {"environment": "prod"})),
        text("Backing up."),
        # A viewer's model tries a tool outside the viewer's catalog: judged denied, still forbidden.
        tool_calls(call("deploy_dashboard", {"dashboard": dashboard, "target": "staging"})),
        text("I can't."),
    )
    path = write(
        tmp_path,
        [
            {
                "user": "operator",
                "message": f"deploy {dashboard} to staging",
                "expect": [{"operation": "deploy_dashboard", "entities": {"target": "staging"}}],
            },
            {
                "user": "operator",
                "message": "back up staging",
                "expect": [{"operation": "run_backup", "entities": {"environment": "staging"}}],
            },
            {
                "user": "viewer",
                "message": f"deploy {dashboard} to staging",
                "forbid": ["deploy_dashboard"],
            },
        ],
    )

    out, code = evaluate(path, "--planner", "llm", "--json")

    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [row["outcome"] for row in rows] == ["pass", "fail", "fail"]
    assert rows[2]["proposed"] == [
        {
            "operation": "deploy_dashboard",
            "entities": {"dashboard": dashboard, "target": "staging"},
            "decision": "denied",
        }
    ]
    assert code == 1
    assert "(evaluation: this call was judged, not run)" in json.dumps(peer.requests[2]["messages"])
    nothing_happened()


def test_a_validation_task_records_a_finding_per_case(
    world: World, django_capture_on_commit_callbacks
):
    task = ValidationTaskService.create_task(
        name="Planner evals",
        target="auth.Group",
        rules=[{"name": "planner_eval", "options": {"golden": str(GOLDEN), "planner": "keywords"}}],
        owner=world.admin,
        schedule="0 3 * * *",
    )

    with django_capture_on_commit_callbacks(execute=True):
        run = ValidationTaskService.trigger_run(task, "user", user=world.admin)
    run.refresh_from_db()

    findings = list(ValidationFinding.objects.filter(run=run).order_by("id"))
    assert len(findings) == len([c for c in load_cases(GOLDEN) if c.written_for("keywords")])
    assert {f.outcome for f in findings} == {"pass"}
    assert (run.status, run.passed, run.failed) == ("passed", len(findings), 0)
    assert findings[0].details["case"] == "search in an environment"


def test_a_judged_call_keeps_sensitive_values_out_of_its_finding(world: World):
    (result,) = run_cases(
        load_cases([{"user": "admin", "message": "store secret label=wifi secret=Hunter2xyz"}]),
        planner="keywords",
    )

    assert [(c.operation, c.entities) for c in result.proposed] == [
        ("store_secret", {"label": "wifi", "secret": "[redacted]"})
    ]
    # (the case's own message is the golden file's text, kept as written)
    assert "Hunter2xyz" not in json.dumps(result.verdict().details["proposed"])


def test_the_golden_set_names_every_tool_and_every_role_of_the_example_project():
    cases = load_cases(GOLDEN)
    named = {call["operation"] for case in cases for call in case.expect}
    named |= {operation for case in cases for operation in (*case.forbid, *case.allow)}
    senders = {case.user for case in cases} | {case.role for case in cases}

    assert len(cases) >= 30
    assert named >= {tool.operation for tool in registry if not tool.module.startswith("tests.")}
    assert senders >= {"admin", "operator", "viewer", "operators", "viewers", "superuser"}
    assert any(case.results for case in cases)  # injections inside tool results
