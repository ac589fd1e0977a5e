"""The SQL inspector toolset against the test database: tables, columns, bounded read-only SELECTs."""

from __future__ import annotations

import asyncio
import io
import logging
import sqlite3
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.core.management import call_command
from django.db import connection

from assistant import CancellationToken, register_toolset
from assistant.checks import sql_role_warnings
from assistant.core.lifecycle import ToolLifecycleState, ToolSession
from assistant.core.registry import ToolRegistry
from assistant.dispatch.calls import DispatchCancelled, Outcome
from assistant.dispatch.confirmation import aconfirm_action
from assistant.dispatch.door import adispatch
from assistant.models import AuditEntry, Message, PendingAction
from assistant.toolsets.sql import SQLInspector, _backend
from assistant.turns.chat import answer_action, decision_turn
from assistant.turns.runs import arun_turn, run_started_turn
from tests.conftest import drop_role
from tests.testapp import assistant_tools as testapp_tools
from tests.testapp.models import Order

# The SQL inspector reads through a connection of its own: rows must be committed to be seen.
pytestmark = pytest.mark.django_db(transaction=True)

WAIT = 5.0  # seconds any single step may take
ORDERS = 25
REFERENCES = [f"ORD-{number:03d}" for number in range(1, ORDERS + 1)]

# A query that runs until something stops it, for each backend.
ENDLESS = {
    "postgresql": "SELECT pg_sleep(10)",
    "sqlite": (
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n"
    ),
}


@pytest.fixture
def orders() -> list[str]:
    Order.objects.bulk_create(Order(reference=reference) for reference in REFERENCES)
    return REFERENCES


@pytest.fixture
def analyst(make_user: Callable[..., Any]) -> Any:
    """May look at the schema and run read-only queries."""
    return make_user("analyst", "assistant.database_read", "assistant.database_query")


@pytest.fixture
def browser(make_user: Callable[..., Any]) -> Any:
    """May look at the schema, not query it."""
    return make_user("browser", "assistant.database_read")


@pytest.fixture
def run(session: ToolSession, analyst: Any) -> Callable[..., Any]:
    """Call an inspector tool as the analyst in the test's session."""

    async def call(operation: str, user: Any = analyst, **entities: Any) -> Outcome:
        return await adispatch(operation, entities, user=user, session=session)

    return call


@pytest.fixture
def query(session: ToolSession, analyst: Any) -> Callable[..., Any]:
    """Ask for a query as the analyst, then confirm it: the outcome of the confirmed run."""

    async def ask_and_confirm(sql: str, **entities: Any) -> Outcome:
        asked = await adispatch(
            "run_readonly_query", {"sql": sql, **entities}, user=analyst, session=session
        )
        assert asked.decision == "confirmation_requested", asked.text
        return await aconfirm_action(asked.pending_action.pk, user=analyst, session=session)

    return ask_and_confirm


def order_count() -> int:
    return Order.objects.count()


# -- list_tables ---------------------------------------------------------------------------------


async def test_list_tables_names_the_databases_tables(run: Callable[..., Any]) -> None:
    outcome = await run("list_tables")

    assert outcome.decision == "executed"
    tables = outcome.result.data
    assert {"testapp_order", "auth_user", "assistant_auditentry"} <= set(tables)
    assert tables == sorted(tables)
    assert outcome.text == f"{len(tables)} tables: " + ", ".join(tables)


async def test_list_tables_hides_the_hidden_tables(run: Callable[..., Any]) -> None:
    outcome = await run("list_tables")

    assert "django_session" not in outcome.result.data
    assert "authtoken_token" not in outcome.result.data
    assert "django_session" not in outcome.text


async def test_list_tables_filters_by_a_word_in_the_name(run: Callable[..., Any]) -> None:
    outcome = await run("list_tables", search="ORDER")

    assert outcome.result.data == ["testapp_order"]
    assert outcome.text == "1 table: testapp_order"


