"""The dashboards domain's catalog and its repository tools, over REST: search_dashboards,
create_branch and commit_changes, for the right and the wrong users, with bad entities."""

from __future__ import annotations

import json
from typing import Any

import pytest

from assistant.core.registry import registry
from assistant.dispatch.catalog import visible_tools
from assistant.dispatch.door import dispatch as assistant_dispatch
from assistant.models import AuditEntry, PendingAction
from dashboards import repository
from tests.audit_trail import decisions
from tests.example.dashboard_calls import DASHBOARD_TOOLS, REFUSED, confirm, dispatch, reject, state
from tests.example.dashboards_world import World

pytestmark = pytest.mark.django_db


# -- the catalog ----------------------------------------------------------------------------


def test_each_role_sees_the_dashboard_tools_the_demo_grants(world: World) -> None:
    def seen(user: Any) -> set[str]:
        return {tool.operation for tool in visible_tools(user, site=registry)} & (
            DASHBOARD_TOOLS | {"run_llm_validation"}
        )

    assert seen(world.admin) == DASHBOARD_TOOLS | {"run_llm_validation"}
    assert seen(world.operator) == DASHBOARD_TOOLS | {"run_llm_validation"}
    assert seen(world.viewer) == {"search_dashboards"}
    assert seen(world.outsider) == set()


def test_every_tool_is_declared_once_in_its_own_module() -> None:
    for operation in DASHBOARD_TOOLS:
        tool = registry.get(operation)
        assert tool.module == f"dashboards.tools.{operation}"
        assert tool.handler.__assistant_tool__ is tool  # type: ignore[attr-defined]


def test_risk_and_confirmation_follow_the_adr() -> None:
    expected = {
        "search_dashboards": ("safe", False),
        "get_health_summary": ("safe", False),
        "create_branch": ("guarded", False),
        "commit_changes": ("guarded", True),
        "run_backup": ("guarded", False),
        "run_llm_documentation": ("guarded", False),
        "deploy_dashboard": ("dangerous", True),
        "execute_migration": ("dangerous", True),
    }
    assert {
        operation: (
            registry.get(operation).risk_level.value,
            registry.get(operation).requires_confirmation,
        )
        for operation in expected
    } == expected


def test_dispatch_refuses_every_dashboard_tool_the_catalog_hides(reader: Any) -> None:
    valid_entities = {
        "search_dashboards": {"search": "sales"},
        "create_branch": {"name": "feature-x"},
        "commit_changes": {"environment": "dev"},
        "deploy_dashboard": {"dashboard": "1", "target": "prod"},
        "execute_migration": {"source": "dev", "target": "staging"},
        "run_backup": {"environment": "dev"},
        "run_llm_documentation": {"dashboard": "1"},
        "get_health_summary": {},
    }
    visible = {tool.operation for tool in visible_tools(reader, site=registry)}
    assert DASHBOARD_TOOLS - visible == set(valid_entities)

    for operation, entities in valid_entities.items():
        outcome = assistant_dispatch(operation, entities, user=reader)
        # the reader has no part in these domains: each is answered as a missing tool
        assert (outcome.decision, outcome.code) == ("unknown", "unknown_operation"), operation
    assert set(AuditEntry.objects.values_list("decision", flat=True)) == {"denied"}
    assert not PendingAction.objects.exists()


# -- search_dashboards ----------------------------------------------------------------------


def test_search_finds_dashboards_by_title_in_one_environment(world: World) -> None:
    response = dispatch(world.operator, "search_dashboards", search="sales", environment="Staging")

    assert response.status_code == 200
    body = response.json()
    assert body["decision"] == "executed"
    assert [row["slug"] for row in body["data"]["results"]] == ["sales-overview", "sales-pipeline"]
    assert body["text"].startswith("2 dashboards in Staging matching “sales”:")
    assert decisions("search_dashboards") == ["executed"]


def test_search_by_id_and_by_slug(world: World) -> None:
    wanted = world.dashboard("web-traffic", "prod")

    by_id = dispatch(world.operator, "search_dashboards", search=str(wanted.pk)).json()
    by_slug = dispatch(world.operator, "search_dashboards", search="web-traffic").json()

    assert wanted.pk in [row["id"] for row in by_id["data"]["results"]]
    assert {row["environment"] for row in by_slug["data"]["results"]} == {"dev", "staging", "prod"}


def test_search_pages_through_the_results(world: World) -> None:
    first = dispatch(world.admin, "search_dashboards", page_size=12).json()["data"]
    third = dispatch(world.admin, "search_dashboards", page_size=12, page=3).json()["data"]
    past = dispatch(world.admin, "search_dashboards", page_size=12, page=4).json()

    assert (first["count"], first["pages"], len(first["results"])) == (31, 3, 12)
    assert len(third["results"]) == 7
    assert past["text"] == "Page 4 is past the last page (3)."


