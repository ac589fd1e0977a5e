"""The staff admin: who sees what, read-only records, the audit changelist and export, actions."""

from __future__ import annotations

import csv
import html
import io
import json
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from asgiref.testing import ApplicationCommunicator
from django.core.management import CommandError, call_command
from django.db import connection
from django.http import StreamingHttpResponse
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from assistant.chat import run_turn
from assistant.dispatch import dispatch
from assistant.exceptions import ActionExpired
from assistant.models import (
    AuditEntry,
    Conversation,
    Job,
    PendingAction,
    ValidationFinding,
    ValidationRun,
    ValidationTask,
)
from assistant.registry import registry
from assistant.validation import ValidationTaskService
from tests.clients import client_for
from tests.testapp.models import Order

pytestmark = pytest.mark.django_db

SECRET = "hunter2"
ADMIN = "/admin/"
LOGIN = "/admin/login/"
AUDIT = "/admin/assistant/auditentry/"
CONVERSATIONS = "/admin/assistant/conversation/"
APPROVALS = "/admin/assistant/pendingaction/"
JOBS = "/admin/assistant/job/"
RUNS = "/admin/assistant/validationrun/"
TASKS = "/admin/assistant/validationtask/"
INVENTORY = "/admin/assistant/tool/"
EXPORT_FIELDS = [
    "id",
    "created_at",
    "username",
    "operation",
    "domain",
    "risk_level",
    "decision",
    "duration_ms",
    "source",
    "request_ip",
    "conversation_id",
    "pending_action_id",
    "error",
    "entities",
]
VIEW_EVERYTHING = (
    "assistant.view_auditentry",
    "assistant.view_conversation",
    "assistant.view_message",
    "assistant.view_pendingaction",
    "assistant.view_job",
    "assistant.view_validationtask",
    "assistant.view_validationrun",
    "assistant.view_validationfinding",
)


# -- users ---------------------------------------------------------------------------------------


@pytest.fixture
def auditor(make_user: Callable[..., Any]) -> Any:
    """Staff who may view the audit trail and every other assistant record."""
    return make_user("auditor", *VIEW_EVERYTHING, is_staff=True)


@pytest.fixture
def helpdesk(make_user: Callable[..., Any]) -> Any:
    """Staff who may view conversations and jobs, but not the audit trail."""
    return make_user("helpdesk", "assistant.view_conversation", "assistant.view_job", is_staff=True)


@pytest.fixture
def keeper(make_user: Callable[..., Any]) -> Any:
    """May store secrets."""
    return make_user("keeper", "assistant.vault_write")


@pytest.fixture
def admin_client(superuser: Any) -> Client:
    return client_for(superuser, Client)


# -- what the changelists render -----------------------------------------------------------------

ROW = re.compile(r"<tr>(.*?)</tr>", re.S)
CELL = re.compile(r'<t[hd] class="field-(\w+)[^"]*">(.*?)</t[hd]>', re.S)
LINK = re.compile(r'href="([^"]+)"')


@dataclass
class Row:
    cells: dict[str, str]  # field name → the cell's HTML
    link: str  # the row's change page

    def text(self, field: str) -> str:
        return html.unescape(re.sub(r"<[^>]+>", "", self.cells[field])).strip()


def result_rows(response: Any) -> list[Row]:
    """The rows of the changelist's result table, top to bottom (none when it shows no table)."""
    page = response.content.decode()
    if '<table id="result_list">' not in page:
        return []
    body = page.split('<table id="result_list">', 1)[1].split("<tbody>", 1)[1]
    body = body.split("</tbody>", 1)[0]
    rows = []
    for row in ROW.findall(body):
        cells = dict(CELL.findall(row))
        found = LINK.search(row)
        link = html.unescape(found.group(1)).split("?", 1)[0] if found else ""
        rows.append(Row(cells=cells, link=link))
    return rows


def operations(response: Any) -> list[str]:
    return [row.text("operation") for row in result_rows(response)]


