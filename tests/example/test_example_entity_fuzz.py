"""Property: whatever entities arrive, a call to one of the example project's tools is accepted
and audited, or refused and audited.

The tools are the dashboards domain's (installed by these settings) and demo's (imported into a
registry of their own). Handlers are swapped for a recorder so no input does real damage; a few
harmless tools also run their real handlers, which must never fail on accepted input.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from assistant.core.registry import registry
from tests.entity_fuzzing import EXAMPLES, fuzz_real_handler, fuzz_recorded
from tests.example.dashboards_world import World
from tests.example.demo_site import DEMO

# Both registries declare list_tables & co. (a SQL inspector each): key by registry too.
TOOLS = {
    f"{site.name}:{tool.operation}": (tool, site)
    for site in (registry, DEMO)
    for tool in site
    if site is DEMO or tool.module.startswith("dashboards.")
}
# Real handlers that only read: they run as well, and must refuse bad input as invalid_entities.
HARMLESS = [
    "default:search_dashboards",
    "demo:list_users",
    "demo:whoami",
]


@pytest.mark.django_db
@pytest.mark.parametrize("operation", sorted(TOOLS))
def test_every_tools_entities_are_accepted_and_audited_or_refused_and_audited(
    superuser: Any, operation: str
) -> None:
    if connection.vendor == "postgresql":
        pytest.skip("the postgres-marked twin below runs it on PostgreSQL")
    assert fuzz_recorded(TOOLS[operation][0], superuser) == EXAMPLES


@pytest.mark.postgres
@pytest.mark.django_db
@pytest.mark.parametrize("operation", sorted(TOOLS))
def test_every_tools_entities_are_audited_on_postgresql(superuser: Any, operation: str) -> None:
    assert fuzz_recorded(TOOLS[operation][0], superuser) == EXAMPLES


@pytest.mark.django_db
@pytest.mark.parametrize("operation", HARMLESS)
def test_harmless_real_handlers_refuse_bad_input_as_invalid_entities_never_fail(
    world: World, operation: str
) -> None:
    tool, site = TOOLS[operation]
    fuzz_real_handler(tool, site, world.admin)
