"""Mount with ``path("assistant/", include("assistant.urls"))``."""

from django.urls import include, path
from django.views.i18n import JavaScriptCatalog

from .surfaces import agui
from .surfaces import pages as views
from .surfaces.mcp import views as mcp_views

app_name = "assistant"

urlpatterns = [
    path("", views.chat, name="chat"),
    path("approvals/", views.approvals, name="approvals"),
    path("login/", views.LoginView.as_view(), name="login"),
    path("logout/", views.LogoutView.as_view(), name="logout"),
    # the pages' scripts read their texts in the active language from here (gettext in JS)
    path("jsi18n/", JavaScriptCatalog.as_view(packages=["assistant"]), name="jsi18n"),
    path("agui/", agui.AgentView.as_view(), name="agui"),
    path("api/", include("assistant.surfaces.rest.urls")),
    path("mcp/", mcp_views.mcp_endpoint, name="mcp"),
    path(
        "mcp/.well-known/oauth-protected-resource",
        mcp_views.mcp_resource_metadata,
        name="mcp-resource-metadata",
    ),
]
