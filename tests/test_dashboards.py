"""The dashboards domain's tools, end to end: REST and the websocket, right and wrong users, bad
entities, the confirmation path of the risky ones, and the jobs they start."""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from io import StringIO
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone
from guardian.shortcuts import assign_perm
from rest_framework.test import APIClient

from assistant.catalog import visible_tools
from assistant.models import AuditEntry, Job, PendingAction, ValidationFinding, ValidationRun
from assistant.registry import registry
from assistant.runner import RUNNING
from dashboards import repository
from dashboards.models import Backup, Dashboard
from dashboards.validation_rules import sql_problems
from tests.asgi import application
from tests.dashboards_world import World
from tests.dashboards_world import dashboard_storage as dashboard_storage  # the fixture
from tests.dashboards_world import world as world  # the fixture
from tests.openai_peer import call as llm_call
from tests.openai_peer import error as llm_error
from tests.openai_peer import openai_peer as openai_peer  # the fixture
from tests.openai_peer import text as llm_text
from tests.openai_peer import tool_calls as llm_tool_calls

API = "/assistant/api"
DASHBOARD_TOOLS = {
    "search_dashboards",
    "create_branch",
    "commit_changes",
    "deploy_dashboard",
    "execute_migration",
    "run_backup",
    "run_llm_documentation",
    "get_health_summary",
}


# -- helpers --------------------------------------------------------------------------------


def client_for(user: Any) -> APIClient:
    client = APIClient()
    client.force_login(user)
    return client


def dispatch(user: Any, operation: str, **entities: Any) -> Any:
    return client_for(user).post(
        f"{API}/dispatch/", {"operation": operation, "entities": entities}, format="json"
    )


def confirm(user: Any, response: Any) -> Any:
    assert response.status_code == 202, response.json()
    return client_for(user).post(
        f"{API}/actions/{response.json()['pending_action']['id']}/confirm/"
    )


def reject(user: Any, response: Any) -> Any:
    assert response.status_code == 202, response.json()
    return client_for(user).post(f"{API}/actions/{response.json()['pending_action']['id']}/cancel/")


def decisions(operation: str) -> list[str]:
    return list(
        AuditEntry.objects.filter(operation=operation)
        .order_by("pk")
        .values_list("decision", flat=True)
    )


def state() -> dict[str, Any]:
    """Everything a dashboard tool could change."""
    return {
        "dashboards": list(
            Dashboard.objects.order_by("pk").values_list(
                "pk", "environment__slug", "slug", "title", "version", "database", "documentation"
            )
        ),
        "backups": Backup.objects.count(),
        "jobs": Job.objects.count(),
        "branches": {name: repository.branch_commit(name) for name in repository.branches()},
    }


@pytest.fixture
def progress(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, str]]:
    """Every ``job.report(percent, message)`` the jobs make, in order."""
    seen: list[tuple[str, int, str]] = []
    original = Job.report

    def report(self: Job, percent: float, message: str = "") -> None:
        seen.append((self.operation, int(percent), message))
        original(self, percent, message)

    monkeypatch.setattr(Job, "report", report)
    return seen


def job_of(response: Any) -> Job:
    return Job.objects.get(pk=response.json()["task_id"])


def assert_progressed(seen: list[tuple[str, int, str]], operation: str) -> None:
    """The job reported several steps, never going backwards, and ended at 100 %."""
    percents = [percent for name, percent, _ in seen if name == operation]
    assert len(percents) >= 3, seen
    assert percents == sorted(percents)
    assert percents[-1] == 100


@pytest.fixture
def run_jobs(django_capture_on_commit_callbacks: Any) -> Callable[[], Any]:
    """Jobs are handed to the (immediate) task backend on commit: run them at the block's end."""

    def context() -> Any:
        return django_capture_on_commit_callbacks(execute=True)

    return context


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

    assert response.status_code == 403
    assert response.json()["code"] == "permission_denied"
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

    assert response.status_code == 403
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
        "commit_changes(environment='staging', branch='feature-x') is guarded and needs your "
        "confirmation."
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

    assert response.status_code == 403
    assert decisions("commit_changes") == ["denied"]
    assert not PendingAction.objects.exists()


def test_commit_changes_needs_to_see_the_environment(world: World, make_user: Any) -> None:
    committer = make_user("committer", "dashboards.commit_dashboard")
    before = state()

    response = confirm(committer, dispatch(committer, "commit_changes", environment="prod"))

    assert response.status_code == 403
    assert response.json()["detail"] == "You may not view the Production environment."
    assert decisions("commit_changes") == ["confirmation_requested", "denied"]
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
def test_commit_changes_with_bad_entities_changes_nothing(
    world: World, entities: dict[str, Any], errors: dict[str, str]
) -> None:
    world.dashboard("web-traffic", "dev").delete()
    before = state()

    response = confirm(world.operator, dispatch(world.operator, "commit_changes", **entities))

    assert response.status_code == 400
    assert response.json()["errors"] == errors
    assert decisions("commit_changes") == ["confirmation_requested", "invalid"]
    assert state() == before


def test_commit_changes_with_entities_of_the_wrong_type_is_refused_before_asking(
    world: World,
) -> None:
    response = dispatch(world.operator, "commit_changes", environment=3)

    assert response.status_code == 400
    assert response.json()["errors"] == {"environment": "expected a string"}
    assert not PendingAction.objects.exists()


