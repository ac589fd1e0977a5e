"""The example project's handlers on input that cannot be stored or is out of range: refused as
invalid entities, audited, and nothing changed."""

from __future__ import annotations

from typing import Any

import pytest

from assistant.dispatch.door import dispatch
from assistant.models import AuditEntry
from dashboards import repository
from tests.clients import post_raw
from tests.example.dashboards_world import World
from tests.example.demo_site import DEMO


@pytest.mark.django_db
def test_a_branch_name_with_a_lone_surrogate_creates_no_branch(world: World) -> None:
    before = repository.branches()

    response = post_raw(
        world.operator, "dispatch", {"operation": "create_branch", "entities": {"name": "x\udc80"}}
    )

    assert response.status_code == 400
    assert response.json()["errors"] == {
        "name": "contains a NUL character or an unpaired surrogate"
    }
    assert repository.branches() == before
    assert list(AuditEntry.objects.values_list("decision", flat=True)) == ["invalid"]


# -- the example project's handlers declare real limits -------------------------------------

OUT_OF_RANGE = {
    "report-pause-for-ever": ("user_report", {"pause": 1e9}, {"pause": "must be at most 5"}),
    "users-page-beyond-64-bits": (
        "list_users",
        {"page": 2**63},
        {"page": "must fit in 64 bits (between -2**63 and 2**63-1)"},
    ),
    "users-page-size": ("list_users", {"page_size": 1000}, {"page_size": "must be at most 100"}),
    "users-search-too-long": (
        "list_users",
        {"search": "x" * 255},
        {"search": "must be at most 254 characters long"},
    ),
    "deactivate-user-zero": ("deactivate_user", {"user_id": 0}, {"user_id": "must be at least 1"}),
}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("operation", "entities", "errors"), OUT_OF_RANGE.values(), ids=OUT_OF_RANGE
)
def test_the_demos_tools_refuse_out_of_range_input_as_invalid_entities(
    superuser: Any, operation: str, entities: dict[str, Any], errors: dict[str, str]
) -> None:
    outcome = dispatch(operation, entities, user=superuser, site=DEMO)

    assert (outcome.decision, outcome.code, outcome.error.errors) == (  # type: ignore[union-attr]
        "invalid",
        "invalid_entities",
        errors,
    )
    assert list(AuditEntry.objects.values_list("decision", flat=True)) == ["invalid"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("operation", "entities", "errors"),
    [
        ("create_branch", {"name": "b" * 201}, {"name": "must be at most 200 characters long"}),
        ("create_branch", {"name": ""}, {"name": "must be at least 1 characters long"}),
        (
            "run_backup",
            {"environment": "e" * 101},
            {"environment": "must be at most 100 characters long"},
        ),
        (
            "execute_migration",
            {"source": "dev", "target": "prod", "dashboards": ["d" * 201]},
            {"dashboards": "must be at most 200 characters long"},
        ),
    ],
)
def test_the_dashboard_tools_refuse_over_long_names_as_invalid_entities(
    world: World, operation: str, entities: dict[str, Any], errors: dict[str, str]
) -> None:
    response = post_raw(world.admin, "dispatch", {"operation": operation, "entities": entities})

    assert response.status_code == 400
    assert (response.json()["code"], response.json()["errors"]) == ("invalid_entities", errors)


@pytest.mark.django_db
@pytest.mark.parametrize("search", ["²", "#\u0661", "9" * 40])
def test_a_search_for_digits_that_are_no_id_finds_nothing_instead_of_failing(
    world: World, search: str
) -> None:
    response = post_raw(
        world.admin, "dispatch", {"operation": "search_dashboards", "entities": {"search": search}}
    )

    assert (response.status_code, response.json()["decision"]) == (200, "executed")
    assert response.json()["data"]["count"] == 0
