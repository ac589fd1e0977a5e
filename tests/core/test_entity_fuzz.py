"""Property: whatever entities arrive, a call is accepted and audited, or refused and audited.

Every registered tool's entities are fuzzed through ``dispatch`` (the example project's tools are
fuzzed by its own suite). Handlers are swapped for a recorder so no input does real damage; a
few harmless tools also run their real handlers, which must never fail on accepted input.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from assistant.core.registry import registry
from tests.entity_fuzzing import EXAMPLES, fuzz_real_handler, fuzz_recorded

TOOLS = {f"{site.name}:{tool.operation}": (tool, site) for site in (registry,) for tool in site}
# Real handlers that only read: they run as well, and must refuse bad input as invalid_entities.
HARMLESS = [
    "default:echo_types",
    "default:list_orders",
    "default:show_report",
    "default:ping",
]

# fuzzing: run on the newest Python and Django (the code fuzzed is the same on each)
pytestmark = pytest.mark.slow


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
    superuser: Any, operation: str
) -> None:
    tool, site = TOOLS[operation]
    fuzz_real_handler(tool, site, superuser)