# -- deploy_dashboard -----------------------------------------------------------------------


def test_deploy_waits_for_approval_then_copies_the_dashboard_with_progress(
    world: World, progress: list[Any], run_jobs: Callable[[], Any]
) -> None:
    source = world.dashboard("sales-overview", "staging")
    target = world.dashboard("sales-overview", "prod")
    before = state()

    asked = dispatch(world.admin, "deploy_dashboard", dashboard=str(source.pk), target="prod")

    assert asked.status_code == 202
    assert asked.json()["pending_action"]["summary"] == (
        f"deploy_dashboard(dashboard='{source.pk}', target='prod') is dangerous and needs your "
        "confirmation."
    )
    assert state() == before

    with run_jobs():
        response = confirm(world.admin, asked)

    assert response.status_code == 200
    assert response.json()["decision"] == "confirmed"
    job = job_of(response)
    assert response.json()["text"] == (
        f"Deploying #{source.pk} Sales overview v2 from Staging to Production (task {job.pk})."
    )
    job.refresh_from_db()
    assert (job.status, job.progress, job.operation) == ("succeeded", 100, "deploy_dashboard")
    assert job.result == (
        f"Deployed Sales overview v2 from Staging to Production as #{target.pk} (replacing v1); "
        "it queries prod_warehouse."
    )
    target.refresh_from_db()
    assert (target.version, target.database, target.charts) == (2, "prod_warehouse", source.charts)
    assert_progressed(progress, "deploy_dashboard")
    assert [message for _, _, message in progress][:2] == [
        "checking Sales overview v2",
        "copying chart 1 of 3: Revenue by month",
    ]
    assert decisions("deploy_dashboard") == ["confirmation_requested", "confirmed"]


def test_the_operator_deploys_by_slug_from_a_named_environment(
    world: World, run_jobs: Callable[[], Any]
) -> None:
    with run_jobs():
        response = confirm(
            world.operator,
            dispatch(
                world.operator,
                "deploy_dashboard",
                dashboard="support-tickets",
                source="dev",
                target="staging",
            ),
        )

    assert response.json()["decision"] == "confirmed"
    assert job_of(response).status == "succeeded"
    copy = world.dashboard("support-tickets", "staging")
    assert (copy.version, copy.database, copy.published) == (3, "staging_warehouse", True)
    assert world.dashboard("support-tickets", "dev").environment.slug == "dev"


def test_the_operator_may_not_deploy_to_production(world: World) -> None:
    before = state()

    response = confirm(
        world.operator,
        dispatch(
            world.operator,
            "deploy_dashboard",
            dashboard="web-traffic",
            source="staging",
            target="prod",
        ),
    )

    assert response.status_code == 403
    assert response.json()["code"] == "permission_denied"
    assert response.json()["detail"] == "You may not change the Production environment."
    assert decisions("deploy_dashboard") == ["confirmation_requested", "denied"]
    assert state() == before


def test_a_refused_deployment_says_why_not_that_it_needs_confirmation(world: World) -> None:
    response = confirm(
        world.operator,
        dispatch(
            world.operator,
            "deploy_dashboard",
            dashboard="web-traffic",
            source="staging",
            target="prod",
        ),
    )

    assert response.json()["text"] == "You may not change the Production environment."


@pytest.mark.parametrize("who", ["viewer", "outsider"])
def test_deploy_is_refused_to_users_without_the_permission(world: World, who: str) -> None:
    before = state()

    response = dispatch(getattr(world, who), "deploy_dashboard", dashboard="1", target="dev")

    assert response.status_code == 403
    assert decisions("deploy_dashboard") == ["denied"]
    assert not PendingAction.objects.exists()
    assert state() == before


def test_an_ambiguous_dashboard_is_asked_about_not_guessed(world: World) -> None:
    before = state()

    response = confirm(
        world.admin, dispatch(world.admin, "deploy_dashboard", dashboard="sales", target="prod")
    )

    body = response.json()
    assert body["decision"] == "confirmed"
    assert body["task_id"] is None
    lines = body["text"].splitlines()
    assert lines[0] == "“sales” matches several dashboards you may view — which one?"
    assert len(lines) == 1 + 6 + 1
    assert lines[-1].startswith("Ask again with its id, e.g. dashboard=")
    assert {(c["slug"], c["environment"]) for c in body["data"]["candidates"]} == {
        (slug, env)
        for slug in ("sales-overview", "sales-pipeline")
        for env in ("dev", "staging", "prod")
    }
    assert state() == before


def test_the_candidates_are_only_dashboards_the_user_may_view(world: World, make_user: Any) -> None:
    deployer = make_user("deployer", "dashboards.deploy_dashboard")
    for env in ("dev", "staging"):
        assign_perm("dashboards.view_dashboard", deployer, world.dashboard("sales-overview", env))
    assign_perm("dashboards.change_environment", deployer, world.env("prod"))
    deployer = world.fresh(deployer)

    response = confirm(
        deployer, dispatch(deployer, "deploy_dashboard", dashboard="sales", target="prod")
    )

    assert [c["environment"] for c in response.json()["data"]["candidates"]] == ["dev", "staging"]


