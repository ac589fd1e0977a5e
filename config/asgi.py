"""ASGI entry point: HTTP through Django, the assistant's websocket behind auth and origin checks."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from assistant.core.lifecycle import LifespanMiddleware  # noqa: E402
from assistant.routing import websocket_urlpatterns  # noqa: E402

# LifespanMiddleware starts process-scoped toolsets at startup and stops them at shutdown on
# servers that speak ASGI lifespan (uvicorn); elsewhere they start on first use.
application = LifespanMiddleware(
    ProtocolTypeRouter(
        {
            "http": django_asgi_app,
            "websocket": AllowedHostsOriginValidator(
                AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
            ),
        }
    )
)
