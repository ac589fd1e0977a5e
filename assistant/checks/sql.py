"""The SQL inspectors connect as read-only roles (W010, ``check --database``)."""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Warning, register

from ..core.registry import ToolRegistry, registry
from ..toolsets.sql import QueryError, SQLInspector


@register("database")
def check_sql_inspector_roles(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[CheckMessage]:
    """assistant.W010: an SQL inspector connects as an unsafe role (``check --database``)."""
    return sql_role_warnings(registry, databases)


def sql_role_warnings(site: ToolRegistry, databases: Any) -> list[CheckMessage]:
    """Ask the server about the role of each of ``site``'s SQL inspectors on ``databases``."""
    if not databases:
        return []
    warnings: list[CheckMessage] = []
    for toolset in site.toolsets.values():
        if not issubclass(toolset, SQLInspector):
            continue
        is_alias = "://" not in toolset.database and "=" not in toolset.database
        if is_alias and toolset.database not in databases:
            continue
        try:
            problem = toolset.role_problem()
        except QueryError:
            continue  # unreachable or the role not created yet: its start fails and logs why
        if problem is not None:
            warnings.append(
                Warning(
                    f"SQL inspector {toolset.name!r}: {problem}; it refuses to start.",
                    hint="Set its `role` to a read-only role (CREATE ROLE ... LOGIN; GRANT "
                    "SELECT ON ...), see the SQL inspector in docs/howto/toolsets.md.",
                    obj=toolset,
                    id="assistant.W010",
                )
            )
    return warnings