@pytest.mark.parametrize(
    ("entities", "errors"),
    [
        (
            {"dashboard": "no such thing", "target": "prod"},
            {"dashboard": "no dashboard you may view matches 'no such thing'"},
        ),
        (
            {"dashboard": "web-traffic", "target": "qa"},
            {"target": "no environment 'qa'; choose one of dev, staging, prod"},
        ),
        (
            {"dashboard": "web-traffic", "source": "prod", "target": "prod"},
            {"target": "#{id} Web traffic is already in Production"},
        ),
    ],
    ids=["unknown-dashboard", "unknown-target", "already-there"],
)
def test_deploy_with_bad_entities_changes_nothing(
    world: World, entities: dict[str, Any], errors: dict[str, str]
) -> None:
    before = state()
    errors = {
        name: message.replace("{id}", str(world.dashboard("web-traffic", "prod").pk))
        for name, message in errors.items()
    }

    response = confirm(world.admin, dispatch(world.admin, "deploy_dashboard", **entities))

    assert response.status_code == 400
    assert response.json()["errors"] == errors
    assert decisions("deploy_dashboard") == ["confirmation_requested", "invalid"]
    assert state() == before


def test_deploy_without_a_target_is_refused_before_asking(world: World) -> None:
    response = dispatch(world.admin, "deploy_dashboard", dashboard="12")

    assert response.status_code == 400
    assert response.json()["errors"] == {"target": "required"}
    assert not PendingAction.objects.exists()


def test_a_rejected_deployment_deploys_nothing(world: World) -> None:
    before = state()

    response = reject(
        world.admin,
        dispatch(
            world.admin, "deploy_dashboard", dashboard="web-traffic", source="dev", target="prod"
        ),
    )

    assert response.json()["decision"] == "cancelled"
    assert decisions("deploy_dashboard") == ["confirmation_requested", "cancelled"]
    assert state() == before


# -- execute_migration ----------------------------------------------------------------------


def test_a_dry_run_lists_what_would_change_and_changes_nothing(world: World) -> None:
    before = state()
    churn_staging = world.dashboard("customer-churn", "staging")
    tickets = world.dashboard("support-tickets", "dev")
    churn = world.dashboard("customer-churn", "dev")

    response = confirm(
        world.operator,
        dispatch(
            world.operator,
            "execute_migration",
            source="dev",
            target="staging",
            dashboards=["support-tickets", "Customer churn"],
            dry_run=True,
        ),
    )

    body = response.json()
    assert body["decision"] == "confirmed"
    assert body["task_id"] is None
    assert body["text"].splitlines() == [
        "Dry run — migrating 2 dashboards from Development to Staging would change:",
        f"#{tickets.pk} Support tickets: moves in staging, database dev_warehouse → staging_warehouse",
        f"#{churn.pk} Customer churn: replaces #{churn_staging.pk} in staging, database "
        "dev_warehouse → staging_warehouse",
        "Nothing was changed.",
    ]
    assert [step["action"] for step in body["data"]["plan"]] == ["move", "replace"]
    assert state() == before


def test_a_migration_moves_the_dashboards_and_remaps_their_database(
    world: World, progress: list[Any], run_jobs: Callable[[], Any]
) -> None:
    tickets = world.dashboard("support-tickets", "dev")
    churn = world.dashboard("customer-churn", "dev")
    churn_staging = world.dashboard("customer-churn", "staging")
    custom = world.dashboard("data-quality", "dev")
    custom.database = "quality_db"
    custom.save()

    with run_jobs():
        response = confirm(
            world.operator,
            dispatch(
                world.operator,
                "execute_migration",
                source="dev",
                target="staging",
                dashboards=[str(tickets.pk), "customer-churn", "data-quality"],
            ),
        )

    assert response.json()["decision"] == "confirmed"
    job = job_of(response)
    assert (job.status, job.progress) == ("succeeded", 100)
    assert job.result.splitlines()[0] == "Migrated 3 dashboards to Staging:"
    tickets.refresh_from_db()
    assert (tickets.environment.slug, tickets.database) == ("staging", "staging_warehouse")
    assert not Dashboard.objects.filter(pk=churn.pk).exists()
    churn_staging.refresh_from_db()
    assert (churn_staging.version, churn_staging.database) == (3, "staging_warehouse")
    custom.refresh_from_db()
    assert (custom.environment.slug, custom.database) == ("staging", "quality_db")
    assert Dashboard.objects.filter(environment__slug="dev").count() == 10
    assert_progressed(progress, "execute_migration")


def test_a_migration_of_everything_moves_what_the_user_may_view(
    world: World, run_jobs: Callable[[], Any]
) -> None:
    with run_jobs():
        response = confirm(
            world.admin,
            dispatch(world.admin, "execute_migration", source="staging", target="prod"),
        )

    assert job_of(response).status == "succeeded"
    assert not Dashboard.objects.filter(environment__slug="staging").exists()
    assert Dashboard.objects.filter(environment__slug="prod").count() == 11


@pytest.mark.parametrize(("source", "target"), [("staging", "prod"), ("prod", "dev")])
def test_the_operator_may_not_migrate_into_or_out_of_production(
    world: World, source: str, target: str
) -> None:
    before = state()

    response = confirm(
        world.operator,
        dispatch(world.operator, "execute_migration", source=source, target=target, dry_run=True),
    )

    assert response.status_code == 403
    assert response.json()["detail"] == "You may not change the Production environment."
    assert decisions("execute_migration") == ["confirmation_requested", "denied"]
    assert state() == before


