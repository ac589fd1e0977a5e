"""The audit admin: its changelist, filters, date hierarchy and paging, an entry, the export."""

from __future__ import annotations

import csv
import html
import io
import json
import re
import warnings
from datetime import UTC, datetime
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from asgiref.testing import ApplicationCommunicator
from django.db import connection
from django.http import StreamingHttpResponse
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from assistant.core.registry import registry
from assistant.dispatch.door import dispatch
from assistant.models import AuditEntry, Job
from tests.admin.pages import (
    APPROVALS,
    AUDIT,
    CONVERSATIONS,
    EXPORT_FIELDS,
    JOBS,
    LOGIN,
    NEWEST_FIRST,
    SECRET,
    History,
    at,
    audit_at,
    operations,
    page_text,
    result_rows,
)
from tests.clients import client_for

pytestmark = pytest.mark.django_db


# -- the audit changelist ------------------------------------------------------------------------


def test_the_audit_lists_newest_first_with_who_what_and_how_it_went(
    admin_client: Client, history: History
) -> None:
    response = admin_client.get(AUDIT)

    rows = result_rows(response)
    assert [row.text("operation") for row in rows] == NEWEST_FIRST
    explode = rows[NEWEST_FIRST.index("explode")]
    assert {field: explode.text(field) for field in ("when", "username", "coloured_decision")} == {
        "when": f"{timezone.localtime(history.entries['explode'].created_at):%Y-%m-%d %H:%M:%S}",
        "username": "plain",
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
        "client": "",
        "arrival": "",
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