def strip_tags(fragment: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def page_text(response: Any) -> str:
    return html.unescape(response.content.decode())


INLINE_ROW = re.compile(r'<tr class="form-row has_original"\s+id="(\w+)-\d+">(.*?)</tr>', re.S)
INLINE_CELL = re.compile(r'<td class="field-(\w+)">(.*?)</td>', re.S)


def inline_rows(response: Any, prefix: str) -> list[dict[str, str]]:
    """The text of each field of each saved row of an inline (``prefix``: its formset's)."""
    return [
        {field: strip_tags(cell) for field, cell in INLINE_CELL.findall(row)}
        for name, row in INLINE_ROW.findall(response.content.decode())
        if name == prefix
    ]


# -- an audit history ----------------------------------------------------------------------------


@dataclass
class History:
    conversation: Conversation
    entries: dict[str, AuditEntry]  # by operation


@pytest.fixture
def history(plain_user: Any, clerk: Any, keeper: Any) -> History:
    """Six dispatches by three users through four transports, oldest first."""
    order = Order.objects.create(reference="ORD-1")
    conversation = Conversation.objects.create(user=plain_user, title="trouble")
    calls = [
        ("ping", {}, plain_user, "rest", conversation),
        ("explode", {}, plain_user, "websocket", conversation),
        ("list_orders", {}, plain_user, "api", None),
        ("approve_order", {"order_id": order.pk}, clerk, "api", None),
        ("store_secret", {"label": "wifi", "secret": SECRET}, keeper, "cli", None),
        ("cancel_order", {"order_id": order.pk}, clerk, "rest", None),
    ]
    entries = {}
    for operation, entities, user, source, in_conversation in calls:
        outcome = dispatch(
            operation, entities, user=user, source=source, conversation=in_conversation
        )
        entries[operation] = AuditEntry.objects.get(pk=outcome.audit_id)
    return History(conversation=conversation, entries=entries)


NEWEST_FIRST = [
    "cancel_order",
    "store_secret",
    "approve_order",
    "list_orders",
    "explode",
    "ping",
]


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


@pytest.fixture
def world(history: History, superuser: Any, clerk: Any) -> dict[str, Any]:
    """One record of every kind the admin shows."""
    task = ValidationTaskService.create_task(
        name="Access", target="testapp.Order", rules=["tool_access_matrix"]
    )
    job = Job.objects.create(
        operation="start_job", function="tests.testapp.jobs.count_orders", user=superuser
    )
    run = ValidationRun.objects.create(task=task, status="failed", failed=1, job=job)
    ValidationFinding.objects.create(
        run=run, rule="tool_access_matrix", outcome="fail", message="role 'x' does not exist"
    )
    return {
        "entry": history.entries["approve_order"],
        "conversation": history.conversation,
        "action": history.entries["approve_order"].pending_action,
        "job": job,
        "task": task,
        "run": run,
    }


CHANGE_PAGES = {
    "entry": AUDIT,
    "conversation": CONVERSATIONS,
    "action": APPROVALS,
    "job": JOBS,
    "task": TASKS,
    "run": RUNS,
}


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


# -- the audit changelist ------------------------------------------------------------------------


def test_the_audit_lists_newest_first_with_who_what_and_how_it_went(
    admin_client: Client, history: History
) -> None:
    response = admin_client.get(AUDIT)

    rows = result_rows(response)
    assert [row.text("operation") for row in rows] == NEWEST_FIRST
    explode = rows[NEWEST_FIRST.index("explode")]
    assert {
        field: explode.text(field)
        for field in ("username", "domain", "risk_level", "coloured_decision")
    } == {
        "username": "plain",
        "domain": "diagnostics",
        "risk_level": "safe",
        "coloured_decision": "failed",
    }
    assert explode.link == f"{AUDIT}{history.entries['explode'].pk}/change/"
    assert explode.text("duration").endswith(" ms")
    assert explode.text("conversation_link") == str(history.conversation.pk)[:8]
    assert (
        f'href="{CONVERSATIONS}{history.conversation.pk}/change/"'
        in explode.cells["conversation_link"]
    )
    assert rows[NEWEST_FIRST.index("list_orders")].text("conversation_link") == "-"


@pytest.mark.parametrize(
    ("operation", "colour", "label"),
    [
        ("ping", "#127a3c", "executed"),
        ("explode", "#b42318", "failed"),
        ("list_orders", "#b42318", "denied"),
        ("approve_order", "#9a6700", "confirmation requested"),
    ],
)
def test_decisions_are_coloured_badges(
    admin_client: Client, history: History, operation: str, colour: str, label: str
) -> None:
    rows = result_rows(admin_client.get(AUDIT))

    cell = rows[NEWEST_FIRST.index(operation)].cells["coloured_decision"]
    assert f"background:{colour}" in cell
    assert re.fullmatch(rf'<span style="[^"]+">{label}</span>', cell)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("decision__exact=executed", ["store_secret", "ping"]),
        ("decision__exact=failed", ["explode"]),
        ("decision__exact=denied", ["list_orders"]),
        ("decision__exact=confirmation_requested", ["cancel_order", "approve_order"]),
        ("decision__exact=timeout", []),
        ("risk_level__exact=safe", ["list_orders", "explode", "ping"]),
        ("risk_level__exact=guarded", ["store_secret", "approve_order"]),
        ("risk_level__exact=dangerous", ["cancel_order"]),
        ("domain=orders", ["cancel_order", "approve_order", "list_orders"]),
        ("domain=vault", ["store_secret"]),
        ("domain=diagnostics", ["explode", "ping"]),
        ("operation=explode", ["explode"]),
        ("operation=approve_order", ["approve_order"]),
        ("username=clerk", ["cancel_order", "approve_order"]),
        ("username=plain", ["list_orders", "explode", "ping"]),
        ("username=nobody", []),
        ("source=rest", ["cancel_order", "ping"]),
        ("source=websocket", ["explode"]),
        ("source=api", ["approve_order", "list_orders"]),
        ("source=cli", ["store_secret"]),
        ("source=admin", []),
        ("domain=diagnostics&decision__exact=executed", ["ping"]),
        ("username=clerk&risk_level__exact=guarded", ["approve_order"]),
    ],
)
def test_each_filter_narrows_the_rows_exactly(
    admin_client: Client, history: History, query: str, expected: list[str]
) -> None:
    response = admin_client.get(f"{AUDIT}?{query}")

    assert response.status_code == 200
    assert operations(response) == expected


