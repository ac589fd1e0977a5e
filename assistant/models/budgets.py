"""Language-model token budgets: a user's daily usage and the reservations calls hold."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import models, transaction
from django.utils import timezone
from django.utils.translation import gettext_lazy as _


class BudgetUsage(models.Model):
    """A user's language-model tokens on one day: what was spent, and what calls reserved."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="assistant_budget_usage",
        verbose_name=_("user"),
    )
    day = models.DateField(verbose_name=_("day"))
    spent_tokens = models.PositiveBigIntegerField(
        default=0, verbose_name=_("spent tokens")
    )  # settled: what the calls spent
    reserved_tokens = models.PositiveBigIntegerField(
        default=0, verbose_name=_("reserved tokens")
    )  # all the day's reservations
    calls = models.PositiveIntegerField(default=0, verbose_name=_("calls"))
    refusals = models.PositiveIntegerField(default=0, verbose_name=_("refusals"))
    updated_at = models.DateTimeField(default=timezone.now, verbose_name=_("updated at"))

    class Meta:
        ordering = ["-day", "user_id"]
        verbose_name = _("budget usage")
        verbose_name_plural = _("budget usage")
        constraints = [
            models.UniqueConstraint(fields=["user", "day"], name="assistant_budget_user_day")
        ]

    def __str__(self) -> str:
        return f"{self.user_id} on {self.day}"

    @classmethod
    def of(cls, user: Any, day: Any, spent_before: Callable[[], int]) -> BudgetUsage:
        """The user's row for ``day``, made when first needed (``spent_before`` seeds it)."""
        found = cls.objects.filter(user_id=user.pk, day=day).first()
        if found is not None:
            return found
        usage, _ = cls.objects.get_or_create(
            user_id=user.pk, day=day, defaults={"spent_tokens": spent_before()}
        )
        return usage

    def reserve(self, tokens: int, *, limit: int, ttl_seconds: float) -> BudgetReservation | None:
        """Hold ``tokens`` for one call while anything of the day's limit is left, else None."""
        now = timezone.now()
        with transaction.atomic():
            rows = BudgetUsage.objects.filter(pk=self.pk)
            # An UPDATE first: PostgreSQL locks the row, SQLite takes its write lock (in any
            # transaction mode), so one user's reservations are decided one after the other.
            rows.update(updated_at=now)
            spent = rows.values_list("spent_tokens", flat=True).get()
            if spent + self.held(now) >= limit:
                rows.update(refusals=models.F("refusals") + 1)
                return None
            rows.update(
                reserved_tokens=models.F("reserved_tokens") + tokens, calls=models.F("calls") + 1
            )
            # what crashed calls left (this day's or earlier): let go
            BudgetReservation.objects.filter(
                usage__user_id=self.user_id, expires_at__lte=now
            ).delete()
            return BudgetReservation.objects.create(
                usage=self,
                tokens=tokens,
                created_at=now,
                expires_at=now + timedelta(seconds=ttl_seconds),
            )

    def held(self, now: datetime | None = None) -> int:
        """Tokens the calls running now hold (a reservation past its expiry holds nothing)."""
        live = self.reservations.filter(expires_at__gt=now or timezone.now())
        return int(live.aggregate(held=models.Sum("tokens"))["held"] or 0)


class BudgetReservation(models.Model):
    """Tokens held from a day's budget for one model call while it runs; gone once settled."""

    usage = models.ForeignKey(
        BudgetUsage, on_delete=models.CASCADE, related_name="reservations", verbose_name=_("usage")
    )
    tokens = models.PositiveIntegerField(verbose_name=_("tokens"))
    created_at = models.DateTimeField(default=timezone.now, verbose_name=_("created at"))
    expires_at = models.DateTimeField(verbose_name=_("expires at"))

    class Meta:
        verbose_name = _("budget reservation")
        verbose_name_plural = _("budget reservations")
        ordering = ["created_at"]

    def __str__(self) -> str:
        return f"{self.tokens} tokens until {self.expires_at:%H:%M:%S}"

    def settle(self, spent: int) -> None:
        """Count what the call spent and let the reservation go, in one transaction."""
        with transaction.atomic():
            BudgetUsage.objects.filter(pk=self.usage_id).update(
                spent_tokens=models.F("spent_tokens") + spent, updated_at=timezone.now()
            )
            BudgetReservation.objects.filter(pk=self.pk).delete()
