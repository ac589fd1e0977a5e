"""Settings for the test suite: SQLite by default, PostgreSQL when DATABASE_URL points at it."""

import importlib.util
import os
import tempfile
from pathlib import Path

import dj_database_url
import django

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = "tests-only-secret-key"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]
USE_TZ = True
TIME_ZONE = "UTC"

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "guardian",
    "channels",
    "django_tasks_db",
    "assistant",
    "tests.testapp",
]
if importlib.util.find_spec("oauth2_provider") is not None:
    # the [oauth] extra: the MCP endpoint as an OAuth 2.1 resource server (tests/surfaces/mcp/test_oauth.py)
    INSTALLED_APPS.append("oauth2_provider")
if django.VERSION < (6, 0):
    # Django 5.2: Tasks come from the django-tasks backport (the [django52] extra)
    INSTALLED_APPS.append("django_tasks")

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",  # pages and API errors in the client's language
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "tests.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
STATIC_URL = "static/"
# Tests that store files point MEDIA_ROOT at a temporary directory of their own.
MEDIA_ROOT = BASE_DIR / "test-artifacts" / "media"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
ASGI_APPLICATION = "tests.asgi.application"

_database = dj_database_url.config(default="sqlite://:memory:")
if _database["ENGINE"].endswith("postgresql"):
    # An explicit test name: server processes forked by browser tests must find the same database.
    # Per run, so parallel runs don't drop each other's; exported for subprocesses.
    _database["TEST"] = {
        "NAME": os.environ.setdefault("ASSISTANT_TEST_DB", f"test_assistant_{os.getpid()}")
    }
else:
    # A file, as a deployment has, not the in-memory default: one shared cache there refuses a
    # write at once ("database table is locked") while another thread touches the table, where a
    # file in WAL mode lets readers be and has a writer wait its turn (the busy timeout).
    _database["TEST"] = {
        "NAME": os.environ.setdefault(
            "ASSISTANT_TEST_DB",
            str(Path(tempfile.gettempdir()) / f"test_assistant_{os.getpid()}.sqlite3"),
        )
    }
    _database["OPTIONS"] = {
        "timeout": 20,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=OFF;",
    }
DATABASES = {"default": _database}

REDIS_URL = os.environ.get("REDIS_URL")
CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# Jobs run at once in the test process; tests that need a real worker switch to the database
# backend and start `db_worker`.
_TASKS_PACKAGE = "django.tasks" if django.VERSION >= (6, 0) else "django_tasks"
TASKS = {"default": {"BACKEND": f"{_TASKS_PACKAGE}.backends.immediate.ImmediateBackend"}}
# Deliberate here: one process (the in-memory layer even on PostgreSQL), jobs run inline.
SILENCED_SYSTEM_CHECKS = ["assistant.W002", "assistant.W003"]

AUTHENTICATION_BACKENDS = [
    "django.contrib.auth.backends.ModelBackend",
    "guardian.backends.ObjectPermissionBackend",
]
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

ASSISTANT = {
    "RESOURCES": {"orders": "testapp.Order"},
    "THROTTLE_RATE": "10000/min",
    # No heartbeat thread in the test process (it would write between tests); the server
    # processes of tests/turns/test_turn_interruption.py beat (tests/crash_settings.py).
    "TURN_HEARTBEAT": None,
}
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"null": {"class": "logging.NullHandler"}},
    "loggers": {"assistant": {"handlers": ["null"], "propagate": True}},
}

# django-oauth-toolkit as MCP clients need it: PKCE, dynamic client registration open to anyone
# (MCP clients register themselves), and the assistant's scopes (assistant.access.oauth.SCOPES).
OAUTH2_PROVIDER = {
    "PKCE_REQUIRED": True,
    "REFRESH_TOKEN_REUSE_PROTECTION": True,
    "DCR_ENABLED": True,
    "DCR_REGISTRATION_PERMISSION_CLASSES": ("oauth2_provider.dcr.AllowAllDCRPermission",),
    "SCOPES": {
        "assistant": "Use every assistant tool your account may use",
        "assistant:write": "Use the assistant's safe and guarded tools",
        "assistant:read": "Use the assistant's read-only tools",
    },
    "DEFAULT_SCOPES": ["assistant:read"],
}