def test_the_filter_choices_come_from_the_registry_and_the_staff(
    admin_client: Client, history: History, auditor: Any
) -> None:
    page = admin_client.get(AUDIT).content.decode()

    for tool in registry:
        assert f'href="?operation={tool.operation}"' in page
        assert f'href="?domain={tool.domain}"' in page
    assert 'href="?username=auditor"' in page
    assert 'href="?username=root"' in page
    assert 'href="?username=plain"' not in page  # not staff: typed into the URL instead
    for source in ("rest", "websocket", "api", "cli", "admin"):
        assert f'href="?source={source}"' in page


@pytest.mark.parametrize(
    ("term", "expected"),
    [
        ("explode", ["explode"]),
        ("clerk", ["cancel_order", "approve_order"]),
        ("  store_secret  ", ["store_secret"]),
        ("expl", []),  # exact: an index lookup, not a scan
        ("CLERK", []),
    ],
)
def test_search_matches_an_operation_or_a_username_exactly(
    admin_client: Client, history: History, term: str, expected: list[str]
) -> None:
    response = admin_client.get(AUDIT, {"q": term})

    assert response.status_code == 200
    assert operations(response) == expected


def test_search_by_conversation_id_lists_that_conversations_entries(
    admin_client: Client, history: History
) -> None:
    response = admin_client.get(AUDIT, {"q": str(history.conversation.pk)})

    assert operations(response) == ["explode", "ping"]


BACK = "\N{SINGLE LEFT-POINTING ANGLE QUOTATION MARK}"  # the date hierarchy's "up" link


def at(day: int, hour: int, month: int = 3, year: int = 2025) -> datetime:
    return datetime(year, month, day, hour, tzinfo=UTC)


def audit_at(moment: datetime, operation: str) -> AuditEntry:
    return AuditEntry.objects.create(
        created_at=moment, operation=operation, decision="executed", domain="diagnostics"
    )


def date_links(response: Any) -> list[tuple[str, str]]:
    """(label, query) of each link in the date hierarchy."""
    nav = response.content.decode().split('<nav class="toplinks"', 1)[1].split("</nav>", 1)[0]
    return [
        (html.unescape(label).strip(), html.unescape(href))
        for href, label in re.findall(r'<a href="\?([^"]*)"[^>]*>([^<]+)</a>', nav)
    ]


def test_the_date_hierarchy_links_the_days_of_a_month_of_entries(admin_client: Client) -> None:
    audit_at(at(3, 10), "first")
    audit_at(at(3, 15), "second")
    audit_at(at(5, 9), "third")

    response = admin_client.get(AUDIT)

    # The days from the first entry's to the last's (a range, not a DISTINCT over every row).
    assert date_links(response) == [
        (f"{BACK} 2025", "created_at__year=2025"),
        ("March 3", "created_at__day=3&created_at__month=3&created_at__year=2025"),
        ("March 4", "created_at__day=4&created_at__month=3&created_at__year=2025"),
        ("March 5", "created_at__day=5&created_at__month=3&created_at__year=2025"),
    ]


@pytest.mark.parametrize(("day", "expected"), [(3, ["second", "first"]), (4, []), (5, ["third"])])
def test_a_day_link_narrows_the_audit_to_that_day(
    admin_client: Client, day: int, expected: list[str]
) -> None:
    audit_at(at(3, 10), "first")
    audit_at(at(3, 15), "second")
    audit_at(at(5, 9), "third")

    response = admin_client.get(
        f"{AUDIT}?created_at__day={day}&created_at__month=3&created_at__year=2025"
    )

    assert operations(response) == expected


def test_the_date_hierarchy_links_years_then_months(admin_client: Client) -> None:
    audit_at(at(30, 23, month=11, year=2024), "last year")
    audit_at(at(2, 8, month=1, year=2025), "new year")
    audit_at(at(1, 0, month=3, year=2025), "spring")

    years = admin_client.get(AUDIT)
    months = admin_client.get(f"{AUDIT}?created_at__year=2025")

    assert [label for label, _ in date_links(years)] == ["2024", "2025"]
    assert [label for label, _ in date_links(months)] == [
        f"{BACK} All dates",
        "January 2025",
        "February 2025",
        "March 2025",
    ]
    assert operations(months) == ["spring", "new year"]


def test_the_date_hierarchy_uses_the_current_time_zones_days(
    admin_client: Client, settings: Any
) -> None:
    settings.TIME_ZONE = "Europe/Paris"  # the clocks go forward on 30 March 2025
    audit_at(datetime(2025, 3, 29, 23, 30, tzinfo=UTC), "saturday night")  # 30 March, 00:30
    audit_at(datetime(2025, 3, 30, 22, 30, tzinfo=UTC), "sunday night")  # 31 March, 00:30

    response = admin_client.get(AUDIT)
    sunday = admin_client.get(
        f"{AUDIT}?created_at__day=30&created_at__month=3&created_at__year=2025"
    )

    assert [label for label, _ in date_links(response)] == [f"{BACK} 2025", "March 30", "March 31"]
    assert operations(sunday) == ["saturday night"]


def many_entries(count: int) -> None:
    AuditEntry.objects.bulk_create(
        AuditEntry(operation=f"op{index:03}", decision="executed", domain="diagnostics")
        for index in range(count)
    )


def test_the_audit_pages_by_a_hundred(admin_client: Client) -> None:
    many_entries(105)

    first = admin_client.get(AUDIT)
    second = admin_client.get(f"{AUDIT}?p=2")

    assert operations(first) == [f"op{index:03}" for index in range(104, 4, -1)]
    assert operations(second) == ["op004", "op003", "op002", "op001", "op000"]
    assert 'href="?p=2"' in first.content.decode()