@pytest.mark.parametrize("who", ["viewer", "outsider"])
def test_migration_is_refused_to_users_without_the_permission(world: World, who: str) -> None:
    response = dispatch(getattr(world, who), "execute_migration", source="dev", target="staging")

    assert response.status_code == 403
    assert decisions("execute_migration") == ["denied"]
    assert not PendingAction.objects.exists()


@pytest.mark.parametrize(
    ("entities", "errors"),
    [
        ({"source": "dev", "target": "dev"}, {"target": "must differ from the source environment"}),
        (
            {"source": "dev", "target": "staging", "dashboards": ["nope"]},
            {"dashboards": "no dashboard in dev you may view matches 'nope'"},
        ),
        (
            {"source": "qa", "target": "staging"},
            {"source": "no environment 'qa'; choose one of dev, staging, prod"},
        ),
    ],
    ids=["same-environment", "unknown-dashboard", "unknown-source"],
)
def test_migration_with_bad_entities_changes_nothing(
    world: World, entities: dict[str, Any], errors: dict[str, str]
) -> None:
    before = state()

    response = confirm(world.operator, dispatch(world.operator, "execute_migration", **entities))

    assert response.status_code == 400
    assert response.json()["errors"] == errors
    assert state() == before


def test_migration_with_a_dry_run_that_is_not_a_boolean_is_refused_before_asking(
    world: World,
) -> None:
    response = dispatch(
        world.operator, "execute_migration", source="dev", target="staging", dry_run="maybe"
    )

    assert response.status_code == 400
    assert response.json()["errors"] == {"dry_run": "expected true or false"}
    assert not PendingAction.objects.exists()


# -- run_backup -----------------------------------------------------------------------------


def test_backup_archives_the_environment_to_storage_with_its_checksum(
    world: World, progress: list[Any], run_jobs: Callable[[], Any]
) -> None:
    with run_jobs():
        response = dispatch(world.operator, "run_backup", environment="staging")

    assert response.status_code == 200
    body = response.json()
    job = job_of(response)
    assert body["decision"] == "executed"
    assert body["text"] == f"Backing up Staging's 11 dashboards (task {job.pk})."
    backup = Backup.objects.get()
    assert (job.status, job.progress) == ("succeeded", 100)
    assert job.result == (
        f"Backup #{backup.pk} of Staging: 11 dashboards, {backup.size} bytes, sha256 "
        f"{backup.sha256[:12]}…; restore it with `manage.py restore_dashboards {backup.pk}`."
    )
    content = (world.media / backup.file.name).read_bytes()
    assert (backup.size, backup.sha256) == (len(content), hashlib.sha256(content).hexdigest())
    assert backup.file.name.startswith("dashboard-backups/staging/staging-")
    assert (backup.created_by, backup.dashboard_count, backup.environment.slug) == (
        world.operator,
        11,
        "staging",
    )
    archived = json.loads(content)
    assert archived["format"] == "dashboards-backup/1"
    assert len(archived["dashboards"]) == 11
    assert_progressed(progress, "run_backup")
    assert decisions("run_backup") == ["executed"]


def test_restore_dashboards_puts_the_environment_back_as_it_was(
    world: World, run_jobs: Callable[[], Any]
) -> None:
    with run_jobs():
        dispatch(world.operator, "run_backup", environment="staging")
    backup = Backup.objects.get()
    as_backed_up = state()["dashboards"]
    staging = world.env("staging")
    world.dashboard("web-traffic", "staging").delete()
    changed = world.dashboard("sales-overview", "staging")
    changed.title, changed.charts = "Changed", []
    changed.save()
    Dashboard.objects.create(environment=staging, slug="extra", title="Extra")
    out = StringIO()

    call_command("restore_dashboards", str(backup.pk), "--dry-run", stdout=out)

    assert out.getvalue().splitlines()[0] == (
        f"Would restore Staging from backup #{backup.pk}: 1 created, 1 updated, 1 deleted, "
        "9 unchanged."
    )
    assert Dashboard.objects.filter(slug="extra").exists()

    call_command("restore_dashboards", str(backup.pk), stdout=StringIO())

    restored = state()["dashboards"]
    assert not Dashboard.objects.filter(slug="extra").exists()
    # web-traffic came back with a new id; everything else is as backed up
    assert sorted(row[1:] for row in restored) == sorted(row[1:] for row in as_backed_up)


def test_restore_refuses_a_damaged_or_unknown_backup(
    world: World, run_jobs: Callable[[], Any]
) -> None:
    with run_jobs():
        dispatch(world.operator, "run_backup", environment="dev")
    backup = Backup.objects.get()
    (world.media / backup.file.name).write_bytes(b'{"format": "dashboards-backup/1"}')
    before = state()

    with pytest.raises(CommandError, match="does not match its size and checksum"):
        call_command("restore_dashboards", str(backup.pk))
    with pytest.raises(CommandError, match="No backup #999"):
        call_command("restore_dashboards", "999")
    assert state() == before


def test_the_operator_may_not_back_up_production(world: World) -> None:
    before = state()

    response = dispatch(world.operator, "run_backup", environment="prod")

    assert response.status_code == 403
    assert response.json()["detail"] == "You may not change the Production environment."
    assert decisions("run_backup") == ["denied"]
    assert state() == before


