"""The channels-redis layers a site may run on, configured as config/settings.py configures them.

Kept free of Django imports: the settings of the server processes that tests start use it too.
"""

from __future__ import annotations

from typing import Any

REDIS_CHANNEL_LAYERS = {
    "core": "channels_redis.core.RedisChannelLayer",
    "pubsub": "channels_redis.pubsub.RedisPubSubChannelLayer",
}


def redis_channel_layer(kind: str, url: str, prefix: str) -> dict[str, Any]:
    """``CHANNEL_LAYERS["default"]`` for one of the channels-redis layers."""
    config: dict[str, Any] = {
        # redis-py 8's default 5 s read timeout breaks a blocking receive on an idle socket
        "hosts": [{"address": url, "socket_timeout": None, "max_connections": 1000}],
        # one prefix per test, so parallel runs never hear each other's groups
        "prefix": prefix,
    }
    if kind == "core":
        # every socket of a process shares one queue there: 100 (the default) drops events
        config["capacity"] = 5000
    return {"BACKEND": REDIS_CHANNEL_LAYERS[kind], "CONFIG": config}