def test_the_changelist_counts_at_most_ten_thousand_and_one_rows(
    admin_client: Client, history: History
) -> None:
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(f"{AUDIT}?decision__exact=executed")

    counts = [query["sql"] for query in queries if "COUNT(" in query["sql"].upper()]
    assert len(counts) == 1
    assert "LIMIT 10001" in counts[0]
    page = " ".join(page_text(response).split())
    assert "2 audit entries" in page
    assert "6 total" not in page  # show_full_result_count is off


def test_the_changelists_queries_do_not_grow_with_its_rows(
    admin_client: Client, history: History
) -> None:
    with CaptureQueriesContext(connection) as six:
        admin_client.get(AUDIT)
    for operation in ("ping", "explode", "ping", "explode"):
        dispatch(operation, user=history.conversation.user, conversation=history.conversation)
    with CaptureQueriesContext(connection) as ten:
        response = admin_client.get(AUDIT)

    assert len(operations(response)) == 10
    assert len(ten) == len(six)


# -- the audit entry ------------------------------------------------------------------------------


def test_an_entry_shows_its_redacted_entities(admin_client: Client, history: History) -> None:
    entry = history.entries["store_secret"]

    response = admin_client.get(f"{AUDIT}{entry.pk}/change/")

    page = page_text(response)
    assert response.status_code == 200
    assert '"secret": "[redacted]"' in page
    assert '"label": "wifi"' in page
    assert SECRET not in page


def test_an_entry_shows_its_error_summary(admin_client: Client, history: History) -> None:
    entry = history.entries["explode"]
    assert entry.error

    page = page_text(admin_client.get(f"{AUDIT}{entry.pk}/change/"))

    assert entry.error == "RuntimeError: boom: internal detail 42"
    assert entry.error in page


def test_an_entry_links_its_pending_action(admin_client: Client, history: History) -> None:
    entry = history.entries["approve_order"]

    page = admin_client.get(f"{AUDIT}{entry.pk}/change/").content.decode()

    assert entry.pending_action_id is not None
    assert f'href="{APPROVALS}{entry.pending_action_id}/change/"' in page


def test_an_entry_links_the_job_its_call_started(
    admin_client: Client, superuser: Any, history: History
) -> None:
    outcome = dispatch(
        "start_job", {"kind": "count"}, user=superuser, conversation=history.conversation
    )
    job = Job.objects.get(pk=outcome.result.task_id)

    page = admin_client.get(f"{AUDIT}{outcome.audit_id}/change/").content.decode()

    assert f'href="{JOBS}{job.pk}/change/"' in page


# -- export ---------------------------------------------------------------------------------------


def streamed(response: Any) -> str:
    assert isinstance(response, StreamingHttpResponse)
    return b"".join(response).decode()


def test_the_csv_export_streams_the_filtered_rows_newest_first(
    admin_client: Client, history: History
) -> None:
    response = admin_client.get(f"{AUDIT}export/csv/?domain=orders")

    assert response.status_code == 200
    assert response["Content-Type"] == "text/csv"
    assert response["Content-Disposition"] == 'attachment; filename="audit.csv"'
    assert isinstance(response, StreamingHttpResponse)
    chunks = [chunk.decode() for chunk in response]  # as the server sends them
    assert chunks[0].startswith(",".join(EXPORT_FIELDS))  # the header comes first
    table = list(csv.reader(io.StringIO("".join(chunks))))
    assert table[0] == EXPORT_FIELDS
    assert [int(row[0]) for row in table[1:]] == [
        history.entries[name].pk for name in ("cancel_order", "approve_order", "list_orders")
    ]
    approve = dict(zip(EXPORT_FIELDS, table[2], strict=True))
    entry = history.entries["approve_order"]
    assert approve == {
        "id": str(entry.pk),
        "created_at": entry.created_at.isoformat(),
        "username": "clerk",
        "operation": "approve_order",
        "domain": "orders",
        "risk_level": "guarded",
        "decision": "confirmation_requested",
        "duration_ms": str(entry.duration_ms),
        "source": "api",
        "request_ip": "",
        "conversation_id": "",
        "pending_action_id": str(entry.pending_action_id),
        "error": "",
        "entities": json.dumps(entry.entities, sort_keys=True),
    }


def test_the_json_lines_export_streams_the_filtered_rows_newest_first(
    admin_client: Client, history: History
) -> None:
    response = admin_client.get(f"{AUDIT}export/jsonl/?decision__exact=executed")

    assert response.status_code == 200
    assert response["Content-Type"] == "application/x-ndjson"
    assert response["Content-Disposition"] == 'attachment; filename="audit.jsonl"'
    lines = [json.loads(line) for line in streamed(response).splitlines()]
    assert [line["operation"] for line in lines] == ["store_secret", "ping"]
    assert [line["id"] for line in lines] == [
        history.entries["store_secret"].pk,
        history.entries["ping"].pk,
    ]
    assert all(sorted(line) == sorted(EXPORT_FIELDS) for line in lines)
    assert lines[1]["conversation_id"] == str(history.conversation.pk)
    assert lines[0]["entities"] == {"label": "wifi", "secret": "[redacted]"}


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_the_export_keeps_sensitive_entities_redacted(
    admin_client: Client, history: History, fmt: str
) -> None:
    body = streamed(admin_client.get(f"{AUDIT}export/{fmt}/"))

    assert "[redacted]" in body
    assert SECRET not in body


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("", NEWEST_FIRST),
        ("q=clerk", ["cancel_order", "approve_order"]),
        ("source=websocket", ["explode"]),
        ("username=plain&risk_level__exact=safe&decision__exact=denied", ["list_orders"]),
        ("decision__exact=timeout", []),
    ],
)
def test_the_export_follows_the_changelists_filter_and_search(
    admin_client: Client, history: History, query: str, expected: list[str]
) -> None:
    body = streamed(admin_client.get(f"{AUDIT}export/jsonl/?{query}"))

    assert [json.loads(line)["operation"] for line in body.splitlines()] == expected


