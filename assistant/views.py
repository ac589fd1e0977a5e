"""The chat page: a template and one script; everything else speaks over the websocket and API."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from .conf import assistant_settings


@login_required
def chat(request: HttpRequest) -> HttpResponse:
    return render(
        request,
        "assistant/chat.html",
        {
            "websocket_path": assistant_settings.WEBSOCKET_PATH,
            "max_length": assistant_settings.MAX_MESSAGE_LENGTH,
        },
    )
