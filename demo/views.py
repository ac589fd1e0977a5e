from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from assistant.registry import registry


@login_required
def home(request: HttpRequest) -> HttpResponse:
    tools = sorted(registry.visible_tools(request.user), key=lambda t: (t.domain, t.operation))
    return render(request, "home.html", {"tools": tools})
