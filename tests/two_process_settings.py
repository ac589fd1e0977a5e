"""Test settings for server processes that share one conversation: Redis channel layer and event log."""

import os

from tests.settings import *  # noqa: F403
from tests.settings import ASSISTANT

REDIS_URL = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {
            # as a production site sets it (see config/settings.py): redis-py 8's default 5 s
            # read timeout would break the layer's blocking receive on an idle socket
            "hosts": [{"address": REDIS_URL, "socket_timeout": None, "max_connections": 1000}],
            "capacity": 5000,
            # one prefix per test, so parallel runs never hear each other's groups
            "prefix": os.environ.get("ASSISTANT_CHANNEL_PREFIX", "asgi"),
        },
    }
}
ASSISTANT = {**ASSISTANT, "EVENT_LOG": REDIS_URL, "EVENT_LOG_TTL": 600}
