"""The example project end to end: its management commands in a fresh process on a fresh database."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
DEMO_USERS = {"admin", "operator", "viewer"}


class Project:
    """``manage.py`` of the example project, run against its own database file."""

    def __init__(self, database: Path) -> None:
        self.env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("DJANGO_", "DATABASE_", "REDIS_", "PYTEST_"))
        }
        self.env["DJANGO_SETTINGS_MODULE"] = "config.settings"
        self.env["DATABASE_URL"] = f"sqlite:///{database}"

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=REPO,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check:
            assert result.returncode == 0, f"manage.py {' '.join(args)}:\n{result.stderr}"
        return result


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    database = tmp_path_factory.mktemp("example") / "demo.sqlite3"
    project = Project(database)
    project.run("migrate", "--no-input")
    assert database.exists()
    return project


@pytest.fixture(scope="module")
def demo_users(project: Project) -> str:
    return project.run("demo_users").stdout


def printed_passwords(output: str) -> dict[str, str]:
    return dict(re.findall(r"^\s*(\w+)\s+password:\s*(\S+)\s*$", output, re.MULTILINE))


def inventory(project: Project, username: str) -> dict[str, dict[str, Any]]:
    rows = json.loads(project.run("assistant_tools", "--json", "--as", username).stdout)
    return {row["operation"]: row for row in rows}


def test_migrate_creates_the_database_and_nothing_is_left_unmigrated(project: Project) -> None:
    result = project.run("migrate", "--check")

    assert result.returncode == 0


def test_demo_users_prints_the_three_users_with_their_passwords(demo_users: str) -> None:
    passwords = printed_passwords(demo_users)

    assert set(passwords) == DEMO_USERS
    assert all(passwords.values())


def test_the_printed_passwords_sign_in(project: Project, demo_users: str) -> None:
    passwords = printed_passwords(demo_users)
    script = (
        "import json, sys\n"
        "from django.contrib.auth import authenticate\n"
        "passwords = json.loads(sys.stdin.read())\n"
        "print(json.dumps({name: bool(authenticate(username=name, password=pw))"
        " for name, pw in passwords.items()}))\n"
    )
    result = subprocess.run(
        [sys.executable, "manage.py", "shell", "--no-imports", "-c", script],
        cwd=REPO,
        env=project.env,
        input=json.dumps(passwords),
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == dict.fromkeys(DEMO_USERS, True)


def test_demo_users_can_run_twice(project: Project, demo_users: str) -> None:
    again = project.run("demo_users").stdout

    assert set(printed_passwords(again)) == DEMO_USERS


def test_check_is_clean(project: Project) -> None:
    result = project.run("check")

    assert "System check identified no issues (0 silenced)." in result.stdout


def test_the_viewer_sees_list_users_but_not_deactivate_user(
    project: Project, demo_users: str
) -> None:
    tools = inventory(project, "viewer")

    assert tools["list_users"]["visible"] is True
    assert tools["list_users"]["hidden_because"] == []
    assert tools["deactivate_user"]["visible"] is False
    assert tools["deactivate_user"]["hidden_because"] == ["missing permission auth.change_user"]


def test_the_operator_sees_deactivate_user(project: Project, demo_users: str) -> None:
    tools = inventory(project, "operator")

    assert tools["list_users"]["visible"] is True
    assert tools["deactivate_user"]["visible"] is True
    assert tools["deactivate_user"]["hidden_because"] == []


def test_the_inventory_lists_the_projects_own_tools(project: Project) -> None:
    rows = json.loads(project.run("assistant_tools", "--json").stdout)
    by_operation = {row["operation"]: row for row in rows}

    assert {"whoami", "list_users", "deactivate_user", "set_password"} <= set(by_operation)
    assert by_operation["deactivate_user"]["risk_level"] == "dangerous"
    assert by_operation["deactivate_user"]["requires_confirmation"] is True
    assert by_operation["deactivate_user"]["permissions"] == ["auth.change_user"]
    assert by_operation["list_users"]["permissions"] == ["auth.view_user"]
    assert "visible" not in by_operation["list_users"]


def test_the_inventory_refuses_an_unknown_user(project: Project) -> None:
    result = project.run("assistant_tools", "--as", "nobody", check=False)

    assert result.returncode == 1
    assert "No user named 'nobody'" in result.stderr


# The demo's SQL inspector as the admin: start it, list the tables, ask for queries and confirm them.
INSPECT = """
import asyncio, json
from django.contrib.auth import get_user_model
from assistant.dispatch.confirmation import aconfirm_action
from assistant.dispatch.door import adispatch
from assistant.core.lifecycle import ToolSession
from demo.assistant_tools import DemoDatabase

