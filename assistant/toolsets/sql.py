"""``SQLInspector``: a read-only look into a database — its tables, their columns, bounded SELECTs.

The seed's Postgres example as a toolset: it connects on start (a Django ``DATABASES`` alias or a
DSN), introspects the schema when a tool first needs it, runs every query in a read-only
transaction with a statement timeout and a row cap, cancels the query on the server when the run
is stopped, and closes its connection on stop; a query whose connection the server dropped runs
once more on a new one. Its ``scope`` is ``"call"``: each call connects and closes, so open chats
hold no connection between calls; ``"session"`` (one connection per open chat) or ``"process"``
(one per server process, queries take turns) keep one open instead. Register it (or a subclass
naming another database) to enable it:

    @register_toolset
    class ReportingDatabase(SQLInspector):
        database = "reporting"
        role = "reporting_reader"

Connect it as a database role that may read only what its users may see: a read-only
transaction stops writes, not reads, and on PostgreSQL it refuses to start as a role that is
(or may become) a superuser or a member of ``SERVER_ROLES`` (``COPY ... TO PROGRAM``,
``pg_read_file``).
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar, Protocol

from django.utils.translation import gettext, ngettext

from ..core.cancellation import CancellationToken
from ..core.lifecycle import Toolset
from ..core.registry import ToolCall, ToolResult, assistant_tool
from ..exceptions import ToolTimeout, UnsafeDatabaseRole

SUMMARY_ROWS = 10  # rows the model sees; the UI gets every row up to the cap


class QueryError(Exception):
    """The database refused or stopped the query."""


class QueryTimedOut(QueryError):
    """The query ran past the statement timeout and the database stopped it."""


class _Backend(Protocol):
    async def connect(self) -> None: ...
    async def tables(self) -> dict[str, list[tuple[str, str, bool]]]: ...
    async def query(self, sql: str, limit: int, seconds: float) -> tuple[list[str], list[Any]]: ...
    async def cancel(self) -> None: ...
    async def close(self) -> None: ...


# Roles that turn SQL into a shell or a file reader on the database server.
SERVER_ROLES = ("pg_execute_server_program", "pg_read_server_files", "pg_write_server_files")
ROLE_QUERY = (
    "SELECT current_user, "
    "EXISTS (SELECT 1 FROM pg_roles WHERE rolsuper AND pg_has_role(current_user, oid, 'MEMBER')), "
    "ARRAY(SELECT rolname FROM pg_roles WHERE rolname = ANY(%s) "
    "AND pg_has_role(current_user, oid, 'MEMBER') ORDER BY rolname)"
)


def _unfit(row: tuple[str, bool, list[str]]) -> str | None:
    """What makes a role (a ``ROLE_QUERY`` row) unfit for the inspector, or None."""
    user, superuser, members = row
    if superuser:
        return f"database role {user!r} is (or may become) a superuser"
    if members:
        return f"database role {user!r} is a member of {', '.join(members)}"
    return None


def unsafe_role(problem: str) -> UnsafeDatabaseRole:
    return UnsafeDatabaseRole(
        f"{problem}: its queries could run programs or read files on the database server. "
        "Connect the SQL inspector as a read-only role (set `role`; see the SQL inspector in docs/howto/toolsets.md)."
    )


class _Postgres:
    def __init__(self, conninfo: str, params: dict[str, Any]) -> None:
        self.conninfo = conninfo
        self.params = params
        self.connection: Any = None
        self.lock = asyncio.Lock()

    async def connect(self) -> None:
        import psycopg

        self.connection = await psycopg.AsyncConnection.connect(self.conninfo, **self.params)
        try:
            async with self.connection.cursor() as cursor:
                await cursor.execute(ROLE_QUERY, [list(SERVER_ROLES)])
                problem = _unfit(await cursor.fetchone())
            if problem is not None:
                raise unsafe_role(problem)
            await self.connection.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
            await self.connection.commit()
        except BaseException:  # (a call stopped while it connects leaves no connection behind)
            with contextlib.suppress(Exception):
                await self.connection.close()
            raise

    async def tables(self) -> dict[str, list[tuple[str, str, bool]]]:
        async with self.lock, self.connection.cursor() as cursor:
            await cursor.execute(
                "SELECT table_name, column_name, data_type, is_nullable = 'YES' "
                "FROM information_schema.columns WHERE table_schema = current_schema() "
                "ORDER BY table_name, ordinal_position"
            )
            rows = await cursor.fetchall()
            await self.connection.rollback()
        schema: dict[str, list[tuple[str, str, bool]]] = {}
        for table, column, kind, nullable in rows:
            schema.setdefault(table, []).append((column, kind, nullable))
        return schema

    def _lost(self) -> bool:
        return self.connection is None or self.connection.closed or self.connection.broken

    async def _reconnect(self) -> None:
        """A new connection after the server dropped the old one (a restart, a terminate)."""
        import psycopg

        if self.connection is not None:
            with contextlib.suppress(Exception):
                await self.connection.close()
        try:
            await self.connect()
        except psycopg.Error as exc:
            raise QueryError(str(exc).strip().splitlines()[0]) from exc

    async def query(self, sql: str, limit: int, seconds: float) -> tuple[list[str], list[Any]]:
        async with self.lock:
            if self._lost():
                await self._reconnect()
            try:
                return await self._query(sql, limit, seconds)
            except QueryError:
                if not self._lost():
                    raise
            # The connection went under the query: run it once more on a new one (it only reads).
            await self._reconnect()
            return await self._query(sql, limit, seconds)

    async def _query(self, sql: str, limit: int, seconds: float) -> tuple[list[str], list[Any]]:
        import psycopg

        deadline = time.monotonic() + seconds
        try:
            async with self.connection.cursor() as cursor:
                await cursor.execute(f"SET LOCAL statement_timeout = {int(seconds * 1000)}")
                # Prepared: one statement only, so no COMMIT; SET ... READ WRITE; can follow.
                await cursor.execute(sql, prepare=True)
                columns = [column.name for column in cursor.description or []]
                rows = await cursor.fetchmany(limit + 1) if cursor.description else []
        except asyncio.CancelledError:
            await self.cancel()
            await self._reset()
            raise
        except psycopg.Error as exc:
            await self._reset()
            problem = str(exc).strip().splitlines()[0]
            # (a query the user's stop cancelled is cancelled too, but before its deadline)
            if isinstance(exc, psycopg.errors.QueryCanceled) and time.monotonic() >= deadline:
                raise QueryTimedOut(problem) from exc
            raise QueryError(problem) from exc
        await self.connection.rollback()
        return columns, rows

    async def _reset(self) -> None:
        with contextlib.suppress(Exception):
            await self.connection.rollback()

    async def cancel(self) -> None:
        if not self._lost():
            with contextlib.suppress(Exception):
                await self.connection.cancel_safe()

    async def close(self) -> None:
        if self.connection is not None:
            async with self.lock:  # a cancelled query lets go of it promptly
                await self.connection.close()


class _SQLite:
    def __init__(self, path: str) -> None:
        self.path = path
        self.connection: sqlite3.Connection | None = None
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sql-inspector")
        self.hidden: frozenset[str] = frozenset()  # tables user queries may not read either

    async def _run(self, function: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.executor, function, *args)

    def _connect(self) -> None:
        if self.path.startswith("file:"):
            self.connection = sqlite3.connect(self.path, uri=True, check_same_thread=False)
        else:
            self.connection = sqlite3.connect(
                f"file:{self.path}?mode=ro", uri=True, check_same_thread=False
            )
        self.connection.execute("PRAGMA query_only = ON")

    async def connect(self) -> None:
        await self._run(self._connect)

    def _tables(self) -> dict[str, list[tuple[str, str, bool]]]:
        assert self.connection is not None
        names = [
            row[0]
            for row in self.connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' "
                "AND name NOT LIKE 'sqlite_%' ORDER BY name"
            )
        ]
        return {
            name: [
                (column, kind, not notnull)
                for _, column, kind, notnull, _, _ in self.connection.execute(
                    f'PRAGMA table_info("{name}")'
                )
            ]
            for name in names
        }

    async def tables(self) -> dict[str, list[tuple[str, str, bool]]]:
        return await self._run(self._tables)

    def _query(self, sql: str, limit: int, timeout: float) -> tuple[list[str], list[Any]]:
        assert self.connection is not None
        deadline = time.monotonic() + timeout
        self.connection.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
        hidden = self.hidden
        self.connection.set_authorizer(
            lambda action, *args: _read_only(action, *args, hidden=hidden)
        )
        try:
            cursor = self.connection.execute(sql)
            columns = [column[0] for column in cursor.description or []]
            rows = cursor.fetchmany(limit + 1) if cursor.description else []
        except sqlite3.Error as exc:
            if "not authorized" in str(exc):
                raise QueryError("read-only: only reading queries may run") from exc
            if "interrupted" in str(exc) and time.monotonic() > deadline:
                raise QueryTimedOut(str(exc)) from exc
            raise QueryError(str(exc)) from exc
        finally:
            self.connection.set_progress_handler(None, 0)
            self.connection.set_authorizer(None)
        return columns, rows

    async def query(self, sql: str, limit: int, seconds: float) -> tuple[list[str], list[Any]]:
        try:
            return await self._run(self._query, sql, limit, seconds)
        except asyncio.CancelledError:
            await self.cancel()
            raise

    async def cancel(self) -> None:
        if self.connection is not None:
            self.connection.interrupt()

    async def close(self) -> None:
        if self.connection is not None:
            await self._run(self.connection.close)
        self.executor.shutdown(wait=False)


_READ_ACTIONS = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION}
_READ_ACTIONS.add(getattr(sqlite3, "SQLITE_RECURSIVE", 33))


def _read_only(action: int, *args: Any, hidden: frozenset[str] = frozenset()) -> int:
    """SQLite authorizer for user queries: reading only (a PRAGMA may be read, never set), and
    never a hidden table (SQLite has no roles: listing a table is not the only way to it)."""
    if action == sqlite3.SQLITE_READ and args[0] in hidden:
        return sqlite3.SQLITE_DENY
    if action in _READ_ACTIONS:
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_PRAGMA and args[1] is None:
        return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


def _postgres_args(database: str, role: str) -> tuple[str, dict[str, Any]] | None:
    """psycopg's ``(conninfo, keywords)`` for a PostgreSQL alias or DSN (None: it is SQLite)."""
    if "://" in database or "=" in database:
        if database.startswith(("sqlite://", "file:")):
            return None
        return database, {"user": role} if role else {}
    from django.db import connections

    connection = connections[database]
    if connection.vendor == "sqlite":
        return None
    if connection.vendor != "postgresql":
        raise ValueError(f"SQLInspector supports PostgreSQL and SQLite, not {connection.vendor}")
    settings = connection.settings_dict
    params = {
        "dbname": settings["NAME"],
        "user": role or settings.get("USER") or None,
        # another role's password is its own (libpq's PGPASSFILE / ~/.pgpass), not the alias's
        "password": None if role else settings.get("PASSWORD") or None,
        "host": settings.get("HOST") or None,
        "port": settings.get("PORT") or None,
    }
    return "", {key: value for key, value in params.items() if value}


