"""The admin site: who sees which page, that every page renders, that records are read-only."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from assistant.models import AuditEntry
from tests.admin.pages import (
    ADMIN,
    APPROVALS,
    AUDIT,
    CHANGE_PAGES,
    CONVERSATIONS,
    INVENTORY,
    JOBS,
    LOGIN,
    NEWEST_FIRST,
    RUNS,
    TASKS,
    History,
    operations,
)
from tests.clients import client_for

pytestmark = pytest.mark.django_db


def test_the_history_has_the_decisions_the_filters_are_tested_against(history: History) -> None:
    decisions = {name: entry.decision for name, entry in history.entries.items()}

    assert decisions == {
        "ping": "executed",
        "explode": "failed",
        "list_orders": "denied",
        "approve_order": "confirmation_requested",
        "store_secret": "executed",
        "cancel_order": "confirmation_requested",
    }


# -- who may see what ----------------------------------------------------------------------------


def test_a_superuser_sees_every_assistant_model_on_the_index(admin_client: Client) -> None:
    response = admin_client.get(ADMIN)

    assert response.status_code == 200
    for changelist in (AUDIT, CONVERSATIONS, APPROVALS, JOBS, RUNS, TASKS, INVENTORY):
        assert f'href="{changelist}"' in response.content.decode()


def test_staff_with_the_audit_permission_browse_the_audit_read_only(
    auditor: Any, history: History
) -> None:
    client = client_for(auditor, Client)
    entry = history.entries["ping"]

    index = client.get(ADMIN)
    changelist = client.get(AUDIT)
    detail = client.get(f"{AUDIT}{entry.pk}/change/")

    assert index.status_code == 200
    assert f'href="{AUDIT}"' in index.content.decode()
    assert changelist.status_code == 200
    assert operations(changelist) == NEWEST_FIRST
    assert f'href="{AUDIT}add/"' not in changelist.content.decode()
    assert detail.status_code == 200
    assert 'name="_save"' not in detail.content.decode()
    assert f'href="{AUDIT}{entry.pk}/delete/"' not in detail.content.decode()


@pytest.mark.parametrize("path", [CONVERSATIONS, APPROVALS, JOBS, RUNS, TASKS, INVENTORY])
def test_staff_with_view_permissions_open_the_other_changelists(auditor: Any, path: str) -> None:
    assert client_for(auditor, Client).get(path).status_code == 200


def test_staff_without_the_audit_permission_do_not_see_the_audit(
    helpdesk: Any, history: History
) -> None:
    client = client_for(helpdesk, Client)
    entry = history.entries["ping"]

    index = client.get(ADMIN)

    assert index.status_code == 200
    assert f'href="{AUDIT}"' not in index.content.decode()
    assert f'href="{JOBS}"' in index.content.decode()
    assert client.get(AUDIT).status_code == 403
    assert client.get(f"{AUDIT}{entry.pk}/change/").status_code == 403
    assert client.get(f"{AUDIT}export/csv/").status_code == 403
    assert client.get(JOBS).status_code == 200


@pytest.mark.parametrize(
    "path", [ADMIN, AUDIT, f"{AUDIT}export/csv/", CONVERSATIONS, JOBS, TASKS, INVENTORY]
)
def test_a_user_who_is_not_staff_is_sent_to_the_admin_login(plain_user: Any, path: str) -> None:
    response = client_for(plain_user, Client).get(path)

    assert response.status_code == 302
    assert response["Location"] == f"{LOGIN}?next={path}"


def test_an_anonymous_visitor_is_sent_to_the_admin_login() -> None:
    response = Client().get(AUDIT)

    assert response.status_code == 302
    assert response["Location"] == f"{LOGIN}?next={AUDIT}"


# -- every page renders --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        ADMIN,
        "/admin/assistant/",
        AUDIT,
        f"{AUDIT}?_facets=True",
        f"{AUDIT}?decision__exact=failed&risk_level__exact=safe&domain=diagnostics"
        "&operation=explode&username=plain&source=websocket",
        CONVERSATIONS,
        f"{CONVERSATIONS}?q=trouble",
        APPROVALS,
        f"{APPROVALS}?state=waiting",
        f"{APPROVALS}?q=approve_order",
        JOBS,
        f"{JOBS}?q=start_job",
        RUNS,
        TASKS,
        INVENTORY,
        f"{INVENTORY}?user=clerk",
        f"{INVENTORY}?user=ghost",
    ],
)
def test_every_changelist_renders_for_a_superuser(
    admin_client: Client, world: dict[str, Any], path: str
) -> None:
    assert admin_client.get(path).status_code == 200


@pytest.mark.parametrize("record", list(CHANGE_PAGES))
def test_every_change_page_renders_for_a_superuser(
    admin_client: Client, world: dict[str, Any], record: str
) -> None:
    path = f"{CHANGE_PAGES[record]}{world[record].pk}/change/"

    response = admin_client.get(path)

    assert response.status_code == 200
    assert admin_client.get(f"{CHANGE_PAGES[record]}{world[record].pk}/history/").status_code == 200


def test_the_task_object_permissions_page_renders(
    admin_client: Client, world: dict[str, Any]
) -> None:
    response = admin_client.get(f"{TASKS}{world['task'].pk}/permissions/")

    assert response.status_code == 200


# -- read-only guarantees ------------------------------------------------------------------------


def test_posting_a_change_to_an_audit_entry_is_refused(
    admin_client: Client, history: History
) -> None:
    entry = history.entries["explode"]

    response = admin_client.post(
        f"{AUDIT}{entry.pk}/change/",
        {"operation": "ping", "decision": "executed", "error": "", "username": "nobody"},
    )

    assert response.status_code == 403
    kept = AuditEntry.objects.get(pk=entry.pk)
    assert (kept.operation, kept.decision, kept.username, kept.error) == (
        "explode",
        "failed",
        "plain",
        entry.error,
    )


def test_deleting_an_audit_entry_is_refused(admin_client: Client, history: History) -> None:
    entry = history.entries["explode"]

    page = admin_client.get(f"{AUDIT}{entry.pk}/delete/")
    posted = admin_client.post(f"{AUDIT}{entry.pk}/delete/", {"post": "yes"})

    assert (page.status_code, posted.status_code) == (403, 403)
    assert AuditEntry.objects.filter(pk=entry.pk).exists()


def test_there_is_no_add_page_for_audit_entries(admin_client: Client, history: History) -> None:
    page = admin_client.get(f"{AUDIT}add/")
    posted = admin_client.post(
        f"{AUDIT}add/", {"operation": "forged", "decision": "executed", "username": "root"}
    )

    assert (page.status_code, posted.status_code) == (403, 403)
    assert AuditEntry.objects.count() == 6
    assert not AuditEntry.objects.filter(operation="forged").exists()


def test_no_bulk_action_is_offered_on_audit_entries(admin_client: Client, history: History) -> None:
    changelist = admin_client.get(AUDIT)
    ids = [entry.pk for entry in history.entries.values()]

    posted = admin_client.post(AUDIT, {"action": "delete_selected", "_selected_action": ids})

    assert 'name="action"' not in changelist.content.decode()
    assert "delete_selected" not in changelist.content.decode()
    assert 'name="_selected_action"' not in changelist.content.decode()
    assert posted.status_code == 200
    assert AuditEntry.objects.count() == 6


@pytest.mark.parametrize(
    ("record", "path", "data"),
    [
        ("conversation", CONVERSATIONS, {"title": "rewritten"}),
        ("action", APPROVALS, {"status": "confirmed", "summary": "rewritten"}),
        ("run", RUNS, {"status": "passed", "passed": "9"}),
        pytest.param(
            "job",
            JOBS,
            {"status": "succeeded", "progress": "100", "error": "rewritten"},
        ),
    ],
)
def test_records_of_what_happened_cannot_be_edited(
    admin_client: Client, world: dict[str, Any], record: str, path: str, data: dict[str, str]
) -> None:
    instance = world[record]
    before = {name: getattr(instance, name) for name in data}

    response = admin_client.post(f"{path}{instance.pk}/change/", data)

    assert response.status_code == 403
    instance.refresh_from_db()
    assert {name: getattr(instance, name) for name in data} == before


@pytest.mark.parametrize("path", [CONVERSATIONS, APPROVALS, RUNS, JOBS])
def test_records_of_what_happened_cannot_be_added(
    admin_client: Client, world: dict[str, Any], path: str
) -> None:
    assert admin_client.get(f"{path}add/").status_code == 403