async def main():
    admin = await get_user_model().objects.aget(username="admin")
    session = ToolSession()

    async def query(sql):
        asked = await adispatch("run_readonly_query", {"sql": sql}, user=admin, session=session)
        assert asked.decision == "confirmation_requested", asked.text
        confirmed = await aconfirm_action(asked.pending_action.pk, user=admin, session=session)
        return confirmed.text

    try:
        tables = await adispatch("list_tables", {}, user=admin, session=session)
        users = await adispatch("describe_table", {"table": "auth_user"}, user=admin, session=session)
        report = {
            "state": str(session.state(DemoDatabase)),
            "tables": tables.result.data,
            "auth_user": [row["column"] for row in users.result.data],
            "count": await query("SELECT count(*) AS users FROM auth_user"),
            "password": await query("SELECT password FROM auth_user"),
            "program": await query("COPY (SELECT 1) TO PROGRAM 'true'"),
            "write": await query("DELETE FROM auth_user"),
        }
    finally:
        await session.stop()
    print(json.dumps(report))

asyncio.run(main())
"""
REFUSED = "The database refused the query: "


def inspect(project: Project) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "manage.py", "shell", "--no-imports", "-c", INSPECT],
        cwd=REPO,
        env=project.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    report: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return report


def test_on_sqlite_there_is_no_role_to_create(project: Project) -> None:
    result = project.run("demo_sql_role")

    assert "no role to create" in result.stdout


def test_on_sqlite_the_inspector_reads_the_file_and_writes_nothing(
    project: Project, demo_users: str
) -> None:
    report = inspect(project)

    assert report["state"] == "None"  # scope "call": nothing held after the calls
    assert "auth_user" in report["tables"]
    assert "django_session" not in report["tables"]
    header, column, users = report["count"].splitlines()
    assert (header, column) == ("1 row:", "users")
    assert int(users) >= len(DEMO_USERS)  # other tests of this module add users of their own
    assert report["program"].startswith(REFUSED)
    assert report["write"].startswith(REFUSED)


@pytest.fixture(scope="module")
def postgres_project() -> Any:
    """The example project on a fresh PostgreSQL database of its own, set up as `make demo` does,
    its inspector reading as a role of this run's own; both dropped afterwards."""
    import dj_database_url
    import psycopg

    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        pytest.skip("needs PostgreSQL (set DATABASE_URL=postgres://...)")
    settings = dj_database_url.parse(url)
    name = f"{os.environ.get('ASSISTANT_TEST_DB', 'test_assistant')}_demo"
    admin = psycopg.connect(url, autocommit=True)
    admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin.execute(f'CREATE DATABASE "{name}"')
    user = settings["USER"]
    project = Project(Path(name))
    project.env["DATABASE_URL"] = f"postgres://{user}@{settings['HOST']}:{settings['PORT']}/{name}"
    project.env["DEMO_SQL_ROLE"] = f"{name}_reader"
    try:
        for command in ("migrate", "demo_users", "demo_sql_role"):
            project.run(command)
        yield project
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'DROP ROLE IF EXISTS "{name}_reader"')
        admin.close()