async def test_list_tables_says_when_nothing_matches(run: Callable[..., Any]) -> None:
    outcome = await run("list_tables", search="no_such_word")

    assert outcome.text == "No tables match."
    assert outcome.result.data == []


# -- describe_table ------------------------------------------------------------------------------


async def test_describe_table_lists_columns_and_which_are_required(
    run: Callable[..., Any],
) -> None:
    outcome = await run("describe_table", table="testapp_order")

    assert outcome.decision == "executed"
    columns = {row["column"]: row["nullable"] for row in outcome.result.data}
    assert columns == {
        "id": False,
        "reference": False,
        "owner_id": True,
        "amount": False,
        "status": False,
        "approvals": False,
    }
    lines = outcome.text.splitlines()
    assert lines[0] == "testapp_order:"
    assert [line.split()[0] for line in lines[1:]] == list(columns)
    reference = next(line for line in lines if line.startswith("reference "))
    owner = next(line for line in lines if line.startswith("owner_id "))
    assert reference.endswith(" NOT NULL")
    assert "NOT NULL" not in owner


@pytest.mark.parametrize("table", ["no_such_table", "django_session"])
async def test_describe_table_knows_no_unknown_or_hidden_table(
    run: Callable[..., Any], table: str
) -> None:
    outcome = await run("describe_table", table=table)

    assert outcome.text == f"There is no table named {table!r}."
    assert outcome.result.data is None


# -- run_readonly_query --------------------------------------------------------------------------

BY_REFERENCE = "SELECT reference, status FROM testapp_order ORDER BY reference"


async def test_a_query_returns_its_columns_and_rows(
    query: Callable[..., Any], orders: list[str]
) -> None:
    outcome = await query(BY_REFERENCE)

    assert outcome.decision == "confirmed"
    data = outcome.result.data
    assert data["columns"] == ["reference", "status"]
    assert data["rows"] == [[reference, "open"] for reference in orders]
    assert data["truncated"] is False


async def test_the_model_sees_at_most_ten_rows_while_the_data_has_them_all(
    query: Callable[..., Any], orders: list[str]
) -> None:
    outcome = await query(BY_REFERENCE)

    header, *lines = outcome.text.splitlines()
    assert header == f"{ORDERS} rows (first 10 shown):"
    assert lines == ["reference | status"] + [f"{reference} | open" for reference in orders[:10]]
    assert len(outcome.result.data["rows"]) == ORDERS


async def test_a_short_result_is_shown_whole(query: Callable[..., Any], orders: list[str]) -> None:
    outcome = await query(
        "SELECT reference, owner_id FROM testapp_order ORDER BY reference LIMIT 3",
    )

    assert outcome.text.splitlines() == [
        "3 rows:",
        "reference | owner_id",
        *(f"{reference} | NULL" for reference in orders[:3]),
    ]


async def test_rows_are_capped_by_the_limit(query: Callable[..., Any], orders: list[str]) -> None:
    outcome = await query(BY_REFERENCE, limit=12)

    data = outcome.result.data
    assert [row[0] for row in data["rows"]] == orders[:12]
    assert data["truncated"] is True
    assert outcome.text.splitlines()[0] == "12+ rows (first 10 shown):"


