"""Mount with ``path("assistant/", include("assistant.urls"))``."""

from django.urls import include, path

app_name = "assistant"

urlpatterns = [
    path("api/", include("assistant.api.urls")),
]