@pytest.mark.postgres
def test_on_postgresql_the_inspector_reads_as_its_role_and_no_more(
    postgres_project: Project,
) -> None:
    report = inspect(postgres_project)

    assert report["state"] == "None"  # scope "call": nothing held after the calls
    assert "auth_user" in report["tables"]
    assert {"django_session", "authtoken_token"}.isdisjoint(report["tables"])
    assert "password" not in report["auth_user"]
    header, column, users = report["count"].splitlines()
    assert (header, column) == ("1 row:", "users")
    assert int(users) >= len(DEMO_USERS)
    assert report["password"].startswith(REFUSED + "permission denied for table auth_user")
    assert report["program"].startswith(REFUSED)
    assert "pg_execute_server_program" in report["program"]
    assert report["write"].startswith(REFUSED)


@pytest.mark.postgres
def test_on_postgresql_demo_sql_role_can_run_again(postgres_project: Project) -> None:
    result = postgres_project.run("demo_sql_role")

    assert "nor password hashes" in result.stdout


def test_the_deactivation_example_deactivates_the_practice_account_only(
    project: Project, demo_users: str
) -> None:
    example = re.search(r'deactivate user user_id=(\d+) reason="left"', demo_users)
    assert example, demo_users
    assert example.group(0) in (REPO / "README.md").read_text()  # a fresh database's id

    asked = project.run(
        "assistant_call", "deactivate_user", f"user_id={example.group(1)}", "--user", "operator"
    ).stdout
    # a dangerous action: the CLI says what to type, the account's name
    action = re.search(r'--confirm (\S+) --phrase "leaver"', asked)
    assert action, asked
    done = project.run(
        "assistant_call", "--confirm", action.group(1), "--phrase", "leaver", "--user", "operator"
    ).stdout

    assert "Deactivated leaver." in done
    passwords = printed_passwords(project.run("demo_users").stdout)
    assert set(passwords) == DEMO_USERS  # and every sign-in account is still there


