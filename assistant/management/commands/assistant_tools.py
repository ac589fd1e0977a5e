"""``manage.py assistant_tools [--json] [--as USERNAME]``: the tool inventory, and who sees what."""

from __future__ import annotations

import json
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...core.registry import registry
from ...dispatch.catalog import hidden_reasons, inventory_row


class Command(BaseCommand):
    help = (
        "List every registered assistant tool; with --as, which of them a user may use and why not."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--json", action="store_true", dest="as_json", help="print JSON instead of a table"
        )
        parser.add_argument(
            "--as", dest="username", metavar="USERNAME", help="explain visibility for this user"
        )

    def handle(
        self, *args: Any, as_json: bool = False, username: str | None = None, **options: Any
    ) -> None:
        tools = sorted(registry, key=lambda tool: (tool.domain, tool.operation))
        rows = [inventory_row(tool) for tool in tools]
        if username is not None:
            user = (
                get_user_model()
                ._default_manager.filter(**{get_user_model().USERNAME_FIELD: username})
                .first()
            )
            if user is None:
                raise CommandError(f"No user named {username!r}.")
            reasons = hidden_reasons(user, tools)
            for row in rows:
                row["visible"] = not reasons[row["operation"]]
                row["hidden_because"] = list(reasons[row["operation"]])
        if as_json:
            self.stdout.write(json.dumps(rows, indent=2))
            return
        self._table(rows, username)

    def _table(self, rows: list[dict[str, Any]], username: str | None) -> None:
        columns = [
            "operation",
            "domain",
            "risk_level",
            "confirm",
            "permissions",
            "toolset",
            "module",
        ]
        if username is not None:
            columns.append(f"visible to {username}")
        lines = []
        for row in rows:
            line = [
                row["operation"],
                row["domain"],
                row["risk_level"],
                "yes" if row["requires_confirmation"] else "no",
                _permissions_cell(row),
                f"{row['toolset']} ({tool_scope(row)})" if row["toolset"] else "-",
                row["module"],
            ]
            if username is not None:
                line.append("yes" if row["visible"] else "no — " + "; ".join(row["hidden_because"]))
            lines.append(line)
        widths = [max(len(str(c)) for c in col) for col in zip(columns, *lines, strict=False)]
        self.stdout.write("  ".join(h.ljust(w) for h, w in zip(columns, widths, strict=True)))
        for line in lines:
            self.stdout.write("  ".join(str(c).ljust(w) for c, w in zip(line, widths, strict=True)))
        self.stdout.write(f"\n{len(rows)} tools")


def _permissions_cell(row: dict[str, Any]) -> str:
    if row["public"]:
        return "public"
    prefix = "any of " if row["permission_mode"] == "any" and len(row["permissions"]) > 1 else ""
    return prefix + ", ".join(row["permissions"])


def tool_scope(row: dict[str, Any]) -> str:
    lifecycle = str(row["lifecycle"])
    if lifecycle.startswith("process"):
        return "process"
    return "call" if lifecycle.startswith("per call") else "session"