def test_the_export_follows_the_date_hierarchy(admin_client: Client) -> None:
    audit_at(at(3, 10), "first")
    audit_at(at(5, 9), "third")

    body = streamed(
        admin_client.get(
            f"{AUDIT}export/csv/?created_at__day=5&created_at__month=3&created_at__year=2025"
        )
    )

    assert [row[3] for row in csv.reader(io.StringIO(body))] == ["operation", "third"]


def test_the_export_is_not_limited_to_the_changelists_page(admin_client: Client) -> None:
    many_entries(250)

    body = streamed(admin_client.get(f"{AUDIT}export/jsonl/?domain=diagnostics&p=2"))

    assert len(body.splitlines()) == 250
    assert json.loads(body.splitlines()[0])["operation"] == "op249"


async def asgi_get(path: str, session: str) -> list[dict[str, Any]]:
    """Every message the project's ASGI application sends for one GET (as daphne or uvicorn)."""
    from tests.asgi import application

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"testserver"), (b"cookie", f"sessionid={session}".encode())],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }
    communicator = ApplicationCommunicator(application, scope)
    await communicator.send_input({"type": "http.request", "body": b""})
    messages = [await communicator.receive_output(10)]
    while messages[-1].get("more_body", messages[-1]["type"] == "http.response.start"):
        messages.append(await communicator.receive_output(10))
    await communicator.wait(10)
    return messages


@pytest.mark.django_db(transaction=True)
async def test_the_export_streams_when_served_over_asgi(superuser: Any, history: History) -> None:
    client = Client()
    await sync_to_async(client.force_login)(superuser)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        messages = await asgi_get(f"{AUDIT}export/csv/", client.cookies["sessionid"].value)

    assert messages[0]["status"] == 200
    body = b"".join(message.get("body", b"") for message in messages[1:]).decode()
    assert len(list(csv.reader(io.StringIO(body)))) == 7
    # Django reads a synchronous iterator into a list before serving it over ASGI.
    # (a ResourceWarning is another test's connection being collected meanwhile, not the export)
    assert [str(w.message) for w in caught if not issubclass(w.category, ResourceWarning)] == []


def test_an_empty_csv_export_is_just_the_header(admin_client: Client) -> None:
    body = streamed(admin_client.get(f"{AUDIT}export/csv/"))

    assert list(csv.reader(io.StringIO(body))) == [EXPORT_FIELDS]


def test_the_export_links_carry_the_current_filter(admin_client: Client, history: History) -> None:
    page = admin_client.get(f"{AUDIT}?domain=orders").content.decode()

    assert f'href="{AUDIT}export/csv/?domain=orders"' in page
    assert f'href="{AUDIT}export/jsonl/?domain=orders"' in page


def test_an_unknown_export_format_is_not_found(admin_client: Client) -> None:
    assert admin_client.get(f"{AUDIT}export/xml/").status_code == 404


def test_an_export_with_a_malformed_filter_is_a_bad_request(superuser: Any) -> None:
    # The changelist redirects such a URL to ?e=1; the export must not answer with a 500.
    client = Client(raise_request_exception=False)
    client.force_login(superuser)

    response = client.get(f"{AUDIT}export/csv/?created_at__year=twenty")

    assert response.status_code == 400


def test_staff_with_the_audit_permission_may_export(auditor: Any, history: History) -> None:
    response = client_for(auditor, Client).get(f"{AUDIT}export/jsonl/")

    assert response.status_code == 200
    assert len(streamed(response).splitlines()) == 6


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_staff_without_the_audit_permission_may_not_export(
    helpdesk: Any, history: History, fmt: str
) -> None:
    response = client_for(helpdesk, Client).get(f"{AUDIT}export/{fmt}/")

    assert response.status_code == 403
    assert not response.streaming
    assert b"store_secret" not in response.content


def test_a_user_who_is_not_staff_may_not_export(plain_user: Any, history: History) -> None:
    response = client_for(plain_user, Client).get(f"{AUDIT}export/csv/")

    assert response.status_code == 302
    assert response["Location"] == f"{LOGIN}?next={AUDIT}export/csv/"


# -- conversations -------------------------------------------------------------------------------


@pytest.fixture
def chat(plain_user: Any) -> Conversation:
    """Two turns of a real chat: ping (executed), then explode (failed)."""
    first = run_turn(plain_user, "ping")
    run_turn(plain_user, "explode", conversation_id=first.conversation.pk)
    return first.conversation