@pytest.mark.parametrize("who", ["viewer", "outsider"])
def test_backup_is_refused_to_users_without_the_permission(world: World, who: str) -> None:
    before = state()

    response = dispatch(getattr(world, who), "run_backup", environment="dev")

    assert response.status_code == 403
    assert decisions("run_backup") == ["denied"]
    assert state() == before


@pytest.mark.parametrize(
    ("entities", "errors"),
    [
        (
            {"environment": "qa"},
            {"environment": "no environment 'qa'; choose one of dev, staging, prod"},
        ),
        ({}, {"environment": "required"}),
    ],
    ids=["unknown", "missing"],
)
def test_backup_with_bad_entities_changes_nothing(
    world: World, entities: dict[str, Any], errors: dict[str, str]
) -> None:
    before = state()

    response = dispatch(world.operator, "run_backup", **entities)

    assert response.status_code == 400
    assert response.json()["errors"] == errors
    assert state() == before


# -- run_llm_documentation ------------------------------------------------------------------


def test_without_an_llm_the_documentation_is_a_labelled_template(
    world: World, progress: list[Any], run_jobs: Callable[[], Any]
) -> None:
    dashboard = world.dashboard("hiring-pipeline", "dev")

    with run_jobs():
        response = dispatch(
            world.operator, "run_llm_documentation", dashboard="hiring", environment="dev"
        )

    assert response.json()["decision"] == "executed"
    job = job_of(response)
    assert job.status == "succeeded"
    dashboard.refresh_from_db()
    assert dashboard.documentation.startswith(
        "> **Template summary — no language model is configured.** This page was assembled"
    )
    assert "# Hiring pipeline" in dashboard.documentation
    assert "SELECT stage, count(*) FROM candidates GROUP BY stage" in dashboard.documentation
    assert (dashboard.documentation_source, dashboard.documented_at is not None) == (
        "template",
        True,
    )
    assert "a template summary (no LLM is configured)" in job.result
    assert job.result_data["url"] == f"/admin/dashboards/dashboard/{dashboard.pk}/change/"
    assert_progressed(progress, "run_llm_documentation")


def test_the_configured_llm_writes_the_documentation(
    world: World, settings: Any, openai_peer: Any, run_jobs: Callable[[], Any]
) -> None:
    settings.ASSISTANT = {
        **django_settings.ASSISTANT,
        "LLM": {"BASE_URL": openai_peer.url, "MODEL": "doc-model", "TIMEOUT": 5},
    }
    openai_peer.script(llm_text("# Sales overview\n\nRevenue, month by month."))
    dashboard = world.dashboard("sales-overview", "prod")

    with run_jobs():
        response = dispatch(world.admin, "run_llm_documentation", dashboard=str(dashboard.pk))

    assert job_of(response).status == "succeeded"
    dashboard.refresh_from_db()
    assert dashboard.documentation == "# Sales overview\n\nRevenue, month by month.\n"
    assert dashboard.documentation_source == "llm:doc-model"
    (request,) = openai_peer.requests
    assert request["model"] == "doc-model"
    assert "SELECT avg(total) FROM orders" in request["messages"][0]["content"]


def test_a_failing_llm_still_documents_and_says_so(
    world: World, settings: Any, openai_peer: Any, run_jobs: Callable[[], Any]
) -> None:
    settings.ASSISTANT = {
        **django_settings.ASSISTANT,
        "LLM": {"BASE_URL": openai_peer.url, "MODEL": "doc-model", "TIMEOUT": 5},
    }
    openai_peer.script(llm_error(500, "down"))
    dashboard = world.dashboard("web-traffic", "prod")

    with run_jobs():
        response = dispatch(world.admin, "run_llm_documentation", dashboard=str(dashboard.pk))

    job = job_of(response)
    dashboard.refresh_from_db()
    assert dashboard.documentation.startswith(
        "> **Template summary — the language model failed (InternalServerError).**"
    )
    assert "a template summary (the LLM failed)" in job.result


def test_the_stored_documentation_is_viewable_by_those_who_may_view_the_dashboard(
    world: World, settings: Any, run_jobs: Callable[[], Any]
) -> None:
    settings.ROOT_URLCONF = "config.urls"
    granted = world.dashboard("sales-overview", "prod")
    hidden = world.dashboard("sales-pipeline", "prod")
    with run_jobs():
        for dashboard in (granted, hidden):
            response = dispatch(world.admin, "run_llm_documentation", dashboard=str(dashboard.pk))
    assert job_of(response).result_data["url"] == f"/dashboards/{hidden.pk}/documentation/"
    viewer = Client()
    viewer.force_login(world.viewer)

    page = viewer.get(f"/dashboards/{granted.pk}/documentation/")

    assert page.status_code == 200
    assert page["Content-Type"] == "text/plain; charset=utf-8"
    assert page.content.decode().startswith("> **Template summary")
    assert viewer.get(f"/dashboards/{hidden.pk}/documentation/").status_code == 404


