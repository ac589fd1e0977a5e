"""The chat page: a template and one script; everything else speaks over the websocket and API."""

from __future__ import annotations

import math
import uuid
from typing import Any

from django.contrib import admin
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import REDIRECT_FIELD_NAME
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import NON_FIELD_ERRORS
from django.forms.utils import ErrorDict
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render, resolve_url
from django.urls import NoReverseMatch, reverse
from django.utils.translation import gettext as _

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
            "home_url": home_url(),
            # the names people read for the tools this user may call (cards, jobs, approvals)
            "tool_titles": {tool.operation: tool.title for tool in visible_tools(request.user)},
        },
    )
    response.headers["Content-Security-Policy"] = CHAT_CONTENT_SECURITY_POLICY
    return response


def home_url() -> str | None:
    """Where the header's Home link goes: ``HOME_URL`` resolved like ``LOGIN_URL``, or nowhere."""
    configured = assistant_settings.HOME_URL
    return resolve_url(configured) if configured else None


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


class ThrottledSignIn(auth_views.LoginView):
    """Django's sign-in, throttled per account and per client address (``assistant.signin``)."""

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
        form = self.get_form_class()(self.request)
        # an unbound form with the message as its one error: any sign-in template shows it
        form._errors = ErrorDict(  # type: ignore[attr-defined]
            {NON_FIELD_ERRORS: form.error_class([signin.locked_message(minutes)], "nonfield")}
        )
        context = self.get_context_data(form=form, locked=minutes)
        response = self.render_to_response(context, status=429)
        response.headers["Retry-After"] = str(math.ceil(wait))
        return response


class LoginView(ThrottledSignIn):
    """Django's sign-in with the app's own template, so a project needs no login page of its own."""

    template_name = "assistant/login.html"

    def get_default_redirect_url(self) -> str:
        """Without ``?next=``, the chat rather than the project's ``LOGIN_REDIRECT_URL``."""
        return reverse("assistant:chat")


class LogoutView(auth_views.LogoutView):
    """Django's sign-out (a POST with its CSRF token), back to the app's own sign-in page."""

    def get_default_redirect_url(self) -> str:
        """Without ``?next=``, the app's sign-in page rather than the project's ``LOGOUT_REDIRECT_URL``."""
        return reverse("assistant:login")


class AdminLoginView(ThrottledSignIn):
    """The admin site's sign-in page, throttled as the app's: route ``admin/login/`` here, before
    ``admin.site.urls`` (the admin's own page counts nothing)."""

    template_name = "admin/login.html"
    authentication_form = AdminAuthenticationForm
    site = admin.site

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = {
            **self.site.each_context(self.request),
            "title": _("Log in"),
            "subtitle": None,
            "app_path": self.request.get_full_path(),
            "username": self.request.user.get_username(),
            **super().get_context_data(**kwargs),
        }
        if (
            REDIRECT_FIELD_NAME not in self.request.GET
            and REDIRECT_FIELD_NAME not in self.request.POST
        ):
            context[REDIRECT_FIELD_NAME] = reverse("admin:index", current_app=self.site.name)
        return context

    def get_default_redirect_url(self) -> str:
        return reverse("admin:index", current_app=self.site.name)