def test_a_conversation_shows_its_messages_in_order_with_their_tool_calls(
    admin_client: Client, chat: Conversation
) -> None:
    response = admin_client.get(f"{CONVERSATIONS}{chat.pk}/change/")

    assert response.status_code == 200
    shown = [
        (row["role"], row["status"], row["text"], row["tool_calls_summary"])
        for row in inline_rows(response, "messages")
    ]
    assert shown == [
        ("User", "Complete", "ping", "-"),
        ("Assistant", "Complete", "pong for plain", "ping executed"),
        ("User", "Complete", "explode", "-"),
        (
            "Assistant",
            "Complete",
            "explode failed unexpectedly; the error has been logged.",
            "explode failed",
        ),
    ]
    assert 'name="messages-0-text"' not in response.content.decode()


def test_a_conversation_links_to_its_audit_entries(
    admin_client: Client, chat: Conversation, history: History
) -> None:
    page = admin_client.get(f"{CONVERSATIONS}{chat.pk}/change/").content.decode()
    link = f"{AUDIT}?q={chat.pk}"

    assert f'href="{link}"' in page
    assert operations(admin_client.get(link)) == ["explode", "ping"]
    assert {entry.conversation_id for entry in AuditEntry.objects.filter(operation="ping")} == {
        chat.pk,
        history.conversation.pk,
    }


def test_the_conversation_list_shows_user_title_and_message_count(
    admin_client: Client, chat: Conversation
) -> None:
    rows = result_rows(admin_client.get(CONVERSATIONS))

    assert [(row.text("title"), row.text("user"), row.text("message_count")) for row in rows] == [
        (chat.title, "plain", "4")
    ]
    assert rows[0].link == f"{CONVERSATIONS}{chat.pk}/change/"


# -- approvals ------------------------------------------------------------------------------------


@pytest.fixture
def approvals(clerk: Any) -> dict[str, PendingAction]:
    order = Order.objects.create(reference="ORD-7")

    def opened(ttl: float) -> PendingAction:
        return PendingAction.open(
            user=clerk,
            operation="approve_order",
            entities={"order_id": order.pk},
            ttl_seconds=ttl,
        )

    waiting = opened(600)
    lapsed = opened(-1)  # still pending, past its expiry
    marked = opened(-1)
    with pytest.raises(ActionExpired):
        PendingAction.decide(marked.pk, clerk, "confirmed")
    confirmed = PendingAction.decide(opened(600).pk, clerk, "confirmed")
    cancelled = PendingAction.decide(opened(600).pk, clerk, "cancelled")
    return {
        "waiting": waiting,
        "lapsed": lapsed,
        "marked": marked,
        "confirmed": confirmed,
        "cancelled": cancelled,
    }


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ("waiting", {"waiting"}),
        ("expired", {"lapsed", "marked"}),
        ("decided", {"confirmed", "cancelled"}),
        ("", {"waiting", "lapsed", "marked", "confirmed", "cancelled"}),
    ],
)
def test_the_approvals_view_separates_waiting_expired_and_decided(
    admin_client: Client, approvals: dict[str, PendingAction], state: str, expected: set[str]
) -> None:
    response = admin_client.get(APPROVALS, {"state": state} if state else {})

    names = {f"{APPROVALS}{action.pk}/change/": name for name, action in approvals.items()}
    assert response.status_code == 200
    assert {names[row.link] for row in result_rows(response)} == expected


def test_the_approvals_view_shows_who_decided_and_a_coloured_status(
    admin_client: Client, approvals: dict[str, PendingAction]
) -> None:
    rows = {row.link: row for row in result_rows(admin_client.get(APPROVALS))}

    def row(name: str) -> Row:
        return rows[f"{APPROVALS}{approvals[name].pk}/change/"]

    assert row("confirmed").text("decided_by") == "clerk"
    assert row("confirmed").text("decided_at") != "-"
    assert row("confirmed").text("coloured_status") == "confirmed"
    assert row("cancelled").text("coloured_status") == "cancelled"
    assert row("waiting").text("coloured_status") == "pending"
    assert row("waiting").text("decided_by") == "-"
    assert row("lapsed").text("coloured_status") == "expired"
    assert row("marked").text("coloured_status") == "expired"


# -- jobs -----------------------------------------------------------------------------------------


def job(status: str, **fields: Any) -> Job:
    return Job.objects.create(
        operation="start_job", function="tests.testapp.jobs.count_orders", status=status, **fields
    )


def test_cancel_stops_a_queued_job_and_asks_a_running_one_to_stop(
    admin_client: Client,
) -> None:
    queued, running = job("queued"), job("running", started_at=timezone.now())
    finished = job("succeeded")

    response = admin_client.post(
        JOBS,
        {"action": "cancel_jobs", "_selected_action": [queued.pk, running.pk]},
        follow=True,
    )

    assert response.redirect_chain == [(JOBS, 302)]
    assert "Asked 2 job(s) to stop." in page_text(response)
    queued.refresh_from_db()
    running.refresh_from_db()
    finished.refresh_from_db()
    assert (queued.status, queued.cancel_requested) == ("cancelled", True)
    assert queued.finished_at is not None
    assert (running.status, running.cancel_requested) == ("running", True)
    assert (finished.status, finished.cancel_requested) == ("succeeded", False)


