from typing import Any

from django.http import HttpRequest, JsonResponse
from django.urls import include, path, re_path
from django.utils.translation import gettext
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.views import SpectacularAPIView
from rest_framework.request import Request
from rest_framework.response import Response

from ...exceptions import NotFound
from ..drf.base import BrowserSessionAuthentication
from . import actions, audit, conversations, jobs, tokens, tools, validation


@csrf_exempt  # it changes nothing: an unsafe method gets this JSON 404, not the HTML CSRF page
def not_found(request: HttpRequest, *args: object, **kwargs: object) -> JsonResponse:
    """Any method on a path the API does not have."""
    return JsonResponse(
        {"code": NotFound.code, "detail": gettext("No such API endpoint.")}, status=404
    )


schema_patterns = [
    path("tools/", tools.ToolsView.as_view(), name="tools"),
    path("messages/", conversations.MessagesView.as_view(), name="messages"),
    path("dispatch/", tools.DispatchView.as_view(), name="dispatch"),
    path("actions/", actions.ActionListView.as_view(), name="actions"),
    path(
        "actions/<uuid:action_id>/confirm/",
        actions.ActionConfirmView.as_view(),
        name="action-confirm",
    ),
    path(
        "actions/<uuid:action_id>/cancel/", actions.ActionCancelView.as_view(), name="action-cancel"
    ),
    path("conversations/", conversations.ConversationListView.as_view(), name="conversations"),
    path(
        "conversations/<uuid:conversation_id>/",
        conversations.ConversationDetailView.as_view(),
        name="conversation",
    ),
    path(
        "admin/conversations/",
        conversations.StaffConversationListView.as_view(),
        name="staff-conversations",
    ),
    path(
        "admin/conversations/<uuid:conversation_id>/",
        conversations.StaffConversationDetailView.as_view(),
        name="staff-conversation",
    ),
    path(
        "admin/conversations/<uuid:conversation_id>/history/",
        conversations.StaffConversationHistoryView.as_view(),
        name="staff-conversation-history",
    ),
    path("admin/audit/", audit.AuditListView.as_view(), name="audit"),
    path("validation-tasks/", validation.ValidationTaskListView.as_view(), name="validation-tasks"),
    path(
        "validation-tasks/<int:task_id>/",
        validation.ValidationTaskDetailView.as_view(),
        name="validation-task",
    ),
    path(
        "validation-tasks/<int:task_id>/run/",
        validation.ValidationTaskRunView.as_view(),
        name="validation-task-run",
    ),
    path("validation-runs/", validation.ValidationRunListView.as_view(), name="validation-runs"),
    path("jobs/", jobs.JobListView.as_view(), name="jobs"),
    path("jobs/<uuid:job_id>/", jobs.JobDetailView.as_view(), name="job"),
    path("jobs/<uuid:job_id>/cancel/", jobs.JobCancelView.as_view(), name="job-cancel"),
    path("tokens/", tokens.AccessTokenListView.as_view(), name="tokens"),
    path("tokens/<int:token_id>/", tokens.AccessTokenDetailView.as_view(), name="token"),
]


class SchemaView(SpectacularAPIView):
    """The OpenAPI document of this API only, wherever the project mounted it."""

    authentication_classes = [BrowserSessionAuthentication]
    permission_classes: list[Any] = []

    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        route = request.resolver_match.route if request.resolver_match else "schema/"
        prefix = route[: -len("schema/")] if route.endswith("schema/") else ""
        self.patterns = [path(prefix, include(schema_patterns))]
        self.custom_settings = {
            "TITLE": "django-ops-assistant API",
            "DESCRIPTION": "Tools, turns, confirmations and audit of django-ops-assistant.",
            "VERSION": "1",
            "SCHEMA_PATH_PREFIX": "/" + prefix.rstrip("/"),
            # request bodies get components of their own, so refused blanks say minLength 1
            "COMPONENT_SPLIT_REQUEST": True,
        }
        return super().get(request, *args, **kwargs)  # type: ignore[no-untyped-call]


urlpatterns = [
    *schema_patterns,
    path("schema/", SchemaView.as_view(), name="schema"),
    re_path(r"^[\s\S]*$", not_found),  # any path, a newline in it too ("." stops at one)
]
