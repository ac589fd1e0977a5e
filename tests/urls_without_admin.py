"""A project that mounts the assistant but not the Django admin."""

from django.urls import include, path

urlpatterns = [path("assistant/", include("assistant.urls"))]
