"""Websocket routes: add ``websocket_urlpatterns`` to the project's ASGI ``URLRouter``."""

from django.urls import path

from .conf import assistant_settings
from .surfaces.websocket import AssistantConsumer

# The chat page connects to WEBSOCKET_PATH: the route is that path, so the two cannot drift.
websocket_urlpatterns = [
    path(str(assistant_settings.WEBSOCKET_PATH).removeprefix("/"), AssistantConsumer.as_asgi()),
]