def test_the_viewer_finds_only_the_dashboards_granted_to_them(world: World) -> None:
    everything = dispatch(world.viewer, "search_dashboards").json()["data"]
    pipeline = dispatch(world.viewer, "search_dashboards", search="pipeline").json()

    assert {row["slug"] for row in everything["results"]} == {
        "sales-overview",
        "web-traffic",
        "executive-summary",
    }
    assert everything["count"] == 9
    assert pipeline["text"] == "No dashboards you may view matching “pipeline”."


def test_search_is_refused_to_a_user_without_the_permission(world: World) -> None:
    before = state()

    response = dispatch(world.outsider, "search_dashboards", search="sales")

    assert response.status_code == 404  # (no part in dashboards: as if it did not exist)
    assert response.json()["code"] == "unknown_operation"
    assert decisions("search_dashboards") == ["denied"]
    assert state() == before


@pytest.mark.parametrize(
    ("entities", "errors"),
    [
        (
            {"environment": "qa"},
            {"environment": "no environment 'qa'; choose one of dev, staging, prod"},
        ),
        ({"page": 0}, {"page": "must be at least 1"}),
        ({"page_size": 500}, {"page_size": "must be at most 100"}),
        ({"page": "two"}, {"page": "expected an integer"}),
        ({"page": 2**63}, {"page": "must fit in 64 bits (between -2**63 and 2**63-1)"}),
        ({"search": "x" * 201}, {"search": "must be at most 200 characters long"}),
        ({"colour": "red"}, {"colour": "unknown entity"}),
    ],
    ids=[
        "unknown-environment",
        "page-zero",
        "page-too-big",
        "page-not-a-number",
        "page-beyond-64-bits",
        "search-too-long",
        "unknown-entity",
    ],
)
def test_search_with_bad_entities_says_which_and_why(
    world: World, entities: dict[str, Any], errors: dict[str, str]
) -> None:
    response = dispatch(world.operator, "search_dashboards", **entities)

    assert response.status_code == 400
    assert (response.json()["code"], response.json()["errors"]) == ("invalid_entities", errors)
    assert decisions("search_dashboards") == ["invalid"]


# -- create_branch --------------------------------------------------------------------------


def test_create_branch_starts_a_branch_at_its_base(world: World) -> None:
    main = repository.branch_commit("main")

    response = dispatch(world.operator, "create_branch", name="feature-x")

    assert response.status_code == 200
    body = response.json()
    assert body["decision"] == "executed"
    assert body["text"] == f"Created branch feature-x from main at {main[:12]}."
    assert body["data"] == {"branch": "feature-x", "base": "main", "commit": main}
    assert repository.branch_commit("feature-x") == main
    assert decisions("create_branch") == ["executed"]


def test_create_branch_from_another_branch(world: World) -> None:
    dispatch(world.operator, "create_branch", name="release")
    repository.commit_files(
        "release", {"notes.md": b"x"}, prefix="docs", message="notes", user=world.operator
    )

    response = dispatch(world.operator, "create_branch", name="hotfix", base="release")

    assert response.status_code == 200
    assert repository.branch_commit("hotfix") == repository.branch_commit("release")
    assert repository.branch_commit("hotfix") != repository.branch_commit("main")


@pytest.mark.parametrize("who", ["viewer", "outsider"])
def test_create_branch_is_refused_to_users_without_the_permission(world: World, who: str) -> None:
    before = state()

    response = dispatch(getattr(world, who), "create_branch", name="feature-x")

    assert response.status_code == REFUSED[who]
    assert decisions("create_branch") == ["denied"]
    assert state() == before


@pytest.mark.parametrize(
    ("entities", "errors"),
    [
        ({"name": "two words"}, {"name": "'two words' is not a valid branch name"}),
        ({"name": "a..b"}, {"name": "'a..b' is not a valid branch name"}),
        ({"name": "main"}, {"name": "branch 'main' already exists"}),
        ({"name": "feature-x", "base": "nope"}, {"base": "no branch 'nope'; branches: main"}),
        ({}, {"name": "required"}),
    ],
    ids=["space", "dots", "exists", "unknown-base", "missing"],
)
def test_create_branch_with_bad_entities_changes_nothing(
    world: World, entities: dict[str, Any], errors: dict[str, str]
) -> None:
    before = state()

    response = dispatch(world.operator, "create_branch", **entities)

    assert response.status_code == 400
    assert response.json()["errors"] == errors
    assert decisions("create_branch") == ["invalid"]
    assert state() == before


