"""The audit trail read back, oldest first: what was decided about each call of an operation, and
which operations were called, decided and from where."""

from __future__ import annotations

from assistant.models import AuditEntry


def decisions(operation: str) -> list[str]:
    return list(
        AuditEntry.objects.filter(operation=operation)
        .order_by("pk")
        .values_list("decision", flat=True)
    )


def audited() -> list[tuple[str, str, str]]:
    return list(AuditEntry.objects.order_by("id").values_list("operation", "decision", "source"))
