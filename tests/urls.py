import importlib.util

from django.contrib import admin
from django.urls import include, path

from assistant.views import AdminLoginView

urlpatterns = [
    path("admin/login/", AdminLoginView.as_view()),  # throttled, as a project should route it
    path("admin/", admin.site.urls),
    path("assistant/", include("assistant.urls")),
]
if importlib.util.find_spec("oauth2_provider") is not None:
    from oauth2_provider.views import OAuthServerMetadataView

    urlpatterns += [
        path("o/", include("oauth2_provider.urls", namespace="oauth2_provider")),
        # RFC 8414's path-inserted form of the issuer's (/o) metadata: where MCP clients look
        path(
            ".well-known/oauth-authorization-server/<path:issuer_path>",
            OAuthServerMetadataView.as_view(),
        ),
    ]