# -- commit_changes -------------------------------------------------------------------------


def test_commit_changes_asks_first_then_commits_the_environments_files(world: World) -> None:
    dispatch(world.operator, "create_branch", name="feature-x")
    changed = world.dashboard("sales-overview", "staging")
    changed.title = "Sales overview (new)"
    changed.save()
    before = state()

    asked = dispatch(world.operator, "commit_changes", environment="staging", branch="feature-x")

    assert asked.json()["decision"] == "confirmation_requested"
    assert asked.json()["pending_action"]["summary"] == (
        "Commit Staging's 11 dashboards as files on branch feature-x"
    )
    assert state() == before

    response = confirm(world.operator, asked)

    assert response.status_code == 200
    body = response.json()
    sha = repository.branch_commit("feature-x")
    assert body["decision"] == "confirmed"
    assert body["data"]["commit"] == sha
    assert body["data"]["files"] == [{"status": "M", "path": "staging/sales-overview.json"}]
    assert body["text"] == (
        f"Committed 1 changed files of Staging on feature-x: {sha[:12]}\n"
        "  M staging/sales-overview.json"
    )
    exported = json.loads(repository.show("feature-x", "staging/sales-overview.json"))
    assert exported["title"] == "Sales overview (new)"
    assert repository.git("log", "-1", "--format=%an", sha) == "operator"
    assert repository.branch_commit("main") == before["branches"]["main"]
    assert decisions("commit_changes") == ["confirmation_requested", "confirmed"]


def test_commit_changes_removes_the_files_of_deleted_dashboards(world: World) -> None:
    world.dashboard("hiring-pipeline", "staging").delete()

    response = confirm(world.admin, dispatch(world.admin, "commit_changes", environment="staging"))

    assert response.json()["data"]["files"] == [
        {"status": "D", "path": "staging/hiring-pipeline.json"}
    ]


def test_commit_changes_with_nothing_new_says_so(world: World) -> None:
    main = repository.branch_commit("main")

    response = confirm(
        world.operator, dispatch(world.operator, "commit_changes", environment="dev")
    )

    assert (
        response.json()["text"]
        == "Nothing to commit: main already holds Development's 13 dashboards."
    )
    assert repository.branch_commit("main") == main


def test_a_refused_commit_commits_nothing(world: World) -> None:
    world.dashboard("web-traffic", "dev").delete()
    before = state()

    response = reject(world.operator, dispatch(world.operator, "commit_changes", environment="dev"))

    assert response.json()["decision"] == "cancelled"
    assert state() == before
    assert decisions("commit_changes") == ["confirmation_requested", "cancelled"]


@pytest.mark.parametrize("who", ["viewer", "outsider"])
def test_commit_changes_is_refused_to_users_without_the_permission(world: World, who: str) -> None:
    response = dispatch(getattr(world, who), "commit_changes", environment="dev")

    assert response.status_code == REFUSED[who]
    assert decisions("commit_changes") == ["denied"]
    assert not PendingAction.objects.exists()


def test_commit_changes_needs_to_see_the_environment(world: World, make_user: Any) -> None:
    committer = make_user("committer", "dashboards.commit_dashboard")
    before = state()

    response = dispatch(committer, "commit_changes", environment="prod")

    assert response.status_code == 403
    assert response.json()["detail"] == "You may not view the Production environment."
    assert decisions("commit_changes") == ["denied"]  # before anyone is asked
    assert not PendingAction.objects.exists()
    assert state() == before


@pytest.mark.parametrize(
    ("entities", "errors"),
    [
        (
            {"environment": "qa"},
            {"environment": "no environment 'qa'; choose one of dev, staging, prod"},
        ),
        (
            {"environment": "dev", "branch": "nope"},
            {"branch": "no branch 'nope'; create it first (create_branch name=nope)"},
        ),
    ],
    ids=["unknown-environment", "unknown-branch"],
)
def test_commit_changes_with_bad_entities_is_refused_before_asking(
    world: World, entities: dict[str, Any], errors: dict[str, str]
) -> None:
    world.dashboard("web-traffic", "dev").delete()
    before = state()

    response = dispatch(world.operator, "commit_changes", **entities)

    assert response.status_code == 400
    assert response.json()["errors"] == errors
    assert decisions("commit_changes") == ["invalid"]  # before anyone is asked
    assert not PendingAction.objects.exists()
    assert state() == before


def test_commit_changes_with_entities_of_the_wrong_type_is_refused_before_asking(
    world: World,
) -> None:
    response = dispatch(world.operator, "commit_changes", environment=3)

    assert response.status_code == 400
    assert response.json()["errors"] == {"environment": "expected a string"}
    assert not PendingAction.objects.exists()