def test_cancelling_jobs_is_audited_as_an_admin_action(
    admin_client: Client, superuser: Any
) -> None:
    queued, running = job("queued"), job("running")

    admin_client.post(JOBS, {"action": "cancel_jobs", "_selected_action": [queued.pk, running.pk]})

    entries = AuditEntry.objects.filter(operation="cancel_job").order_by("id")
    assert [
        (entry.source, entry.decision, entry.domain, entry.username, entry.user_id)
        for entry in entries
    ] == [("admin", "executed", "jobs", "root", superuser.pk)] * 2
    assert sorted(entry.entities["job"] for entry in entries) == sorted(
        [str(queued.pk), str(running.pk)]
    )
    assert {entry.request_ip for entry in entries} == {"127.0.0.1"}


def test_staff_who_may_only_view_jobs_are_not_offered_cancel(helpdesk: Any) -> None:
    queued = job("queued")
    client = client_for(helpdesk, Client)

    page = client.get(JOBS).content.decode()
    posted = client.post(JOBS, {"action": "cancel_jobs", "_selected_action": [queued.pk]})

    assert "cancel_jobs" not in page
    assert posted.status_code == 200
    queued.refresh_from_db()
    assert (queued.status, queued.cancel_requested) == ("queued", False)
    assert not AuditEntry.objects.filter(operation="cancel_job").exists()


def test_the_job_list_shows_status_progress_and_error(admin_client: Client) -> None:
    failed = job(
        "failed",
        progress=40,
        error="RuntimeError: boom\nTraceback (most recent call last): ...",
        started_at=timezone.now() - timedelta(seconds=3),
        finished_at=timezone.now(),
    )

    (row,) = result_rows(admin_client.get(JOBS))

    assert row.link == f"{JOBS}{failed.pk}/change/"
    assert row.text("coloured_status") == "failed"
    assert '<progress max="100" value="40"></progress> 40%' in row.cells["progress_bar"]
    assert row.text("duration") == "3.0 s"
    assert row.text("short_error") == "RuntimeError: boom"


# -- validation -----------------------------------------------------------------------------------


@pytest.fixture
def access_task() -> ValidationTask:
    """A task whose one rule fails: it expects a role that does not exist."""
    return ValidationTaskService.create_task(
        name="Access matrix",
        target="testapp.Order",
        rules=[{"name": "tool_access_matrix", "options": {"roles": {"ghosts": []}}}],
    )


