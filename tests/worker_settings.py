"""Test settings for ``db_worker`` processes (and the tests that feed them): the database backend."""

from tests.settings import *  # noqa: F403
from tests.settings import ASSISTANT

TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
# a running job beats often, so a cancel reaches it (and a dead worker shows) within a second
ASSISTANT = {**ASSISTANT, "JOB_HEARTBEAT": 0.1}