def _backend(database: str, role: str = "") -> _Backend:
    """A connection of its own to a Django database alias or a DSN, as ``role`` if given."""
    postgres = _postgres_args(database, role)
    if postgres is not None:
        return _Postgres(*postgres)
    if "://" in database or "=" in database:
        return _SQLite(database.removeprefix("sqlite://"))
    from django.db import connections

    name = str(connections[database].settings_dict["NAME"])
    return _SQLite(name if name != ":memory:" else "file::memory:?cache=shared")


def _table_text(rows: list[list[Any]], columns: list[str]) -> str:
    lines = [" | ".join(columns)]
    lines += [" | ".join("NULL" if value is None else str(value) for value in row) for row in rows]
    return "\n".join(lines)


class SQLInspector(Toolset):
    """Read-only access to one database: list tables, describe one, run a bounded SELECT."""

    name = "sql_inspector"
    scope = "call"  # a connection for each call; "session"/"process": one held that long
    database: ClassVar[str] = "default"  # a DATABASES alias, or a DSN
    role: ClassVar[str] = ""  # PostgreSQL: connect as this role instead of the alias's USER
    row_limit: ClassVar[int] = 200
    statement_timeout: ClassVar[float] = 5.0
    hidden_tables: ClassVar[frozenset[str]] = frozenset({"django_session", "authtoken_token"})

    def __init__(self) -> None:
        super().__init__()
        self.backend: _Backend | None = None
        self.schema: dict[str, list[tuple[str, str, bool]]] | None = None  # read on first need

    @classmethod
    def role_problem(cls) -> str | None:
        """Why the role it connects as is unsafe (superuser, server file or program access)."""
        import psycopg

        postgres = _postgres_args(cls.database, cls.role)
        if postgres is None:
            return None  # SQLite: the file is opened read-only, there is no role
        conninfo, params = postgres
        try:
            with psycopg.connect(conninfo, **params) as connection:
                row = connection.execute(ROLE_QUERY, [list(SERVER_ROLES)]).fetchone()
        except psycopg.Error as exc:
            raise QueryError(str(exc).strip().splitlines()[0]) from exc
        assert row is not None
        return _unfit(row)

    async def on_start(self, cancel: CancellationToken) -> None:
        self.backend = _backend(self.database, self.role)
        if isinstance(self.backend, _SQLite):
            self.backend.hidden = self.hidden_tables
        await self.backend.connect()

    async def tables(self) -> dict[str, list[tuple[str, str, bool]]]:
        """The schema's tables and their columns (hidden ones left out), read once per instance."""
        if self.schema is None:
            assert self.backend is not None
            schema = await self.backend.tables()
            self.schema = {
                name: columns for name, columns in schema.items() if name not in self.hidden_tables
            }
        return self.schema

    async def on_stop(self) -> None:
        if self.backend is not None:
            await self.backend.close()
            self.backend = None

    async def on_cancel(self) -> None:
        if self.backend is not None:
            await self.backend.cancel()
        await self.on_stop()

    @assistant_tool(
        operation="list_tables",
        domain="database",
        description="List the tables of the database, optionally those whose name contains a word",
        risk_level="safe",
        permission_checks=[("database", "READ")],
        keywords=["list tables", "tables"],
    )
    async def list_tables(self, call: ToolCall, search: str | None = None) -> ToolResult:
        schema = await self.tables()
        names = sorted(name for name in schema if not search or search.lower() in name.lower())
        if not names:
            return ToolResult(text=gettext("No tables match."), data=[])
        listed = ", ".join(names)
        text = ngettext("%(count)s table: %(names)s", "%(count)s tables: %(names)s", len(names))
        return ToolResult(text=text % {"count": len(names), "names": listed}, data=names)

    @assistant_tool(
        operation="describe_table",
        domain="database",
        description="Show a table's columns with their types and whether they may be empty",
        risk_level="safe",
        permission_checks=[("database", "READ")],
        keywords=["describe table"],
    )
    async def describe_table(self, call: ToolCall, table: str) -> ToolResult:
        columns = (await self.tables()).get(table)
        if columns is None:
            return ToolResult(
                text=gettext("There is no table named %(table)s.") % {"table": repr(table)}
            )
        rows = [
            {"column": name, "type": kind, "nullable": nullable} for name, kind, nullable in columns
        ]
        lines = [
            f"{name} {kind}{'' if nullable else ' NOT NULL'}" for name, kind, nullable in columns
        ]
        return ToolResult(text=f"{table}:\n" + "\n".join(lines), data=rows)

    @assistant_tool(
        operation="run_readonly_query",
        domain="database",
        description=(
            "Run one read-only SQL query (SELECT) and return its rows, capped; "
            "writes are refused by the database"
        ),
        risk_level="guarded",
        requires_confirmation=True,  # raw SQL: the user sees the query before it runs
        permission_checks=[("database", "QUERY")],
        keywords=["run query", "select from", "sql query"],
    )
    async def run_readonly_query(self, call: ToolCall, sql: str, limit: int = 50) -> ToolResult:
        assert self.backend is not None
        limit = max(1, min(limit, self.row_limit))
        try:
            columns, fetched = await self.backend.query(sql, limit, self.statement_timeout)
        except QueryTimedOut as exc:
            raise ToolTimeout(
                gettext("The query took longer than %(seconds)s s and was stopped (%(error)s).")
                % {"seconds": f"{self.statement_timeout:g}", "error": exc}
            ) from exc
        except QueryError as exc:
            return ToolResult(
                text=gettext("The database refused the query: %(error)s") % {"error": exc}
            )
        truncated = len(fetched) > limit
        rows = [list(row) for row in fetched[:limit]]
        shown = rows[:SUMMARY_ROWS]
        count = f"{len(rows)}{'+' if truncated else ''}"
        summary = ngettext("%(count)s row", "%(count)s rows", len(rows)) % {"count": count}
        if len(rows) > len(shown):
            summary += gettext(" (first %(shown)s shown)") % {"shown": len(shown)}
        return ToolResult(
            text=f"{summary}:\n{_table_text(shown, columns)}"
            if columns
            else gettext("The query ran."),
            data={"columns": columns, "rows": rows, "truncated": truncated},
        )
