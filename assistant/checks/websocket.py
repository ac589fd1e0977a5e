"""Something serves the chat's websocket where the page expects it (E018, W013, W014)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register
from django.core.handlers.asgi import ASGIHandler

from ..conf import assistant_settings

ASGI_SERVER_APPS = ("daphne",)  # apps whose runserver serves ASGI (websockets)


@register("assistant")
def check_websocket_served(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """assistant.W013/E018/W014: something serves the chat's websocket where the page expects."""
    return websocket_problems(
        list(settings.INSTALLED_APPS),
        getattr(settings, "ASGI_APPLICATION", None),
        str(assistant_settings.WEBSOCKET_PATH),
    )


def websocket_problems(
    installed: list[str], asgi_application: Any, path: str
) -> list[CheckMessage]:
    """What keeps these INSTALLED_APPS and ASGI_APPLICATION from serving a websocket at ``path``."""
    from django.utils.module_loading import import_string

    served_by = [name for name in installed if name.split(".")[0] in ASGI_SERVER_APPS]
    if not served_by:
        return [
            Warning(
                f"No ASGI server app is in INSTALLED_APPS: manage.py runserver serves WSGI, and "
                f"the chat's websocket ({path}) is never served.",
                hint="Put 'daphne' first in INSTALLED_APPS; silence assistant.W013 if an ASGI "
                "server (daphne, uvicorn) runs the project outside runserver.",
                id="assistant.W013",
            )
        ]
    hint = (
        "Set ASGI_APPLICATION = 'yourproject.asgi.application', a ProtocolTypeRouter whose "
        "'websocket' is URLRouter(assistant.routing.websocket_urlpatterns) (see the README)."
    )
    if not asgi_application:
        return [
            Error(
                f"{served_by[0]} is installed, but ASGI_APPLICATION is not set: runserver cannot "
                f"start an ASGI server, and the chat's websocket ({path}) is never served.",
                hint=hint,
                id="assistant.E018",
            )
        ]
    try:
        application = import_string(str(asgi_application))
    except ImportError as error:
        return [
            Error(
                f"ASGI_APPLICATION {asgi_application!r} cannot be imported ({error}).",
                hint=hint,
                id="assistant.E018",
            )
        ]
    if _routes_websocket(application, path.removeprefix("/")) is False:
        return [
            Warning(
                f"ASGI_APPLICATION {asgi_application!r} routes no websocket to {path}, where the "
                "chat page connects.",
                hint=hint + " Or set ASSISTANT['WEBSOCKET_PATH'] to the path you route.",
                id="assistant.W014",
            )
        ]
    return []


def _routes_websocket(application: Any, path: str, depth: int = 0) -> bool | None:
    """Whether ``application`` routes a websocket at ``path``; None when it cannot be told."""
    if depth > 12:
        return None
    if isinstance(application, ASGIHandler):
        return False  # Django's own handler: HTTP only
    mapping = getattr(application, "application_mapping", None)
    if isinstance(mapping, dict):  # channels' ProtocolTypeRouter
        if "websocket" not in mapping:
            return False
        return _routes_websocket(mapping["websocket"], path, depth + 1)
    routes = getattr(application, "routes", None)
    if isinstance(routes, list | tuple):  # channels' URLRouter
        return any(_route_matches(route, path, depth) for route in routes)
    for attribute in ("application", "inner", "app"):  # middleware wrapping another application
        inner = getattr(application, attribute, None)
        if inner is not None and inner is not application:
            return _routes_websocket(inner, path, depth + 1)
    return None


def _route_matches(route: Any, path: str, depth: int) -> bool:
    pattern = getattr(route, "pattern", None)
    match = pattern.match(path) if pattern is not None else None
    if match is None:
        return False
    inner = getattr(route, "callback", None)
    if isinstance(getattr(inner, "routes", None), list | tuple):  # a nested URLRouter
        return _routes_websocket(inner, match[0], depth + 1) is not False
    return True