def test_documenting_a_dashboard_the_user_may_not_view_looks_like_a_missing_one(
    world: World, make_user: Any
) -> None:
    writer = make_user("writer", "dashboards.document_dashboard")
    assign_perm("dashboards.view_dashboard", writer, world.dashboard("web-traffic", "dev"))
    writer = world.fresh(writer)
    hidden = world.dashboard("finance-kpis", "dev")
    before = state()

    by_id = dispatch(writer, "run_llm_documentation", dashboard=str(hidden.pk))
    missing = dispatch(writer, "run_llm_documentation", dashboard="999999")

    assert by_id.status_code == missing.status_code == 400
    assert by_id.json()["errors"] == {
        "dashboard": f"no dashboard you may view matches '{hidden.pk}'"
    }
    assert state() == before


def test_documentation_asks_which_dashboard_when_the_name_is_ambiguous(world: World) -> None:
    before = state()

    response = dispatch(world.operator, "run_llm_documentation", dashboard="overview")

    assert response.json()["data"]["ambiguous"] == "dashboard"
    assert len(response.json()["data"]["candidates"]) == 3
    assert state() == before


@pytest.mark.parametrize("who", ["viewer", "outsider"])
def test_documentation_is_refused_to_users_without_the_permission(world: World, who: str) -> None:
    before = state()

    response = dispatch(getattr(world, who), "run_llm_documentation", dashboard="web-traffic")

    assert response.status_code == 403
    assert decisions("run_llm_documentation") == ["denied"]
    assert state() == before


@pytest.mark.parametrize(
    ("entities", "errors"),
    [
        ({"dashboard": "   "}, {"dashboard": "name a dashboard by its id, slug or title"}),
        (
            {"dashboard": "web", "environment": "qa"},
            {"environment": "no environment 'qa'; choose one of dev, staging, prod"},
        ),
        ({"dashboard": 3}, {"dashboard": "expected a string"}),
    ],
    ids=["blank", "unknown-environment", "not-a-string"],
)
def test_documentation_with_bad_entities_changes_nothing(
    world: World, entities: dict[str, Any], errors: dict[str, str]
) -> None:
    before = state()

    response = dispatch(world.operator, "run_llm_documentation", **entities)

    assert response.status_code == 400
    assert response.json()["errors"] == errors
    assert state() == before


# -- get_health_summary ---------------------------------------------------------------------


def test_the_health_summary_covers_every_part(world: World) -> None:
    Job.objects.create(
        operation="run_backup",
        function="x.y",
        status="failed",
        error="Boom\ntrace",
        finished_at=timezone.now(),
    )

    response = dispatch(world.operator, "get_health_summary")

    assert response.status_code == 200
    data = response.json()["data"]
    assert data["database"]["ok"] is True
    assert data["channel_layer"] == {
        "ok": True,
        "backend": "InMemoryChannelLayer",
        "latency_ms": data["channel_layer"]["latency_ms"],
        "detail": "round trip ok",
    }
    assert data["jobs"]["failed_last_24h"] == 1
    assert data["jobs"]["recent_failures"][0]["error"] == "Boom"
    assert [
        (row["environment"], row["dashboards"], row["published"]) for row in data["dashboards"]
    ] == [
        ("dev", 13, 0),
        ("staging", 11, 11),
        ("prod", 7, 7),
    ]
    assert data["status"] == "attention"
    assert data["problems"] == ["1 jobs failed in the last 24 h"]
    lines = response.json()["text"].splitlines()
    assert lines[0] == "Needs attention: 1 jobs failed in the last 24 h."
    assert (
        lines[-1]
        == "Dashboards: dev 13 (0 published), staging 11 (11 published), prod 7 (7 published)"
    )


def test_the_health_summary_shows_the_latest_validation_and_live_workers(
    world: World, run_jobs: Callable[[], Any]
) -> None:
    with run_jobs():
        dispatch(world.operator, "run_llm_validation", target="dashboards.Dashboard")
    Job.objects.create(
        operation="deploy_dashboard",
        function="x.y",
        status="running",
        worker="host:1:MainThread",
        heartbeat_at=timezone.now(),
    )

    data = dispatch(world.operator, "get_health_summary").json()["data"]

    assert data["workers"]["live"] == ["host:1:MainThread"]
    (run,) = data["validation"]
    assert (run["status"], run["failed"]) == ("failed", 11)
    assert "the latest validation run failed" in data["problems"]


@pytest.mark.parametrize("who", ["viewer", "outsider"])
def test_the_health_summary_is_refused_to_users_without_the_permission(
    world: World, who: str
) -> None:
    response = dispatch(getattr(world, who), "get_health_summary")

    assert response.status_code == 403
    assert decisions("get_health_summary") == ["denied"]


def test_the_health_summary_takes_no_entities(world: World) -> None:
    response = dispatch(world.operator, "get_health_summary", verbose=True)

    assert response.status_code == 400
    assert response.json()["errors"] == {"verbose": "unknown entity"}
    assert decisions("get_health_summary") == ["invalid"]


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

    assert response.status_code == 403
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


# -- the websocket --------------------------------------------------------------------------

WAIT = 10  # seconds any one frame may take
ORIGIN = (b"origin", b"http://127.0.0.1")


async def turns_ended() -> None:
    import asyncio

    if RUNNING:
        await asyncio.wait(set(RUNNING), timeout=WAIT)


