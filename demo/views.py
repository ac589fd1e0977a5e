from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse

from assistant.dispatch.catalog import visible_tools


def home(request: HttpRequest) -> HttpResponse:
    if not request.user.is_authenticated:
        # signing in from the home page lands on the chat, the demo's point
        return redirect_to_login(reverse("assistant:chat"))
    tools = sorted(visible_tools(request.user), key=lambda t: (t.domain, t.operation))
    return render(request, "home.html", {"tools": tools})
