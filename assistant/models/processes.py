"""The server processes that run turns, known by their heartbeats."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _


class ServerProcess(models.Model):
    """A server process that runs turns, by its heartbeat: one row per process, not per turn."""

    name = models.CharField(max_length=64, primary_key=True, verbose_name=_("name"))
    host = models.CharField(max_length=255, blank=True, verbose_name=_("host"))
    pid = models.PositiveIntegerField(default=0, verbose_name=_("PID"))
    started_at = models.DateTimeField(default=timezone.now, verbose_name=_("started at"))
    beat_at = models.DateTimeField(
        default=timezone.now, db_index=True, verbose_name=_("last heartbeat at")
    )
    # the oldest turn running at the last beat (None: none was): where its turns begin
    oldest_turn_at = models.DateTimeField(null=True, blank=True, verbose_name=_("oldest turn at"))
    # the runs with no message of their own (answering an action, an AG-UI client's tool
    # results) going at the last beat: [{"conversation", "run", "reply", "started_at"}]
    runs = models.JSONField(
        default=list, blank=True, encoder=DjangoJSONEncoder, verbose_name=_("runs")
    )

    class Meta:
        verbose_name = _("server process")
        verbose_name_plural = _("server processes")
        ordering = ["-beat_at"]

    def __str__(self) -> str:
        return f"{self.host}:{self.pid}"

    @classmethod
    def beat(
        cls,
        name: str,
        *,
        host: str,
        pid: int,
        started_at: datetime,
        oldest_turn_at: Any = None,
        runs: list[dict[str, Any]] | None = None,
    ) -> None:
        """Say this process is alive (its row comes back if a reaper took it for dead)."""
        now = timezone.now()
        fields = {"beat_at": now, "oldest_turn_at": oldest_turn_at, "runs": runs or []}
        if not cls.objects.filter(name=name).update(**fields):
            cls.objects.update_or_create(
                name=name,
                defaults={"host": host[:255], "pid": pid, "started_at": started_at, **fields},
            )

    def turns_since(self, margin: timedelta) -> datetime:
        """Where the turns it may have left running begin (its clock, ``margin`` earlier)."""
        oldest = self.oldest_turn_at or self.beat_at
        return min(oldest, self.beat_at) - margin