@pytest.fixture
async def open_socket() -> AsyncIterator[Callable[[Any], Awaitable[WebsocketCommunicator]]]:
    opened: list[WebsocketCommunicator] = []

    async def open_(user: Any) -> WebsocketCommunicator:
        socket = WebsocketCommunicator(application, "/ws/assistant/", headers=[ORIGIN])
        socket.scope["user"] = user
        connected, _ = await socket.connect(timeout=WAIT)
        assert connected
        opened.append(socket)
        return socket

    yield open_
    for socket in opened:
        with contextlib.suppress(Exception):
            await socket.disconnect(timeout=WAIT)
    await turns_ended()


async def receive(socket: WebsocketCommunicator) -> dict[str, Any]:
    """The next frame; every frame is also kept on the socket for ``job_finished``."""
    frame = await socket.receive_json_from(timeout=WAIT)
    socket.__dict__.setdefault("seen", []).append(frame)
    return frame


async def run(socket: WebsocketCommunicator, **frame: Any) -> list[dict[str, Any]]:
    """Send a frame; the frames of the run it starts, up to RUN_FINISHED or RUN_ERROR."""
    await socket.send_json_to(frame)
    frames = [await receive(socket)]
    while frames[-1]["type"] not in ("RUN_FINISHED", "RUN_ERROR"):
        frames.append(await receive(socket))
    await turns_ended()
    return frames


def outcomes(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        frame["value"]
        for frame in frames
        if frame["type"] == "CUSTOM" and frame["name"] == "assistant.outcome"
    ]


async def job_finished(socket: WebsocketCommunicator, job_id: str) -> dict[str, Any]:
    """The ``assistant.job`` event that reports this job finished (relayed from the database)."""

    def finished(frame: dict[str, Any]) -> bool:
        return (
            frame["type"] == "CUSTOM"
            and frame["name"] == "assistant.job"
            and frame["value"]["id"] == job_id
            and frame["value"]["status"] in ("succeeded", "failed", "cancelled")
        )

    for frame in socket.__dict__.get("seen", []):
        if finished(frame):
            return frame["value"]
    while True:
        frame = await receive(socket)
        if finished(frame):
            return frame["value"]


ws_db = pytest.mark.django_db(transaction=True)


async def say(socket: WebsocketCommunicator, text: str) -> dict[str, Any]:
    (outcome,) = outcomes(await run(socket, type="message", text=text))
    return outcome


async def approve(socket: WebsocketCommunicator, asked: dict[str, Any]) -> dict[str, Any]:
    assert asked["decision"] == "confirmation_requested", asked
    (outcome,) = outcomes(await run(socket, type="confirm", action=asked["pending_action"]))
    return outcome


# Per tool over the websocket, as the right user: (user, message, answer starts with, approve?).
WEBSOCKET_WORKS = [
    ("viewer", 'search dashboards "overview"', "3 dashboards matching “overview”:", False),
    ("operator", "create branch name=feature-x", "Created branch feature-x from main at ", False),
    ("operator", 'commit "staging"', "Nothing to commit: main already holds Staging's", True),
    ("operator", "deploy dashboard=support-tickets source=dev target=staging", "Deploying #", True),
    (
        "operator",
        "migrate source=dev target=staging dashboards=support-tickets dry_run=true",
        "Dry run — migrating 1 dashboards from Development to Staging",
        True,
    ),
    ("operator", 'back up "staging"', "Backing up Staging's 11 dashboards (task ", False),
    (
        "operator",
        'document dashboard "hiring" environment=dev',
        "Writing the documentation of #",
        False,
    ),
    ("operator", "health summary", "All healthy.", False),
    ("operator", "validate 'dashboards.Dashboard'", "Validation task ", False),
]


@ws_db
@pytest.mark.parametrize(
    ("who", "message", "answer", "needs_approval"),
    WEBSOCKET_WORKS,
    ids=[
        "search_dashboards",
        "create_branch",
        "commit_changes",
        "deploy_dashboard",
        "execute_migration",
        "run_backup",
        "run_llm_documentation",
        "get_health_summary",
        "run_llm_validation",
    ],
)
async def test_each_tool_works_over_the_websocket(
    world: World, open_socket: Any, who: str, message: str, answer: str, needs_approval: bool
) -> None:
    socket = await open_socket(getattr(world, who))

    outcome = await say(socket, message)
    if needs_approval:
        outcome = await approve(socket, outcome)

    assert outcome["decision"] == ("confirmed" if needs_approval else "executed"), outcome
    assert outcome["text"].startswith(answer), outcome["text"]
    if outcome["task_id"]:
        finished = await job_finished(socket, outcome["task_id"])
        assert (finished["status"], finished["progress"]) == ("succeeded", 100), finished


@ws_db
async def test_a_deployment_over_the_websocket_runs_its_job_to_completion(
    world: World, open_socket: Any
) -> None:
    target = await sync_to_async(world.dashboard)("sales-overview", "prod")
    socket = await open_socket(world.admin)

    asked = await say(socket, "deploy dashboard=sales-overview source=staging target=prod")
    assert await sync_to_async(lambda: Dashboard.objects.get(pk=target.pk).version)() == 1
    done = await approve(socket, asked)
    finished = await job_finished(socket, done["task_id"])

    assert finished["result"].startswith("Deployed Sales overview v2 from Staging to Production")
    assert await sync_to_async(lambda: Dashboard.objects.get(pk=target.pk).version)() == 2


