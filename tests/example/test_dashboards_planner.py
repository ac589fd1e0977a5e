"""The keyword planner on the dashboards domain, message by message: plain phrasing picks the tool
and fills its entities, and what it plans goes through dispatch like any other call."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from rest_framework.test import APIClient

from assistant.dispatch.door import dispatch
from assistant.models import Job
from assistant.turns.planners.keywords import plan
from dashboards.models import Backup
from tests.example.dashboards_world import World

pytestmark = pytest.mark.django_db

TASK = "6f1c1d0e-0000-4000-8000-000000000000"


def planned(text: str, user: Any) -> tuple[str, dict[str, Any]]:
    (intent,) = plan(text, user)
    return intent.operation, intent.entities


# Every operation is recognised from plain phrasing (the keyword decides the tool).
RECOGNISED = [
    ("search dashboards sales", "search_dashboards"),
    ("find dashboard sales in staging", "search_dashboards"),
    ("list dashboards", "search_dashboards"),
    ("back up staging", "run_backup"),
    ("backup prod", "run_backup"),
    ("deploy 12 to prod", "deploy_dashboard"),
    ("promote the sales dashboard to staging", "deploy_dashboard"),
    (f"what's the status of task {TASK}", "get_task_status"),
    ("health summary", "get_health_summary"),
    ("how is the system health?", "get_health_summary"),
    ("create branch feature-x", "create_branch"),
    ("commit staging", "commit_changes"),
    ("commit changes of staging to feature-x", "commit_changes"),
    ("document dashboard 3", "run_llm_documentation"),
    ("write documentation for the sales dashboard", "run_llm_documentation"),
    ("validate dashboards", "run_llm_validation"),
    ("migrate dashboards from dev to staging", "execute_migration"),
    ("what can you do", "show_capabilities"),
]


@pytest.mark.parametrize(("message", "operation"), RECOGNISED)
def test_plain_phrasing_picks_the_right_tool(world: World, message: str, operation: str) -> None:
    assert planned(message, world.admin)[0] == operation


# Plain phrasing, with the entities a person means.
PLAIN = [
    pytest.param(
        "search dashboards sales",
        ("search_dashboards", {"search": "sales"}),
        id="search",
    ),
    pytest.param(
        "find dashboard sales in staging",
        ("search_dashboards", {"search": "sales", "environment": "staging"}),
        id="search-in-environment",
    ),
    pytest.param(
        "back up staging",
        ("run_backup", {"environment": "staging"}),
        id="backup",
    ),
    pytest.param(
        "deploy 12 to prod",
        ("deploy_dashboard", {"dashboard": "12", "target": "prod"}),
        id="deploy",
    ),
    pytest.param(
        f"what's the status of task {TASK}",
        ("get_task_status", {"task_id": uuid.UUID(TASK)}),
        id="task-status",
    ),
    pytest.param("health summary", ("get_health_summary", {}), id="health"),
    pytest.param(
        "create branch feature-x",
        ("create_branch", {"name": "feature-x"}),
        id="create-branch",
    ),
    pytest.param(
        "commit staging",
        ("commit_changes", {"environment": "staging"}),
        id="commit",
    ),
    pytest.param(
        "document dashboard 3",
        ("run_llm_documentation", {"dashboard": "3"}),
        id="document",
    ),
    pytest.param(
        "validate dashboards",
        ("run_llm_validation", {"target": "dashboards"}),  # a RESOURCES name
        id="validate",
    ),
    pytest.param(
        "migrate dashboards from dev to staging dry_run=true",
        ("execute_migration", {"source": "dev", "target": "staging", "dry_run": True}),
        id="migrate",
    ),
]


@pytest.mark.parametrize(("message", "expected"), PLAIN)
def test_plain_phrasing_fills_the_entities(
    world: World, message: str, expected: tuple[str, dict[str, Any]]
) -> None:
    assert planned(message, world.admin) == expected


# What works today: quoted values (in the order the entities are declared) and key=value pairs.
SPELLED_OUT = [
    ('search dashboards "sales"', ("search_dashboards", {"search": "sales"})),
    (
        'find dashboard "sales" in "staging"',
        ("search_dashboards", {"search": "sales", "environment": "staging"}),
    ),
    (
        "search dashboards environment=prod page=2",
        ("search_dashboards", {"environment": "prod", "page": 2}),
    ),
    ('back up "staging"', ("run_backup", {"environment": "staging"})),
    ("backup environment=prod", ("run_backup", {"environment": "prod"})),
    ('deploy "12" to "prod"', ("deploy_dashboard", {"dashboard": "12", "target": "prod"})),
    (
        "deploy dashboard=sales-overview source=staging target=prod",
        (
            "deploy_dashboard",
            {"dashboard": "sales-overview", "source": "staging", "target": "prod"},
        ),
    ),
    (f"status of task task_id={TASK}", ("get_task_status", {"task_id": uuid.UUID(TASK)})),
    (f'what\'s the status of task "{TASK}"', ("get_task_status", {"task_id": uuid.UUID(TASK)})),
    ('create branch "feature-x"', ("create_branch", {"name": "feature-x"})),
    (
        "create branch name=hotfix base=release",
        ("create_branch", {"name": "hotfix", "base": "release"}),
    ),
    ('commit "staging"', ("commit_changes", {"environment": "staging"})),
    (
        'commit changes "staging" to "feature-x" message="Q3 refresh"',
        (
            "commit_changes",
            {"environment": "staging", "branch": "feature-x", "message": "Q3 refresh"},
        ),
    ),
    ('document dashboard "3"', ("run_llm_documentation", {"dashboard": "3"})),
    (
        'document dashboard "sales overview" environment=prod',
        ("run_llm_documentation", {"dashboard": "sales overview", "environment": "prod"}),
    ),
    ("validate 'dashboards.Dashboard'", ("run_llm_validation", {"target": "dashboards.Dashboard"})),
    (
        "migrate source=dev target=staging dashboards=support-tickets,data-quality dry_run=yes",
        (
            "execute_migration",
            {
                "source": "dev",
                "target": "staging",
                "dashboards": ["support-tickets", "data-quality"],
                "dry_run": True,
            },
        ),
    ),
]


@pytest.mark.parametrize(("message", "expected"), SPELLED_OUT)
def test_quoted_and_named_values_fill_the_entities(
    world: World, message: str, expected: tuple[str, dict[str, Any]]
) -> None:
    assert planned(message, world.admin) == expected


def test_the_viewer_is_told_what_a_dashboards_tool_needs_and_nothing_of_other_domains(
    world: World,
) -> None:
    # The viewer searches dashboards: the domain's other tools are no secret to them, and a
    # request for one goes to dispatch bare, to be refused with what it needs.
    for message, operation in [
        ('back up "staging"', "run_backup"),
        ('deploy "12" to "prod"', "deploy_dashboard"),
        ('commit "dev"', "commit_changes"),
    ]:
        assert planned(message, world.viewer) == (operation, {}), message
    refused = dispatch("deploy_dashboard", {}, user=world.viewer)
    assert (refused.decision, refused.text) == (
        "denied",
        "You can't use deploy_dashboard: it needs “Can deploy dashboards to environments it may "
        "change”. Ask an operator for it.",
    )
    # ... but health is another domain (operations), one they have no part in
    assert planned("health summary", world.viewer) == ("show_capabilities", {})
    assert planned('search dashboards "sales"', world.viewer)[0] == "search_dashboards"


# -- message by message through the REST chat endpoint -----------------------------------------


def say(user: Any, message: str, conversation: str | None = None) -> dict[str, Any]:
    client = APIClient()
    client.force_login(user)
    body = {"message": message, **({"conversation": conversation} if conversation else {})}
    response = client.post("/assistant/api/messages/", body, format="json")
    assert response.status_code == 201, response.json()
    return response.json()


def test_a_session_of_messages_as_the_operator(
    world: World, django_capture_on_commit_callbacks: Any
) -> None:
    first = say(world.operator, 'search dashboards "sales" environment=staging')
    conversation = first["conversation"]
    (found,) = first["outcomes"]
    assert found["text"].startswith("2 dashboards in Staging matching “sales”:")

    with django_capture_on_commit_callbacks(execute=True):
        (backup,) = say(world.operator, 'back up "staging"', conversation)["outcomes"]
    assert backup["decision"] == "executed"
    assert Job.objects.get(pk=backup["task_id"]).status == "succeeded"
    assert Backup.objects.filter(environment__slug="staging").count() == 1

    turn = say(world.operator, 'deploy "support-tickets" to "staging" source=dev', conversation)
    (asked,) = turn["outcomes"]
    assert asked["decision"] == "confirmation_requested"
    assert [action["operation"] for action in turn["pending_actions"]] == ["deploy_dashboard"]

    (health,) = say(world.operator, "health summary", conversation)["outcomes"]
    assert health["decision"] == "executed"
    assert health["data"]["jobs"]["queued"] == 0


def test_asking_for_a_tasks_status_in_the_chat(
    world: World, django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        (backup,) = say(world.operator, 'back up "dev"')["outcomes"]

    turn = say(world.operator, f'what\'s the status of task "{backup["task_id"]}"')

    (status,) = turn["outcomes"]
    assert status["text"].startswith("Run backup succeeded: Backup #")


def test_a_plain_deploy_message_never_deploys_without_approval(world: World) -> None:
    (outcome,) = say(world.admin, "deploy 12 to prod")["outcomes"]

    assert outcome["decision"] in ("invalid", "confirmation_requested")
    assert not Job.objects.exists()
