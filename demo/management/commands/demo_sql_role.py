"""Create (or refresh) the PostgreSQL role the demo's SQL inspector reads as; SQLite needs none."""

from __future__ import annotations

import os
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db import connections

from assistant.toolsets.sql import SQLInspector

ROLE = os.environ.get("DEMO_SQL_ROLE", "assistant_reader")
HIDDEN_TABLES = SQLInspector.hidden_tables  # not even listed, so not readable either
SECRET_COLUMNS = {"auth_user": frozenset({"password"})}


def grant_reader(
    connection: Any,
    role: str,
    *,
    hidden_tables: frozenset[str] = HIDDEN_TABLES,
    secret_columns: dict[str, frozenset[str]] = SECRET_COLUMNS,
    password: str | None = None,
) -> list[str]:
    """Make ``role`` a login role that may SELECT the database's tables, nothing else; the tables."""
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role])
        if cursor.fetchone() is None:
            cursor.execute(f"CREATE ROLE {quote(role)} LOGIN")
        if password:
            cursor.execute(f"ALTER ROLE {quote(role)} PASSWORD %s", [password])
        cursor.execute("SELECT current_database(), current_schema()")
        database, schema = cursor.fetchone()
        cursor.execute(f"GRANT CONNECT ON DATABASE {quote(database)} TO {quote(role)}")
        cursor.execute(f"GRANT USAGE ON SCHEMA {quote(schema)} TO {quote(role)}")
        # Start from nothing, so a table hidden since the last run is no longer readable.
        cursor.execute(f"REVOKE ALL ON ALL TABLES IN SCHEMA {quote(schema)} FROM {quote(role)}")
        tables = sorted(set(connection.introspection.table_names(cursor)) - hidden_tables)
        for table in tables:
            secret = secret_columns.get(table, frozenset())
            columns = [
                column.name
                for column in connection.introspection.get_table_description(cursor, table)
                if column.name not in secret
            ]
            listed = f"({', '.join(quote(column) for column in columns)}) " if secret else ""
            cursor.execute(f"GRANT SELECT {listed}ON {quote(table)} TO {quote(role)}")
    return tables


class Command(BaseCommand):
    help = (
        "PostgreSQL: create the login role the SQL inspector connects as, allowed to SELECT every "
        "table but the hidden ones (and no password hashes). Run it again after migrations."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--database", default="default", help="The DATABASES alias.")
        parser.add_argument("--role", default=ROLE, help=f"The role's name (default {ROLE}).")
        parser.add_argument(
            "--password",
            help="Set the role's password (else it logs in without one: trust, peer or .pgpass).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        connection = connections[options["database"]]
        if connection.vendor != "postgresql":
            self.stdout.write(
                "The SQL inspector opens this database's file read-only: no role to create."
            )
            return
        tables = grant_reader(connection, options["role"], password=options["password"])
        self.stdout.write(
            f"SQL inspector role {options['role']!r}: may read {len(tables)} tables "
            f"(not {', '.join(sorted(HIDDEN_TABLES))}, nor password hashes)."
        )