@ws_db
async def test_a_rejected_deployment_over_the_websocket_changes_nothing(
    world: World, open_socket: Any
) -> None:
    before = await sync_to_async(state)()
    socket = await open_socket(world.admin)

    asked = await say(socket, "deploy dashboard=web-traffic source=dev target=prod")
    (refused,) = outcomes(await run(socket, type="reject", action=asked["pending_action"]))

    assert refused["decision"] == "cancelled"
    assert await sync_to_async(state)() == before


# The operator is refused by the tool itself (audited "denied"): production is the admin's.
WEBSOCKET_OPERATOR_REFUSED = [
    ("deploy dashboard=web-traffic source=staging target=prod", True),
    ("migrate source=staging target=prod", True),
    ('back up "prod"', False),
]


@ws_db
@pytest.mark.parametrize(("message", "needs_approval"), WEBSOCKET_OPERATOR_REFUSED)
async def test_the_operator_is_refused_production_over_the_websocket(
    world: World, open_socket: Any, message: str, needs_approval: bool
) -> None:
    before = await sync_to_async(state)()
    socket = await open_socket(world.operator)

    outcome = await say(socket, message)
    if needs_approval:
        outcome = await approve(socket, outcome)

    assert (outcome["decision"], outcome["code"]) == ("denied", "permission_denied")
    entry = await AuditEntry.objects.filter(decision="denied").alast()
    assert (entry.operation, entry.source, entry.username) == (
        outcome["operation"],
        "websocket",
        "operator",
    )
    assert await sync_to_async(state)() == before


@pytest.fixture
def use_llm(settings: Any, openai_peer: Any) -> Any:
    settings.ASSISTANT = {
        **django_settings.ASSISTANT,
        "PLANNER": "llm",
        "LLM": {"BASE_URL": openai_peer.url, "MODEL": "test-model", "TIMEOUT": 5},
    }
    return openai_peer


# Tools a user may not see: a model that proposes one anyway is refused by dispatch.
FORBIDDEN_CALLS = [
    ("viewer", "create_branch", {"name": "feature-x"}),
    ("viewer", "commit_changes", {"environment": "dev"}),
    ("viewer", "deploy_dashboard", {"dashboard": "1", "target": "dev"}),
    ("viewer", "execute_migration", {"source": "dev", "target": "staging"}),
    ("viewer", "run_backup", {"environment": "dev"}),
    ("viewer", "run_llm_documentation", {"dashboard": "web-traffic"}),
    ("viewer", "get_health_summary", {}),
    ("outsider", "search_dashboards", {"search": "sales"}),
]


@ws_db
@pytest.mark.parametrize(("who", "operation", "entities"), FORBIDDEN_CALLS)
async def test_a_tool_the_user_may_not_use_is_refused_and_audited_over_the_websocket(
    world: World, open_socket: Any, use_llm: Any, who: str, operation: str, entities: dict[str, Any]
) -> None:
    use_llm.script(llm_tool_calls(llm_call(operation, entities)), llm_text("I cannot do that."))
    before = await sync_to_async(state)()
    socket = await open_socket(getattr(world, who))

    outcome = await say(socket, f"please {operation}")

    assert (outcome["operation"], outcome["decision"]) == (operation, "denied")
    entry = await AuditEntry.objects.aget(operation=operation)
    assert (entry.decision, entry.source, entry.username) == ("denied", "websocket", who)
    assert not await PendingAction.objects.aexists()
    assert await sync_to_async(state)() == before


# Bad entities proposed for each tool: refused with the entity named, nothing changed.
BAD_CALLS = [
    ("search_dashboards", {"environment": "qa"}, "environment"),
    ("create_branch", {"name": "two words"}, "name"),
    ("commit_changes", {"environment": 7}, "environment"),
    ("deploy_dashboard", {"dashboard": "web-traffic"}, "target"),
    ("execute_migration", {"source": "dev", "target": "staging", "dry_run": "maybe"}, "dry_run"),
    ("run_backup", {"environment": "qa"}, "environment"),
    ("run_llm_documentation", {"dashboard": "nothing like it"}, "dashboard"),
    ("get_health_summary", {"verbose": True}, "verbose"),
]


@ws_db
@pytest.mark.parametrize(("operation", "entities", "entity"), BAD_CALLS)
async def test_bad_entities_are_refused_over_the_websocket(
    world: World,
    open_socket: Any,
    use_llm: Any,
    operation: str,
    entities: dict[str, Any],
    entity: str,
) -> None:
    use_llm.script(llm_tool_calls(llm_call(operation, entities)), llm_text("Sorry."))
    before = await sync_to_async(state)()
    socket = await open_socket(world.admin)

    outcome = await say(socket, f"please {operation}")

    assert (outcome["decision"], outcome["code"]) == ("invalid", "invalid_entities"), outcome
    assert entity in outcome["text"]
    assert await AuditEntry.objects.filter(operation=operation, decision="invalid").aexists()
    assert await sync_to_async(state)() == before


@ws_db
async def test_an_ambiguous_reference_over_the_websocket_lists_the_candidates(
    world: World, open_socket: Any
) -> None:
    socket = await open_socket(world.operator)

    outcome = await say(socket, 'document dashboard "sales"')

    assert outcome["decision"] == "executed"
    assert outcome["task_id"] is None
    assert outcome["text"].startswith(
        "“sales” matches several dashboards you may view — which one?"
    )
