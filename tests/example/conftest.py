"""The example project's suite runs under its own settings: ``--ds tests.example.settings``."""

from django.conf import settings

if "dashboards" not in settings.INSTALLED_APPS:
    raise RuntimeError(
        "the example project's suite needs its own settings: "
        "pytest --ds tests.example.settings tests/example"
    )

# Fixtures for every test here: the demo's dashboards world and the jobs it starts.
from tests.example.dashboard_calls import progress, run_jobs
from tests.example.dashboards_world import dashboard_storage, world

__all__ = ["dashboard_storage", "progress", "run_jobs", "world"]