async def test_rows_are_capped_by_the_toolsets_row_limit(
    query: Callable[..., Any], orders: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(testapp_tools.TestDatabase, "row_limit", 5)

    outcome = await query(BY_REFERENCE, limit=100)

    assert [row[0] for row in outcome.result.data["rows"]] == orders[:5]
    assert outcome.result.data["truncated"] is True
    assert outcome.text.splitlines()[0] == "5+ rows:"


async def test_a_query_error_is_answered_not_raised(query: Callable[..., Any]) -> None:
    outcome = await query("SELECT missing FROM no_such_table")

    assert outcome.decision == "confirmed"
    assert outcome.text.startswith("The database refused the query: ")
    assert "no_such_table" in outcome.text
    follow_up = await query("SELECT 1 AS one")
    assert follow_up.result.data["rows"] == [[1]]


@pytest.mark.parametrize(
    "sql",
    [
        "INSERT INTO testapp_order (reference, amount, status, approvals) "
        "VALUES ('SNEAKY', 0, 'open', 0)",
        "UPDATE testapp_order SET status = 'shipped'",
        "DELETE FROM testapp_order",
    ],
    ids=["insert", "update", "delete"],
)
async def test_a_write_is_refused_and_changes_nothing(
    query: Callable[..., Any], orders: list[str], sql: str
) -> None:
    outcome = await query(sql)

    assert outcome.text.startswith("The database refused the query: ")
    assert any(word in outcome.text.lower() for word in ("read-only", "readonly"))
    statuses = await sync_to_async(list)(
        Order.objects.order_by("reference").values_list("reference", "status")
    )
    assert statuses == [(reference, "open") for reference in orders]


async def test_a_dropped_table_stays(query: Callable[..., Any], orders: list[str]) -> None:
    outcome = await query("DROP TABLE testapp_order")

    assert outcome.text.startswith("The database refused the query: ")
    assert await sync_to_async(order_count)() == ORDERS


# Each backend's way for a query to switch the read-only guard off, then write.
LIFT_THE_GUARD = {
    "postgresql": [
        "SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE; COMMIT; DELETE FROM testapp_order",
        "COMMIT; BEGIN READ WRITE; DELETE FROM testapp_order; COMMIT",
    ],
    "sqlite": ["PRAGMA query_only = OFF"],
}


async def test_a_query_cannot_lift_the_read_only_guard(
    query: Callable[..., Any], orders: list[str]
) -> None:
    for sql in LIFT_THE_GUARD[connection.vendor]:
        await query(sql)

    assert await sync_to_async(order_count)() == ORDERS
    if connection.vendor == "sqlite":
        guard = await query("PRAGMA query_only")
        assert guard.result.data["rows"] == [[1]]
    else:
        guard = await query("SHOW default_transaction_read_only")
        assert guard.result.data["rows"] == [["on"]]


# -- permissions ---------------------------------------------------------------------------------


async def test_a_user_without_the_query_permission_is_denied(
    run: Callable[..., Any], browser: Any
) -> None:
    outcome = await run("run_readonly_query", user=browser, sql="SELECT 1")

    assert outcome.decision == "denied"
    assert outcome.code == "permission_denied"
    entry = await AuditEntry.objects.aget(pk=outcome.audit_id)
    assert entry.decision == AuditEntry.Decision.DENIED
    assert entry.operation == "run_readonly_query"


async def test_the_read_permission_is_enough_to_look_at_the_schema(
    run: Callable[..., Any], browser: Any
) -> None:
    tables = await run("list_tables", user=browser)
    columns = await run("describe_table", user=browser, table="testapp_order")

    assert tables.decision == columns.decision == "executed"


@pytest.mark.parametrize("operation", ["list_tables", "describe_table", "run_readonly_query"])
async def test_a_user_without_database_permissions_is_denied_everything(
    run: Callable[..., Any], plain_user: Any, operation: str
) -> None:
    entities = {"table": "testapp_order"} if operation == "describe_table" else {}
    if operation == "run_readonly_query":
        entities = {"sql": "SELECT 1"}

    outcome = await run(operation, user=plain_user, **entities)

    # (no part in the database domain: answered as a missing tool, audited denied)
    assert outcome.decision == "unknown"
    assert outcome.code == "unknown_operation"


async def test_a_denied_call_does_not_start_the_toolset(
    run: Callable[..., Any], session: ToolSession, plain_user: Any
) -> None:
    await run("list_tables", user=plain_user)

    assert session.state(testapp_tools.TestDatabase) is None


# -- statement timeout and cancellation ----------------------------------------------------------


async def test_the_statement_timeout_stops_a_long_query(
    query: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(testapp_tools.TestDatabase, "statement_timeout", 0.3)

    started = time.monotonic()
    outcome = await query(ENDLESS[connection.vendor])

    assert time.monotonic() - started < 2
    assert (outcome.decision, outcome.code) == ("timeout", "timeout")
    assert outcome.text.startswith("The query took longer than 0.3 s and was stopped (")
    entry = await AuditEntry.objects.aget(pk=outcome.audit_id)
    assert entry.decision == AuditEntry.Decision.TIMEOUT
    follow_up = await query("SELECT 1 AS one")
    assert follow_up.result.data["rows"] == [[1]]


async def test_a_cancelled_call_stops_its_query_and_leaves_the_connection_usable(
    query: Callable[..., Any], session: ToolSession
) -> None:
    call = asyncio.ensure_future(query(ENDLESS[connection.vendor]))
    await asyncio.sleep(0.3)

    started = time.monotonic()
    call.cancel()
    with pytest.raises(DispatchCancelled) as stopped:
        await asyncio.wait_for(call, WAIT)

    assert time.monotonic() - started < 2
    assert stopped.value.outcome.decision == "cancelled"
    entry = await AuditEntry.objects.aget(pk=stopped.value.outcome.audit_id)
    assert entry.decision == AuditEntry.Decision.CANCELLED
    follow_up = await asyncio.wait_for(query("SELECT 1 AS one"), WAIT)
    assert follow_up.result.data["rows"] == [[1]]


# -- on PostgreSQL: nothing keeps running on the server ------------------------------------------


def running_sleeps() -> int:
    """Queries of this test database that are sleeping on the server right now."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND state = 'active' AND query LIKE %s AND pid <> pg_backend_pid()",
            ["%pg_sleep(%"],
        )
        return cursor.fetchone()[0]


async def sleeping_on_server(count: int, within: float = WAIT) -> bool:
    """Wait until ``count`` queries are sleeping on the server; False after ``within`` s."""
    deadline = time.monotonic() + within
    while await sync_to_async(running_sleeps)() != count:
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


@pytest.mark.postgres
async def test_cancelling_the_confirmed_run_cancels_its_query_on_the_server(analyst: Any) -> None:
    asked = await arun_turn(analyst, 'run query "SELECT pg_sleep(30)"')
    assert [outcome.decision for outcome in asked.outcomes] == ["confirmation_requested"]
    action = asked.outcomes[0].pending_action
    assert await sleeping_on_server(0, within=0.5)  # nothing runs before the user confirms
    token = CancellationToken()
    confirm = await sync_to_async(decision_turn)(
        analyst, action.pk, confirm=True, source="websocket"
    )
    confirm.cancel = token

    async def work(turn: Any) -> None:
        await answer_action(turn, action.pk, confirm=True)

    run = asyncio.ensure_future(run_started_turn(confirm, work))
    assert await sleeping_on_server(1)

    started = time.monotonic()
    token.cancel()
    result = await asyncio.wait_for(run, WAIT)

    assert time.monotonic() - started < 2
    assert result.assistant_message.status == Message.Status.CANCELLED
    entry = await AuditEntry.objects.filter(operation="run_readonly_query").alatest("pk")
    assert entry.decision == AuditEntry.Decision.CANCELLED
    assert await sleeping_on_server(0, within=0.5)


@pytest.mark.postgres
async def test_cancelling_the_session_cancels_a_running_query_on_the_server(
    query: Callable[..., Any], session: ToolSession
) -> None:
    call = asyncio.ensure_future(query("SELECT pg_sleep(30)"))
    assert await sleeping_on_server(1)

    started = time.monotonic()
    await asyncio.wait_for(session.cancel(), WAIT)
    outcome = await asyncio.wait_for(call, WAIT)

    assert time.monotonic() - started < 2
    assert outcome.text == (
        "The database refused the query: canceling statement due to user request"
    )
    assert await sleeping_on_server(0, within=0.5)
    assert await connections_settle(0) == 0  # the call's own connection is closed too


@pytest.mark.postgres
async def test_the_statement_timeout_leaves_no_query_running_on_the_server(
    query: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(testapp_tools.TestDatabase, "statement_timeout", 0.5)

    started = time.monotonic()
    outcome = await query("SELECT pg_sleep(10)")

    assert time.monotonic() - started < 2
    assert outcome.decision == "timeout"
    assert outcome.text == (
        "The query took longer than 0.5 s and was stopped "
        "(canceling statement due to statement timeout)."
    )
    assert await sleeping_on_server(0, within=0.5)


# -- on SQLite: the file itself is opened read-only --------------------------------------------


async def test_a_sqlite_file_is_opened_read_only_beneath_the_query_guards(tmp_path: Path) -> None:
    path = tmp_path / "reporting.sqlite3"
    with sqlite3.connect(path) as setup:
        setup.execute("CREATE TABLE report (line TEXT)")
    backend = _backend(f"sqlite://{path}")
    await backend.connect()
    try:
        raw = backend.connection
        raw.execute("PRAGMA query_only = OFF")  # past the guard the query path keeps on
        with pytest.raises(sqlite3.OperationalError, match="readonly database"):
            raw.execute("INSERT INTO report VALUES ('sneaky')")
    finally:
        await backend.close()
    with sqlite3.connect(path) as check:
        assert check.execute("SELECT count(*) FROM report").fetchone() == (0,)


# -- on PostgreSQL: the role it connects as ------------------------------------------------------


@pytest.fixture
def make_role() -> Iterator[Callable[..., str]]:
    """Cluster-wide roles with names of this run's own (``options`` and ``grants`` in SQL),
    dropped after the test."""
    created: list[str] = []

    def make(*grants: str, options: str = "LOGIN") -> str:
        role = f"{connection.settings_dict['NAME']}_{uuid.uuid4().hex[:8]}"
        with connection.cursor() as cursor:
            cursor.execute(f'CREATE ROLE "{role}" {options}')
            created.append(role)
            for granted in grants:
                cursor.execute(f'GRANT {granted} TO "{role}"')
        return role

    yield make
    with connection.cursor() as cursor:
        for role in reversed(created):
            drop_role(cursor, role)


def inspector_site(role: str, scope: str = "call") -> tuple[ToolRegistry, type[SQLInspector]]:
    """A registry of its own with an inspector on the test database, connecting as ``role``."""

    class RoleInspector(SQLInspector):
        name = "role_test_database"

    RoleInspector.role = role
    RoleInspector.scope = scope
    site = ToolRegistry("sql-role-test")
    register_toolset(site=site)(RoleInspector)
    return site, RoleInspector


async def try_inspector(
    role: str, user: Any, scope: str = "call"
) -> tuple[type[SQLInspector], ToolSession, list[Outcome]]:
    """List the tables and ask for a query with an inspector connecting as ``role``."""
    site, inspector = inspector_site(role, scope)
    session = ToolSession(site=site)
    try:
        outcomes = [
            await adispatch("list_tables", {}, user=user, site=site, session=session),
            await adispatch(
                "run_readonly_query",
                {"sql": "COPY (SELECT 1) TO PROGRAM 'true'"},
                user=user,
                site=site,
                session=session,
            ),
        ]
    finally:
        await session.stop()
    return inspector, session, outcomes


def is_superuser() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        return bool(cursor.fetchone()[0])


@pytest.mark.postgres
async def test_as_a_superuser_it_refuses_to_start_and_its_tools_are_unavailable(
    analyst: Any, caplog: pytest.LogCaptureFixture
) -> None:
    superuser = connection.settings_dict["USER"]  # the suite's own role: a superuser in CI
    if not await sync_to_async(is_superuser)():
        pytest.skip(f"the suite connects as {superuser!r}, not a superuser")

    with caplog.at_level(logging.ERROR, logger="assistant.lifecycle"):
        _, _, outcomes = await try_inspector("", analyst)

    assert [outcome.decision for outcome in outcomes] == ["unavailable", "unavailable"]
    assert [outcome.code for outcome in outcomes] == ["unavailable", "unavailable"]
    logged = [record.getMessage() for record in caplog.records]
    assert len(logged) == 2  # each call tries to start it (a role fixed meanwhile would do)
    for message in logged:
        assert message.startswith(
            "Toolset role_test_database failed to start: UnsafeDatabaseRole: "
            f"database role {superuser!r} is (or may become) a superuser: "
        )
    decisions = [
        entry.decision
        async for entry in AuditEntry.objects.filter(pk__in=[o.audit_id for o in outcomes])
    ]
    assert decisions == [AuditEntry.Decision.UNAVAILABLE] * 2
    assert not await PendingAction.objects.filter(operation="run_readonly_query").aexists()


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("grants", "named"),
    [
        (["pg_read_server_files"], "is a member of pg_read_server_files"),
        (["pg_write_server_files"], "is a member of pg_write_server_files"),
        (["pg_execute_server_program"], "is a member of pg_execute_server_program"),
        (["{group}"], "is a member of pg_execute_server_program"),  # inherited through a group
        (["{superuser}"], "is (or may become) a superuser"),  # may SET ROLE to a superuser
    ],
    ids=["read-files", "write-files", "programs", "through-a-group", "superuser-member"],
)
async def test_a_role_that_reaches_server_files_or_programs_is_refused(
    analyst: Any,
    make_role: Callable[..., str],
    grants: list[str],
    named: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    group = await sync_to_async(make_role)("pg_execute_server_program", options="NOLOGIN")
    superuser = f'"{connection.settings_dict["USER"]}"'
    grants = [grant.format(group=f'"{group}"', superuser=superuser) for grant in grants]
    role = await sync_to_async(make_role)("pg_read_all_data", *grants)

    with caplog.at_level(logging.ERROR, logger="assistant.lifecycle"):
        await try_inspector(role, analyst)
        _, session, outcomes = await try_inspector(role, analyst, scope="session")

    assert [outcome.code for outcome in outcomes] == ["unavailable", "unavailable"]
    assert session.state(session.failed().pop()) is ToolLifecycleState.FAILED
    logged = [record.getMessage() for record in caplog.records]
    assert len(logged) == 3  # per call twice, then once for the session
    assert all(f"database role {role!r} {named}" in message for message in logged)


@pytest.mark.postgres
def test_the_check_warns_about_an_unsafe_role_only_when_asked_to_use_the_database(
    make_role: Callable[..., str],
) -> None:
    superuser_site, _ = inspector_site("")
    reader_site, _ = inspector_site(make_role("pg_read_all_data"))
    files_site, _ = inspector_site(make_role("pg_read_server_files"))

    warnings = sql_role_warnings(superuser_site, ["default"])
    assert [warning.id for warning in warnings] == ["assistant.W010"]
    assert "superuser" in warnings[0].msg
    assert warnings[0].hint
    assert [w.id for w in sql_role_warnings(files_site, ["default"])] == ["assistant.W010"]
    assert sql_role_warnings(reader_site, ["default"]) == []
    assert sql_role_warnings(superuser_site, None) == []  # plain `check`: no connection
    assert sql_role_warnings(superuser_site, ["other"]) == []  # another alias is not asked


@pytest.mark.postgres
def test_manage_py_check_database_reports_the_unsafe_role(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(testapp_tools.TestDatabase, "role", "")  # the suite's superuser

    plain, with_database = io.StringIO(), io.StringIO()
    call_command("check", stdout=plain, stderr=plain)
    call_command("check", "--database", "default", stdout=with_database, stderr=with_database)

    assert "assistant.W010" not in plain.getvalue()
    assert "assistant.W010" in with_database.getvalue()
    assert "'test_database'" in with_database.getvalue()


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("sql", "refusal"),
    [
        (
            "COPY (SELECT 1) TO PROGRAM 'touch {marker}'",
            "have privileges of the pg_execute_server_program role",
        ),
        ("COPY testapp_order TO '{marker}'", "have privileges of the pg_write_server_files role"),
        ("SELECT pg_read_file('/etc/hostname')", "permission denied for function pg_read_file"),
        ("SELECT pg_ls_dir('.')", "permission denied for function pg_ls_dir"),
    ],
    ids=["copy-to-program", "copy-to-file", "pg_read_file", "pg_ls_dir"],
)
async def test_as_a_read_only_role_server_programs_and_files_are_refused(
    query: Callable[..., Any], sql: str, refusal: str
) -> None:
    marker = Path(tempfile.gettempdir()) / f"assistant-sql-{uuid.uuid4().hex}"

    outcome = await query(sql.format(marker=marker))

    assert outcome.decision == "confirmed"
    assert outcome.text.startswith("The database refused the query: ")
    assert refusal in outcome.text
    assert not marker.exists()
    entry = await AuditEntry.objects.aget(pk=outcome.audit_id)
    assert entry.decision == AuditEntry.Decision.CONFIRMED
    follow_up = await query("SELECT count(*) FROM testapp_order")
    assert follow_up.result.data["rows"] == [[0]]


def asker(site: ToolRegistry, session: ToolSession, user: Any) -> Callable[[str], Any]:
    """Ask for a query on ``site``'s inspector and confirm it."""

    async def ask(sql: str) -> Outcome:
        asked = await adispatch(
            "run_readonly_query", {"sql": sql}, user=user, site=site, session=session
        )
        pk = asked.pending_action.pk
        return await aconfirm_action(pk, user=user, site=site, session=session)

    return ask


def terminate(pid: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s, 5000)", [pid])


def allow_login(role: str, allowed: bool) -> None:
    with connection.cursor() as cursor:
        cursor.execute(f'ALTER ROLE "{role}" {"LOGIN" if allowed else "NOLOGIN"}')


@pytest.mark.postgres
async def test_after_its_connection_was_terminated_the_next_query_reconnects(
    query: Callable[..., Any], session: ToolSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session-scoped inspector holds its connection between calls: lost, it is made anew."""
    monkeypatch.setattr(testapp_tools.TestDatabase, "scope", "session")
    first = await query("SELECT pg_backend_pid()")
    [[pid]] = first.result.data["rows"]

    await sync_to_async(terminate)(pid)
    second = await query("SELECT pg_backend_pid()")

    assert second.decision == "confirmed"
    [[new_pid]] = second.result.data["rows"]
    assert new_pid != pid
    guard = await query("SHOW default_transaction_read_only")
    assert guard.result.data["rows"] == [["on"]]
    assert session.state(testapp_tools.TestDatabase) is ToolLifecycleState.STARTED


@pytest.mark.postgres
async def test_while_the_server_refuses_it_the_query_is_refused_then_it_reconnects(
    analyst: Any, make_role: Callable[..., str]
) -> None:
    role = await sync_to_async(make_role)("pg_read_all_data")
    site, _ = inspector_site(role, "session")
    session = ToolSession(site=site)
    ask = asker(site, session, analyst)

    try:
        [[pid]] = (await ask("SELECT pg_backend_pid()")).result.data["rows"]
        await sync_to_async(allow_login)(role, False)  # as if the server were still down
        await sync_to_async(terminate)(pid)
        down = await ask("SELECT 1")
        await sync_to_async(allow_login)(role, True)
        up = await ask("SELECT 1")
    finally:
        await session.stop()

    assert down.decision == "confirmed"
    assert down.text.startswith("The database refused the query: ")
    assert "not permitted to log in" in down.text
    assert up.result.data["rows"] == [[1]]


def make_superuser(role: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(f'ALTER ROLE "{role}" SUPERUSER')


@pytest.mark.postgres
async def test_a_reconnection_checks_the_role_again(
    analyst: Any, make_role: Callable[..., str]
) -> None:
    role = await sync_to_async(make_role)("pg_read_all_data")
    site, _ = inspector_site(role, "session")
    session = ToolSession(site=site)
    ask = asker(site, session, analyst)

    try:
        [[pid]] = (await ask("SELECT pg_backend_pid()")).result.data["rows"]
        await sync_to_async(make_superuser)(role)
        await sync_to_async(terminate)(pid)
        refused = await ask("COPY (SELECT 1) TO PROGRAM 'true'")
    finally:
        await session.stop()

    assert refused.decision == "failed"
    assert refused.code == "unsafe_database_role"
    entry = await AuditEntry.objects.aget(pk=refused.audit_id)
    assert entry.decision == AuditEntry.Decision.FAILED


@pytest.mark.postgres
async def test_each_call_connects_as_a_role_checked_again(
    analyst: Any, make_role: Callable[..., str]
) -> None:
    role = await sync_to_async(make_role)("pg_read_all_data")
    site, _ = inspector_site(role)
    session = ToolSession(site=site)
    ask = asker(site, session, analyst)

    try:
        [[first]] = (await ask("SELECT pg_backend_pid()")).result.data["rows"]
        [[second]] = (await ask("SELECT pg_backend_pid()")).result.data["rows"]
        await sync_to_async(make_superuser)(role)
        refused = await adispatch("list_tables", {}, user=analyst, site=site, session=session)
    finally:
        await session.stop()

    assert first != second
    assert (refused.decision, refused.code) == ("unavailable", "unavailable")


# -- connections: none held between calls ------------------------------------------------------

CHATS = 4


def inspector_connections() -> int:
    """Connections the inspector's role holds on the server right now."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE usename = %s",
            [testapp_tools.TestDatabase.role],
        )
        return cursor.fetchone()[0]


async def connections_settle(count: int, within: float = WAIT) -> int:
    """Wait until the inspector's role holds ``count`` connections; what it holds at the end."""
    deadline = time.monotonic() + within
    while (held := await sync_to_async(inspector_connections)()) != count:
        if time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    return held


async def chats_that_listed_tables(open_socket: Any, analyst: Any) -> list[Any]:
    """``CHATS`` open chats of the analyst, each of which has listed the tables once."""
    from tests.sockets import receive_run, send

    sockets = [await open_socket(analyst) for _ in range(CHATS)]
    for socket in sockets:
        await send(socket, type="message", text="list tables")
        frames = await receive_run(socket)
        [result] = [frame for frame in frames if frame["type"] == "TOOL_CALL_RESULT"]
        assert "testapp_order" in result["content"], result
    return sockets


async def counted_in_a_chat(socket: Any) -> list[list[Any]]:
    """Ask for a count of the orders in a chat and confirm it there: the rows it answered."""
    from tests.sockets import receive_run, send

    await send(socket, type="message", text='run query "SELECT count(*) FROM testapp_order"')
    asked = await receive_run(socket)
    action_id = asked[-1]["outcome"]["interrupts"][0]["id"]
    await send(socket, type="confirm", action=action_id)
    frames = await receive_run(socket)
    [outcome] = [frame for frame in frames if frame.get("name") == "assistant.outcome"]
    return outcome["value"]["data"]["rows"]


@pytest.mark.postgres
async def test_open_chats_hold_no_inspector_connection_between_calls(
    open_socket: Any, analyst: Any, orders: list[str]
) -> None:
    from assistant.core.lifecycle import stop_process_session

    try:
        sockets = await chats_that_listed_tables(open_socket, analyst)
        counted = await counted_in_a_chat(sockets[0])

        assert counted == [[ORDERS]]
        assert await connections_settle(0) == 0
    finally:
        await stop_process_session()


@pytest.mark.postgres
async def test_a_session_scoped_inspector_holds_a_connection_per_open_chat(
    open_socket: Any, analyst: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The opt-in: ``scope = "session"`` keeps one connection for each chat while it is open."""
    monkeypatch.setattr(testapp_tools.TestDatabase, "scope", "session")

    sockets = await chats_that_listed_tables(open_socket, analyst)

    assert await connections_settle(CHATS) == CHATS
    for socket in sockets:
        await socket.disconnect()
    assert await connections_settle(0) == 0
