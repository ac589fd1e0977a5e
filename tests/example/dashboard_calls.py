"""What the dashboards tests share: REST calls as a user, everything a tool could change, and the
jobs' progress (the audit's decisions are tests.audit_trail's)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from assistant.models import Job
from dashboards import repository
from dashboards.models import Backup, Dashboard

API = "/assistant/api"
DASHBOARD_TOOLS = {
    "search_dashboards",
    "create_branch",
    "commit_changes",
    "deploy_dashboard",
    "execute_migration",
    "run_backup",
    "run_llm_documentation",
    "get_health_summary",
}


# -- helpers --------------------------------------------------------------------------------


# A refused call's status: the viewer works with dashboards and is told what a tool needs; the
# outsider has no part in the domain and is told, as for a missing tool, that it does not exist.
REFUSED = {"viewer": 403, "outsider": 404}


def client_for(user: Any) -> APIClient:
    client = APIClient()
    client.force_login(user)
    return client


def dispatch(user: Any, operation: str, **entities: Any) -> Any:
    return client_for(user).post(
        f"{API}/dispatch/", {"operation": operation, "entities": entities}, format="json"
    )


def confirm(user: Any, response: Any) -> Any:
    """Confirm as the approval card does: typing the phrase a dangerous action names."""
    assert response.status_code == 202, response.json()
    action = response.json()["pending_action"]
    body = {"phrase": action["confirm_phrase"]} if action.get("confirm_phrase") else {}
    return client_for(user).post(f"{API}/actions/{action['id']}/confirm/", body, format="json")


def reject(user: Any, response: Any) -> Any:
    assert response.status_code == 202, response.json()
    return client_for(user).post(f"{API}/actions/{response.json()['pending_action']['id']}/cancel/")


def state() -> dict[str, Any]:
    """Everything a dashboard tool could change."""
    return {
        "dashboards": list(
            Dashboard.objects.order_by("pk").values_list(
                "pk", "environment__slug", "slug", "title", "version", "database", "documentation"
            )
        ),
        "backups": Backup.objects.count(),
        "jobs": Job.objects.count(),
        "branches": {name: repository.branch_commit(name) for name in repository.branches()},
    }


@pytest.fixture
def progress(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, str]]:
    """Every ``job.report(percent, message)`` the jobs make, in order."""
    seen: list[tuple[str, int, str]] = []
    original = Job.report

    def report(self: Job, percent: float, message: str = "") -> None:
        seen.append((self.operation, int(percent), message))
        original(self, percent, message)

    monkeypatch.setattr(Job, "report", report)
    return seen


def job_of(response: Any) -> Job:
    return Job.objects.get(pk=response.json()["task_id"])


def assert_progressed(seen: list[tuple[str, int, str]], operation: str) -> None:
    """The job reported several steps, never going backwards, and ended at 100 %."""
    percents = [percent for name, percent, _ in seen if name == operation]
    assert len(percents) >= 3, seen
    assert percents == sorted(percents)
    assert percents[-1] == 100


@pytest.fixture
def run_jobs(django_capture_on_commit_callbacks: Any) -> Callable[[], Any]:
    """Jobs are handed to the (immediate) task backend on commit: run them at the block's end."""

    def context() -> Any:
        return django_capture_on_commit_callbacks(execute=True)

    return context