def test_run_now_runs_the_task_and_audits_it(
    admin_client: Client,
    superuser: Any,
    access_task: ValidationTask,
    django_capture_on_commit_callbacks: Any,
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post(
            TASKS, {"action": "run_now", "_selected_action": [access_task.pk]}, follow=True
        )

    assert response.redirect_chain == [(TASKS, 302)]
    assert "Started 1 run(s)." in page_text(response)
    run = ValidationRun.objects.get(task=access_task)
    assert (run.status, run.passed, run.failed, run.warned) == ("failed", 0, 1, 0)
    assert (run.triggered_by, run.triggered_by_user) == ("user", superuser)
    entry = AuditEntry.objects.get(operation="validation_run")
    assert (entry.source, entry.decision, entry.domain, entry.username) == (
        "admin",
        "executed",
        "validation",
        "root",
    )
    assert entry.entities == {"task": access_task.pk, "run": run.pk}


def test_staff_without_the_run_permission_are_not_offered_run_now(
    auditor: Any, access_task: ValidationTask
) -> None:
    client = client_for(auditor, Client)

    page = client.get(TASKS).content.decode()
    posted = client.post(TASKS, {"action": "run_now", "_selected_action": [access_task.pk]})

    assert "run_now" not in page
    assert posted.status_code == 200
    assert not ValidationRun.objects.exists()
    assert not AuditEntry.objects.exists()


def test_the_task_page_charts_the_pass_rate_of_its_finished_runs(
    admin_client: Client, access_task: ValidationTask
) -> None:
    start = timezone.now() - timedelta(hours=1)
    made = [
        ("passed", 3, 0, 0),
        ("failed", 1, 1, 0),
        ("warned", 0, 0, 2),
        ("errored", 0, 0, 0),
        ("running", 0, 0, 0),
        ("queued", 0, 0, 0),
    ]
    runs = [
        ValidationRun.objects.create(
            task=access_task,
            status=status,
            passed=passed,
            failed=failed,
            warned=warned,
            created_at=start + timedelta(minutes=index),
        )
        for index, (status, passed, failed, warned) in enumerate(made)
    ]

    page = admin_client.get(f"{TASKS}{access_task.pk}/change/").content.decode()

    chart = re.search(r'<svg width="(\d+)" height="64"[^>]*>(.*?)</svg>', page, re.S)
    assert chart is not None
    bars = re.findall(r'<rect [^>]*fill="([^"]+)"><title>([^<]+)</title></rect>', chart.group(2))
    assert bars == [
        ("#127a3c", f"run {runs[0].pk}: 100%"),
        ("#9a6700", f"run {runs[1].pk}: 50%"),
        ("#b42318", f"run {runs[2].pk}: 0%"),
        ("#b42318", f"run {runs[3].pk}: 0%"),
    ]
    assert chart.group(1) == str(4 * 14)


def test_a_task_without_finished_runs_says_so(
    admin_client: Client, access_task: ValidationTask
) -> None:
    ValidationRun.objects.create(task=access_task, status="queued")

    page = page_text(admin_client.get(f"{TASKS}{access_task.pk}/change/"))

    assert "No finished runs yet." in page
    assert 'aria-label="pass rate per run"' not in page


def test_a_run_shows_its_counts_and_findings(
    admin_client: Client, access_task: ValidationTask
) -> None:
    run = ValidationRun.objects.create(task=access_task, status="warned", passed=1, warned=1)
    ValidationFinding.objects.create(run=run, rule="r", outcome="pass", message="all good")
    ValidationFinding.objects.create(run=run, rule="r", outcome="warn", message="look here")

    (row,) = result_rows(admin_client.get(RUNS))
    detail = admin_client.get(f"{RUNS}{run.pk}/change/")

    assert [row.text(field) for field in ("coloured_status", "passed", "failed", "warned")] == [
        "warned",
        "1",
        "0",
        "1",
    ]
    assert "background:#9a6700" in row.cells["coloured_status"]
    assert [
        (finding["rule"], finding["coloured_outcome"], finding["message"])
        for finding in inline_rows(detail, "findings")
    ] == [("r", "passed", "all good"), ("r", "warned", "look here")]


# -- tool inventory -------------------------------------------------------------------------------


def inventory_rows(response: Any) -> dict[str, str]:
    """operation → the row's HTML."""
    return dict(
        re.findall(
            r'<tr class="tool-row" data-operation="([^"]+)">(.*?)</tr>',
            response.content.decode(),
            re.S,
        )
    )


def visibility(response: Any) -> dict[str, str]:
    """operation → what the "visible to" column says (empty without that column)."""
    answers = {}
    for operation, row in inventory_rows(response).items():
        cell = re.search(r'<td class="visibility">(.*?)</td>', row, re.S)
        if cell is not None:
            answers[operation] = strip_tags(cell[1])
    return answers


def test_the_inventory_lists_every_registered_operation(admin_client: Client) -> None:
    response = admin_client.get(INVENTORY)

    rows = inventory_rows(response)
    assert response.status_code == 200
    assert sorted(rows) == sorted(tool.operation for tool in registry)
    approve = html.unescape(re.sub(r"<[^>]+>", "|", rows["approve_order"]))
    assert [cell for cell in approve.split("|") if cell.strip()] == [
        "approve_order",
        "orders",
        "guarded",
        "asks first",
        "testapp.approve_order",
        "—",
        "tests.testapp.assistant_tools",
    ]
    assert "<th>visible to" not in response.content.decode()


def test_explaining_for_a_user_shows_what_they_see_and_why_not(
    admin_client: Client, reader: Any
) -> None:
    response = admin_client.get(INVENTORY, {"user": "reader"})

    seen = visibility(response)
    assert seen["ping"] == "yes"
    assert seen["list_orders"] == "yes"
    assert seen["show_report"] == "yes"
    assert seen["export_orders"] == "yes"
    assert seen["approve_order"] == "no — missing permission testapp.approve_order"
    assert seen["store_secret"] == "no — missing permission assistant.vault_write"
    assert seen["merge_orders"] == (
        "no — missing permission testapp.change_order; missing permission testapp.delete_order"
    )
    visible = sum(1 for answer in seen.values() if answer == "yes")
    assert f"{visible} of {len(seen)} tools visible to reader" in strip_tags(
        response.content.decode()
    )


def test_explaining_for_an_unknown_user_says_so(admin_client: Client) -> None:
    response = admin_client.get(INVENTORY, {"user": "ghost"})

    assert response.status_code == 200
    assert "No user named “ghost”." in page_text(response)
    assert len(inventory_rows(response)) == len(list(registry))
    assert visibility(response) == {}


# -- retention -----------------------------------------------------------------------------------


@pytest.fixture
def aged() -> dict[str, AuditEntry]:
    now = timezone.now()
    return {
        name: audit_at(now - timedelta(days=days), name)
        for name, days in (("ancient", 400), ("old", 31), ("recent", 29), ("today", 0))
    }


def prune(*args: str) -> str:
    out = io.StringIO()
    call_command("assistant_prune_audit", *args, stdout=out)
    return out.getvalue()


def test_a_dry_run_counts_and_deletes_nothing(aged: dict[str, AuditEntry]) -> None:
    output = prune("--older-than-days", "30", "--dry-run")

    assert output.startswith("Would delete 2 audit entries older than ")
    assert AuditEntry.objects.count() == 4


def test_pruning_deletes_only_the_older_entries(aged: dict[str, AuditEntry]) -> None:
    output = prune("--older-than-days", "30")

    assert output.startswith("Deleted 2 audit entries older than ")
    assert sorted(AuditEntry.objects.values_list("operation", flat=True)) == ["recent", "today"]


@pytest.mark.parametrize("days", ["0", "-5"])
def test_pruning_needs_at_least_one_day(aged: dict[str, AuditEntry], days: str) -> None:
    with pytest.raises(CommandError, match="--older-than-days must be at least 1"):
        prune(f"--older-than-days={days}")

    assert AuditEntry.objects.count() == 4


def test_pruning_needs_an_age(aged: dict[str, AuditEntry]) -> None:
    with pytest.raises(CommandError, match="--older-than-days"):
        prune()

    assert AuditEntry.objects.count() == 4
