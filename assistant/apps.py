from django.apps import AppConfig
from django.db.models.signals import post_migrate
from django.utils.module_loading import autodiscover_modules


class AssistantConfig(AppConfig):
    name = "assistant"
    verbose_name = "Assistant"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks, tools, validation  # noqa: F401  (checks, built-in tools, rules)
        from .access.requirements import create_tool_permissions
        from .conf import assistant_settings
        from .core.registry import registry
        from .turns import evals  # noqa: F401  (checks, built-in tools, rules)
        from .turns.news import watch_access_changes

        post_migrate.connect(create_tool_permissions, sender=self)
        watch_access_changes()
        if assistant_settings.AUTODISCOVER:
            autodiscover_modules("assistant_tools", register_to=registry)
        registry.freeze()
