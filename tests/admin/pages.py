"""What the admin tests share: the pages' paths, how to read what they render, records."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from assistant.models import AuditEntry, Conversation

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
TOKENS = "/admin/assistant/accesstoken/"
CHANGE_PAGES = {  # a record of the ``world`` fixture → its changelist
    "entry": AUDIT,
    "conversation": CONVERSATIONS,
    "action": APPROVALS,
    "job": JOBS,
    "task": TASKS,
    "run": RUNS,
    "token": TOKENS,
}
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
    "client",
    "arrival",
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


@dataclass
class History:
    conversation: Conversation
    entries: dict[str, AuditEntry]  # by operation


NEWEST_FIRST = [
    "cancel_order",
    "store_secret",
    "approve_order",
    "list_orders",
    "explode",
    "ping",
]


def at(day: int, hour: int, month: int = 3, year: int = 2025) -> datetime:
    return datetime(year, month, day, hour, tzinfo=UTC)


def audit_at(moment: datetime, operation: str) -> AuditEntry:
    return AuditEntry.objects.create(
        created_at=moment, operation=operation, decision="executed", domain="diagnostics"
    )
