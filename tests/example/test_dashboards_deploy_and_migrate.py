"""deploy_dashboard and execute_migration over REST: the confirmation path, the jobs they start
and their progress, the right and the wrong users, ambiguous references and bad entities."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from guardian.shortcuts import assign_perm

from assistant.models import PendingAction
from dashboards.models import Dashboard
from tests.audit_trail import decisions
from tests.example.dashboard_calls import (
    REFUSED,
    assert_progressed,
    confirm,
    dispatch,
    job_of,
    reject,
    state,
)
from tests.example.dashboards_world import World

pytestmark = pytest.mark.django_db


# -- deploy_dashboard -----------------------------------------------------------------------


def test_deploy_waits_for_approval_then_copies_the_dashboard_with_progress(
    world: World, progress: list[Any], run_jobs: Callable[[], Any]
) -> None:
    source = world.dashboard("sales-overview", "staging")
    target = world.dashboard("sales-overview", "prod")
    before = state()

    asked = dispatch(world.admin, "deploy_dashboard", dashboard=str(source.pk), target="prod")

    assert asked.status_code == 202
    action = asked.json()["pending_action"]
    assert action["summary"] == "Deploy Sales overview v2 from Staging to Production, replacing v1"
    assert PendingAction.objects.get().preview == {
        "kind": "changes",
        "rows": [
            {"field": "version", "before": 1, "after": 2},
            {"field": "database", "before": "prod_warehouse", "after": "prod_warehouse"},
            {"field": "charts", "before": len(target.charts), "after": len(source.charts)},
        ],
    }
    assert PendingAction.objects.get().confirm_phrase == "Sales overview"
    # bound to what prepare resolved: the dashboard's id, both environments' slugs
    assert action["entities"] == {
        "dashboard": str(source.pk),
        "target": "prod",
        "source": "staging",
    }
    assert state() == before

    with run_jobs():
        response = confirm(world.admin, asked)

    assert response.status_code == 200
    assert response.json()["decision"] == "confirmed"
    job = job_of(response)
    assert response.json()["text"] == (
        f"Deploying #{source.pk} Sales overview v2 from Staging to Production."
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


def test_the_operator_is_refused_a_production_deploy_before_anyone_is_asked(world: World) -> None:
    before = state()

    response = dispatch(
        world.operator, "deploy_dashboard", dashboard="web-traffic", source="staging", target="prod"
    )

    assert response.status_code == 403
    assert response.json()["code"] == "permission_denied"
    assert response.json()["detail"] == "You may not change the Production environment."
    assert response.json()["text"] == "You may not change the Production environment."
    assert decisions("deploy_dashboard") == ["denied"]
    assert not PendingAction.objects.exists()
    assert state() == before


@pytest.mark.parametrize("who", ["viewer", "outsider"])
def test_deploy_is_refused_to_users_without_the_permission(world: World, who: str) -> None:
    before = state()

    response = dispatch(getattr(world, who), "deploy_dashboard", dashboard="1", target="dev")

    assert response.status_code == REFUSED[who]
    assert decisions("deploy_dashboard") == ["denied"]
    assert not PendingAction.objects.exists()
    assert state() == before


def test_an_ambiguous_dashboard_is_asked_about_before_approval_is(world: World) -> None:
    before = state()

    response = dispatch(world.admin, "deploy_dashboard", dashboard="sales", target="prod")

    assert response.status_code == 200
    body = response.json()
    assert body["decision"] == "clarify"
    assert (body["task_id"], body["pending_action"]) == (None, None)
    lines = body["text"].splitlines()
    assert lines[0] == "“sales” matches several dashboards you may view — which one?"
    assert len(lines) == 1 + 6 + 1
    assert lines[-1].startswith("Ask again with its id, e.g. dashboard=")
    assert {(c["slug"], c["environment"]) for c in body["data"]["candidates"]} == {
        (slug, env)
        for slug in ("sales-overview", "sales-pipeline")
        for env in ("dev", "staging", "prod")
    }
    assert decisions("deploy_dashboard") == ["clarify"]
    assert not PendingAction.objects.exists()
    assert state() == before


def test_the_candidates_are_only_dashboards_the_user_may_view(world: World, make_user: Any) -> None:
    deployer = make_user("deployer", "dashboards.deploy_dashboard")
    for env in ("dev", "staging"):
        assign_perm("dashboards.view_dashboard", deployer, world.dashboard("sales-overview", env))
    assign_perm("dashboards.change_environment", deployer, world.env("prod"))
    deployer = world.fresh(deployer)

    response = dispatch(deployer, "deploy_dashboard", dashboard="sales", target="prod")

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
def test_deploy_with_bad_entities_is_refused_before_asking(
    world: World, entities: dict[str, Any], errors: dict[str, str]
) -> None:
    before = state()
    errors = {
        name: message.replace("{id}", str(world.dashboard("web-traffic", "prod").pk))
        for name, message in errors.items()
    }

    response = dispatch(world.admin, "deploy_dashboard", **entities)

    assert response.status_code == 400
    assert response.json()["errors"] == errors
    assert decisions("deploy_dashboard") == ["invalid"]
    assert not PendingAction.objects.exists()
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

    response = dispatch(
        world.operator, "execute_migration", source=source, target=target, dry_run=True
    )

    assert response.status_code == 403
    assert response.json()["detail"] == "You may not change the Production environment."
    assert decisions("execute_migration") == ["denied"]
    assert not PendingAction.objects.exists()
    assert state() == before


@pytest.mark.parametrize("who", ["viewer", "outsider"])
def test_migration_is_refused_to_users_without_the_permission(world: World, who: str) -> None:
    response = dispatch(getattr(world, who), "execute_migration", source="dev", target="staging")

    assert response.status_code == REFUSED[who]
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
def test_migration_with_bad_entities_is_refused_before_asking(
    world: World, entities: dict[str, Any], errors: dict[str, str]
) -> None:
    before = state()

    response = dispatch(world.operator, "execute_migration", **entities)

    assert response.status_code == 400
    assert response.json()["errors"] == errors
    assert decisions("execute_migration") == ["invalid"]
    assert not PendingAction.objects.exists()
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
