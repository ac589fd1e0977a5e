"""Test settings for server processes that share one conversation: Redis channel layer and event log."""

import os

from tests.channel_layers import redis_channel_layer
from tests.settings import *  # noqa: F403
from tests.settings import ASSISTANT, DATABASES

REDIS_URL = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"
CHANNEL_LAYERS = {
    # "core" or "pubsub", as config/settings.py reads it; the prefix is the test's own
    "default": redis_channel_layer(
        os.environ.get("ASSISTANT_CHANNEL_LAYER", "pubsub"),
        REDIS_URL,
        os.environ.get("ASSISTANT_CHANNEL_PREFIX", "asgi"),
    )
}
ASSISTANT = {**ASSISTANT, "EVENT_LOG": REDIS_URL, "EVENT_LOG_TTL": 600}

# What a test of connection use sets: connections kept as a deployment keeps them, lanes that
# close theirs sooner than the default.
if os.environ.get("ASSISTANT_TEST_CONN_MAX_AGE"):
    DATABASES["default"]["CONN_MAX_AGE"] = int(os.environ["ASSISTANT_TEST_CONN_MAX_AGE"])
if os.environ.get("ASSISTANT_LANE_IDLE_CLOSE"):
    ASSISTANT["LANE_IDLE_CLOSE"] = float(os.environ["ASSISTANT_LANE_IDLE_CLOSE"])
