"""The chat page: a template and one script; everything else speaks over the websocket and API."""

from __future__ import annotations

from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse

from .conf import assistant_settings


@login_required  # signed-out users go to settings.LOGIN_URL ("assistant:login" works anywhere)
def chat(request: HttpRequest) -> HttpResponse:
    return render(
        request,
        "assistant/chat.html",
        {
            "websocket_path": assistant_settings.WEBSOCKET_PATH,
            "max_length": assistant_settings.MAX_MESSAGE_LENGTH,
        },
    )


class LoginView(auth_views.LoginView):
    """Django's sign-in with the app's own template, so a project needs no login page of its own."""

    template_name = "assistant/login.html"

    def get_default_redirect_url(self) -> str:
        """Without ``?next=``, the chat rather than the project's ``LOGIN_REDIRECT_URL``."""
        return reverse("assistant:chat")
