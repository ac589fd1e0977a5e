"""Test settings for server processes killed mid-turn: the LLM planner on a test peer, quick heartbeats."""

import os

from tests.two_process_settings import *  # noqa: F403
from tests.two_process_settings import ASSISTANT

ASSISTANT = {
    **ASSISTANT,
    "PLANNER": "llm",
    # the peer of the test that starts the server; a long chunk timeout: the model is slow on purpose
    "LLM": {"BASE_URL": os.environ.get("ASSISTANT_TEST_LLM_URL", ""), "MODEL": "test-model"}
    | {"TIMEOUT": 60},
    "TURN_HEARTBEAT": float(os.environ.get("ASSISTANT_TURN_HEARTBEAT", "0.5")),
    "TURN_STALE_AFTER": float(os.environ.get("ASSISTANT_TURN_STALE_AFTER", "2")),
}
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"stderr": {"class": "logging.StreamHandler"}},
    "loggers": {"assistant": {"handlers": ["stderr"], "level": "INFO", "propagate": False}},
}
