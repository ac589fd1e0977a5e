"""Background work of the demo's tools, run by `manage.py db_worker`."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import get_user_model

from assistant.cancellation import Cancelled
from assistant.jobs import JobContext


def build_user_report(job: JobContext, pause: float = 0.5) -> str:
    """Count accounts, one user at a time (slowly enough to watch the progress bar)."""
    anonymous = getattr(settings, "ANONYMOUS_USER_NAME", "AnonymousUser")
    users = list(get_user_model()._default_manager.exclude(username=anonymous).order_by("pk"))
    active = staff = 0
    for index, user in enumerate(users, start=1):
        active += user.is_active
        staff += user.is_staff
        job.report(100 * index / max(len(users), 1), f"checked {user.get_username()}")
        if job.cancel.wait(pause):  # a Cancel ends the pause at once, not after it
            raise Cancelled("The user report was cancelled.")
    return f"{len(users)} accounts: {active} active, {staff} staff."