def test_signing_in_from_the_home_page_lands_on_the_chat(project: Project) -> None:
    script = (
        "from django.test import Client\n"
        "response = Client(HTTP_HOST='127.0.0.1').get('/')\n"
        "print(response.status_code, response['Location'])\n"
    )
    result = subprocess.run(
        [sys.executable, "manage.py", "shell", "--no-imports", "-c", script],
        cwd=REPO,
        env=project.env,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["302", "/accounts/login/?next=/assistant/"]


TAKEOVER_SCRIPT = """
import json
from django.contrib.auth import get_user_model
from assistant.dispatch.confirmation import confirm_action
from assistant.dispatch.door import dispatch

User = get_user_model()
admin = User.objects.get(username="admin")
operator = User.objects.get(username="operator")
other_root = User.objects.filter(username="root2").first() or User.objects.create_superuser(
    "root2", "root2@example.com", "root2-first-password"
)
plain = User.objects.get_or_create(username="someone", defaults={"is_active": True})[0]


def run(actor, operation, entities):
    proposed = dispatch(operation, entities, user=actor)
    decided = confirm_action(proposed.pending_action.pk, user=actor) if proposed.pending_action else proposed
    return [proposed.decision, decided.decision, decided.error.code if decided.error else None]


before = User.objects.get(pk=admin.pk).password
out = {
    "operator sets the superuser's password": run(
        operator, "set_password", {"user_id": admin.pk, "new_password": "Taken-0ver-now"}
    ),
    "operator deactivates the superuser": run(operator, "deactivate_user", {"user_id": admin.pk}),
    "operator sets a plain user's password": run(
        operator, "set_password", {"user_id": plain.pk, "new_password": "Plain-new-password"}
    ),
    "admin sets another superuser's password": run(
        admin, "set_password", {"user_id": other_root.pk, "new_password": "Root2-new-password"}
    ),
}
admin.refresh_from_db()
out["the superuser is untouched"] = [admin.is_active, admin.password == before]
out["the other superuser's password changed"] = User.objects.get(pk=other_root.pk).check_password(
    "Root2-new-password"
)
print(json.dumps(out))
"""


def test_the_operator_role_cannot_take_over_or_lock_out_the_superuser(
    project: Project, demo_users: str
) -> None:
    result = subprocess.run(
        [sys.executable, "manage.py", "shell", "--no-imports", "-c", TAKEOVER_SCRIPT],
        cwd=REPO,
        env=project.env,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    refused = ["denied", "denied", "permission_denied"]  # before anyone is asked
    assert out["operator sets the superuser's password"] == refused
    assert out["operator deactivates the superuser"] == refused
    assert out["the superuser is untouched"] == [True, True]
    assert out["operator sets a plain user's password"] == [
        "confirmation_requested",
        "confirmed",
        None,
    ]
    assert out["admin sets another superuser's password"] == [
        "confirmation_requested",
        "confirmed",
        None,
    ]
    assert out["the other superuser's password changed"] is True


@pytest.mark.django_db(transaction=True)
def test_cancel_stops_the_user_report_in_its_pause_not_after_it(
    settings: Any, django_user_model: Any
) -> None:
    import threading
    import time

    from django.db import connections

    from assistant.jobs import cancel_job, execute_job
    from assistant.models import Job

    settings.ASSISTANT = {**settings.ASSISTANT, "JOB_HEARTBEAT": 0.05}
    owner = django_user_model.objects.create_user("owner", password="pw")
    job = Job.objects.create(
        operation="user_report",
        function="demo.jobs.build_user_report",
        kwargs={"pause": 60},
        user=owner,
    )

    def work() -> None:  # a worker running the job, on connections of its own
        try:
            execute_job(str(job.pk))
        finally:
            connections.close_all()

    worker = threading.Thread(target=work)
    worker.start()
    deadline = time.monotonic() + 5
    while Job.objects.get(pk=job.pk).progress < 100 and time.monotonic() < deadline:
        time.sleep(0.02)  # the only account is checked, the 60 s pause begins
    asked = time.monotonic()
    cancel_job(owner, job.pk)
    worker.join(timeout=5)

    assert not worker.is_alive(), "the job still sleeps after Cancel"
    assert time.monotonic() - asked < 2
    job.refresh_from_db()
    assert (job.status, job.error) == ("cancelled", "Cancelled by the user.")


def production_environment() -> dict[str, str]:
    """The ``export NAME=value`` lines of the docs' production how-to, a fresh key included."""
    import secrets

    section = (REPO / "docs" / "howto" / "production.md").read_text()
    exported = dict(re.findall(r"^\s*export (\w+)=(\S+)", section, re.MULTILINE))
    assert exported.pop("DJANGO_SECRET_KEY").startswith('"$(python')
    return {**exported, "DJANGO_SECRET_KEY": secrets.token_urlsafe(50)}


def test_check_deploy_is_clean_with_the_production_environment_the_docs_give(
    project: Project,
) -> None:
    environment = production_environment()
    assert {"DJANGO_DEBUG", "DJANGO_ALLOWED_HOSTS", "DJANGO_HTTPS"} <= set(environment)
    project.env.update(environment)
    try:
        result = project.run("check", "--deploy", "--fail-level", "WARNING", check=False)
    finally:
        for name in environment:
            del project.env[name]

    assert result.returncode == 0, result.stderr
    assert "System check identified no issues (0 silenced)." in result.stdout


def test_with_debug_off_and_no_secret_key_the_project_refuses_to_start(project: Project) -> None:
    project.env["DJANGO_DEBUG"] = "0"
    try:
        result = project.run("check", check=False)
    finally:
        del project.env["DJANGO_DEBUG"]

    assert result.returncode != 0
    assert "ImproperlyConfigured: DJANGO_SECRET_KEY is not set." in result.stderr
    assert "refuses to start on the key in its repository" in result.stderr
