"""The Django settings the docs build imports the app with (the tutorial's apps, no database)."""

SECRET_KEY = "docs-only"
USE_TZ = True
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "rest_framework",
    "rest_framework.authtoken",
    "guardian",
    "channels",
    "django_tasks_db",
    "assistant",
]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
