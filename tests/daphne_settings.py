"""Test settings for a daphne server process: the test project with a small output bound."""

import os

from tests.settings import *  # noqa: F403
from tests.settings import ASSISTANT

ASSISTANT = {
    **ASSISTANT,
    "SOCKET_MAX_PENDING_BYTES": int(
        os.environ.get("ASSISTANT_SOCKET_MAX_PENDING_BYTES", "1048576")
    ),
}
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"stderr": {"class": "logging.StreamHandler"}},
    "loggers": {"assistant": {"handlers": ["stderr"], "level": "INFO", "propagate": False}},
}
