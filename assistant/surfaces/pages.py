"""The chat page: a template and one script; everything else speaks over the websocket and API."""

from __future__ import annotations

import math
import uuid
from typing import Any

from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.contrib.auth.forms import AuthenticationForm
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import NoReverseMatch, reverse

from ..access import signin
from ..conf import assistant_settings
from ..dispatch.catalog import visible_tools
from ..models import PendingAction

# Scripts and styles from this origin only (no inline script, no eval), nothing framed, posted or
# fetched elsewhere: text a tool echoes into the page can never run. 'self' covers the same-origin
# websocket in current browsers; the data: image is the page's empty favicon.
CHAT_CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)


def admin_url(request: HttpRequest) -> str | None:
    """Where the header's Admin link goes: for staff, when the project mounts the admin."""
    if not request.user.is_staff:
        return None
    try:
        return reverse("admin:index")
    except NoReverseMatch:
        return None


@login_required  # signed-out users go to settings.LOGIN_URL ("assistant:login" works anywhere)
def chat(request: HttpRequest) -> HttpResponse:
    response = render(
        request,
        "assistant/chat.html",
        {
            "websocket_path": assistant_settings.WEBSOCKET_PATH,
            "max_length": assistant_settings.MAX_MESSAGE_LENGTH,
            "admin_url": admin_url(request),
            # the names people read for the tools this user may call (cards, jobs, approvals)
            "tool_titles": {tool.operation: tool.title for tool in visible_tools(request.user)},
        },
    )
    response.headers["Content-Security-Policy"] = CHAT_CONTENT_SECURITY_POLICY
    return response


@login_required
def approvals(request: HttpRequest) -> HttpResponse:
    """The approvals inbox: every action waiting for this user's answer, answerable here.

    ``?action=<id>`` picks one out (the admin links there); an id that is not waiting for this
    user, or no id at all, just says so.
    """
    actions = list(
        PendingAction.objects.answerable_by(request.user)
        .select_related("user", "conversation")
        .order_by("created_at")
    )
    wanted = request.GET.get("action", "")
    try:
        focused = str(uuid.UUID(wanted)) if wanted else ""
    except ValueError:
        focused = None
    if focused and focused not in {str(action.pk) for action in actions}:
        focused = None
    response = render(
        request,
        "assistant/approvals.html",
        {
            "actions": actions,
            "cards": [action.shown() for action in actions],
            "focused": focused,
            "missing": focused is None,
            "websocket_path": assistant_settings.WEBSOCKET_PATH,
        },
    )
    response.headers["Content-Security-Policy"] = CHAT_CONTENT_SECURITY_POLICY
    return response


class LoginView(auth_views.LoginView):
    """Django's sign-in with the app's own template, so a project needs no login page of its own."""

    template_name = "assistant/login.html"

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        """A locked account or address is answered 429 before its password is even checked."""
        wait = signin.locked_for(self.username(), self.address())
        if wait:
            return self.locked_out(wait)
        return super().post(request, *args, **kwargs)

    def form_valid(self, form: AuthenticationForm) -> HttpResponse:
        signin.succeeded(self.username())
        return super().form_valid(form)

    def form_invalid(self, form: AuthenticationForm) -> HttpResponse:
        wait = signin.failed(self.username(), self.address())
        if wait:
            return self.locked_out(wait)
        return super().form_invalid(form)

    def username(self) -> str:
        return str(self.request.POST.get("username", ""))

    def address(self) -> str:
        return str(self.request.META.get("REMOTE_ADDR") or "")

    def locked_out(self, wait: float) -> HttpResponse:
        """The sign-in page, saying when to try again (the same for every username)."""
        minutes = max(1, math.ceil(wait / 60))
        context = self.get_context_data(form=self.get_form_class()(self.request), locked=minutes)
        response = self.render_to_response(context, status=429)
        response.headers["Retry-After"] = str(math.ceil(wait))
        return response

    def get_default_redirect_url(self) -> str:
        """Without ``?next=``, the chat rather than the project's ``LOGIN_REDIRECT_URL``."""
        return reverse("assistant:chat")


class LogoutView(auth_views.LogoutView):
    """Django's sign-out (a POST with its CSRF token), back to the app's own sign-in page."""

    def get_default_redirect_url(self) -> str:
        """Without ``?next=``, the app's sign-in page rather than the project's ``LOGOUT_REDIRECT_URL``."""
        return reverse("assistant:login")
