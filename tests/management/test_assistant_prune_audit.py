"""assistant_prune_audit: deletes audit entries older than a number of days, or counts them."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from assistant.models import AuditEntry
from tests.admin.pages import audit_at

pytestmark = pytest.mark.django_db


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
