"""A project that mounts django-oauth-toolkit under a prefix but not its root metadata."""

from django.urls import include, path

urlpatterns = [
    path("assistant/", include("assistant.urls")),
    path("o/", include("oauth2_provider.urls", namespace="oauth2_provider")),
]
