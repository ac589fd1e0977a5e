"""When a validation task runs: an interval or a cron expression, and its next slot."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from ..exceptions import InvalidEntities
from ..models import ValidationTask
from .targets import _unstorable

logger = logging.getLogger("assistant.validation")


MAX_INTERVAL = 366 * 86400  # seconds; longer intervals are a cron expression's job
MAX_CRON = 100  # ValidationTask.cron's max_length


def next_run(task: ValidationTask, after: datetime) -> datetime | None:
    """When the task runs next after ``after``; ``None`` for no schedule or one that never fires."""
    if task.schedule == ValidationTask.Schedule.INTERVAL and task.interval_seconds:
        return after + timedelta(seconds=min(task.interval_seconds, MAX_INTERVAL))
    if task.schedule == ValidationTask.Schedule.CRON and task.cron:
        try:
            return _next_cron(task.cron, after)
        except InvalidEntities:
            logger.warning("Validation task %s has a cron that never fires: %r", task.pk, task.cron)
    return None


def _next_cron(expression: str, after: datetime) -> datetime:
    from croniter import croniter

    try:
        if croniter.is_valid(expression):
            moment: datetime = croniter(expression, after).get_next(datetime)
            return moment
    except (ValueError, KeyError, TypeError, OverflowError):  # croniter's errors are ValueErrors
        pass
    raise InvalidEntities({"schedule": f"{expression!r} is not a cron expression that fires"})


def parse_schedule(schedule: Any) -> dict[str, Any]:
    """None, seconds / a timedelta (interval), or a cron expression."""
    if schedule in (None, "", "none"):
        return {"schedule": ValidationTask.Schedule.NONE}
    if isinstance(schedule, timedelta):
        schedule = int(schedule.total_seconds())
    if isinstance(schedule, int) and not isinstance(schedule, bool) and schedule > 0:
        if schedule > MAX_INTERVAL:
            raise InvalidEntities({"schedule": f"an interval is at most {MAX_INTERVAL} seconds"})
        return {"schedule": ValidationTask.Schedule.INTERVAL, "interval_seconds": schedule}
    if isinstance(schedule, str) and len(schedule) <= MAX_CRON and not _unstorable(schedule):
        _next_cron(schedule, timezone.now())
        return {"schedule": ValidationTask.Schedule.CRON, "cron": schedule}
    raise InvalidEntities(
        {"schedule": "expected seconds, a timedelta or a cron expression such as '0 3 * * *'"}
    )
