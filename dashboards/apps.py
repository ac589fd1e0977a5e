from django.apps import AppConfig


class DashboardsConfig(AppConfig):
    name = "dashboards"
    verbose_name = "Dashboards"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import validation_rules  # noqa: F401  (registers the dashboard rules)
