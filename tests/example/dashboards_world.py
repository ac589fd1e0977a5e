"""The example project's dashboards domain as the demo seeds it, for the dashboard tests."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from dashboards.models import Dashboard, Environment


@dataclass
class World:
    """The demo's users (re-fetched after the grants) and environments."""

    admin: Any
    operator: Any
    viewer: Any
    outsider: Any
    repository: Path
    media: Path

    def env(self, slug: str) -> Environment:
        return Environment.objects.get(slug=slug)

    def dashboard(self, slug: str, environment: str) -> Dashboard:
        return Dashboard.objects.get(slug=slug, environment__slug=environment)

    def fresh(self, user: Any) -> Any:
        """The user read again: permission caches live on the instance."""
        return get_user_model()._default_manager.get(pk=user.pk)


@pytest.fixture
def dashboard_storage(settings: Any, tmp_path: Path) -> tuple[Path, Path]:
    """A repository and media folder of this test's own."""
    settings.DASHBOARDS_REPOSITORY = tmp_path / "dashboards.git"
    settings.MEDIA_ROOT = tmp_path / "media"
    return settings.DASHBOARDS_REPOSITORY, settings.MEDIA_ROOT


@pytest.fixture
def world(
    make_user: Callable[..., Any], django_user_model: Any, dashboard_storage: tuple[Path, Path]
) -> World:
    """``manage.py demo_dashboards`` after the demo's users: what ``make demo`` serves."""
    admin = django_user_model.objects.create_superuser("admin", "admin@example.com", "pw")
    operator = make_user("operator", groups=("operators",), is_staff=True)
    viewer = make_user("viewer", groups=("viewers",))
    outsider = make_user("outsider")
    call_command("demo_dashboards", stdout=StringIO())
    users = django_user_model.objects
    return World(
        admin=users.get(pk=admin.pk),
        operator=users.get(pk=operator.pk),
        viewer=users.get(pk=viewer.pk),
        outsider=users.get(pk=outsider.pk),
        repository=dashboard_storage[0],
        media=dashboard_storage[1],
    )
