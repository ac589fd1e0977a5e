"""The example project: SQLite and in-memory channels by default, PostgreSQL/Redis from the environment."""

import os
from pathlib import Path

import dj_database_url
import django
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent

DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        # the fallback below is in the repository: anyone could sign sessions and tokens with it
        raise ImproperlyConfigured(
            "DJANGO_SECRET_KEY is not set. With DJANGO_DEBUG=0 the example project refuses to "
            "start on the key in its repository: set DJANGO_SECRET_KEY to a long random value "
            "(python -c 'import secrets; print(secrets.token_urlsafe(50))')."
        )
    SECRET_KEY = "insecure-example-key-for-development-only"
ALLOWED_HOSTS = [
    host.strip()
    for host in os.environ.get("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost").split(",")
    if host.strip()
]

# Behind HTTPS (DJANGO_HTTPS=1): secure cookies, HTTP redirected to HTTPS, and the TLS-terminating
# proxy's X-Forwarded-Proto trusted (it must set that header itself and drop a client's).
HTTPS = os.environ.get("DJANGO_HTTPS", "0") == "1"
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = SECURE_SSL_REDIRECT = HTTPS
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if HTTPS else None
# HSTS is hard to take back (browsers remember it, the preload list for months): opt in with
# DJANGO_HSTS_SECONDS, and DJANGO_HSTS_PRELOAD=1 only for a domain whose subdomains are all HTTPS.
SECURE_HSTS_SECONDS = int(os.environ.get("DJANGO_HSTS_SECONDS", "0"))
SECURE_HSTS_INCLUDE_SUBDOMAINS = SECURE_HSTS_PRELOAD = (
    os.environ.get("DJANGO_HSTS_PRELOAD", "0") == "1"
)

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
    "demo",
    "dashboards",
]
if django.VERSION < (6, 0):
    # Django 5.2: Tasks come from the django-tasks backport (the [django52] extra)
    INSTALLED_APPS.append("django_tasks")

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "config.urls"

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
            ],
        },
    },
]

WSGI_APPLICATION = "config.wsgi.application"
ASGI_APPLICATION = "config.asgi.application"

DATABASES = {
    "default": dj_database_url.config(
        default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}",
        # turn threads and server threads keep their connection between steps and requests
        conn_max_age=int(os.environ.get("DATABASE_CONN_MAX_AGE", "60")),
        conn_health_checks=True,
    )
}
if os.environ.get("DATABASE_POOL_MAX_SIZE") and "postgresql" in DATABASES["default"]["ENGINE"]:
    # Django's own psycopg pool (needs psycopg[pool]), one per process: connections go back to it
    # when a turn or request closes theirs, so CONN_MAX_AGE must be 0.
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": 1,
        "max_size": int(os.environ["DATABASE_POOL_MAX_SIZE"]),
        "max_idle": 60,
    }
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # The server and the db_worker write the same file: WAL lets readers read while one writes,
    # and a writer that finds the file busy waits (IMMEDIATE: it asks for the lock up front, so
    # two writers never deadlock mid-transaction) instead of failing "database is locked".
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "timeout": 20,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    )

REDIS_URL = os.environ.get("REDIS_URL")
# Redis between server processes. "pubsub" (the default) delivers a burst of events with one
# PUBLISH and pushes it to the processes watching; "core" queues each message per socket in
# Redis (several round trips per message, serialised per process: measured ~40 % more CPU per
# turn under tests/benchmarks/ws_load.py). A client that misses events either way (a dropped
# connection) gets them back from the event log when it resumes.
REDIS_CHANNEL_LAYERS = {
    "pubsub": "channels_redis.pubsub.RedisPubSubChannelLayer",
    "core": "channels_redis.core.RedisChannelLayer",
}
CHANNEL_LAYERS = {
    "default": (
        {
            "BACKEND": REDIS_CHANNEL_LAYERS[os.environ.get("ASSISTANT_CHANNEL_LAYER", "pubsub")],
            "CONFIG": {
                # redis-py 8 reads with a 5 s socket timeout and caps a pool at 100 connections
                # by default: a blocking receive must wait, and bursts need room.
                "hosts": [{"address": REDIS_URL, "socket_timeout": None, "max_connections": 1000}],
                # (core) every socket of a process shares one queue: 100 (the default) drops
                # events under load; a dropped event is a reply the user never sees.
                "capacity": 5000,
            },
        }
        if REDIS_URL
        else {"BACKEND": "channels.layers.InMemoryChannelLayer"}
    )
}

# Background jobs: the database backend and its worker (`manage.py db_worker`); on PostgreSQL,
# several workers claim tasks with SKIP LOCKED.
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}

AUTHENTICATION_BACKENDS = [
    "django.contrib.auth.backends.ModelBackend",
    "guardian.backends.ObjectPermissionBackend",
]

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
# Uploaded and generated files: the dashboards' backups (git-ignored).
MEDIA_URL = "media/"
MEDIA_ROOT = BASE_DIR / "media"

# The dashboards-as-code git repository (bare; created by `manage.py demo_dashboards`, git-ignored).
DASHBOARDS_REPOSITORY = BASE_DIR / "var" / "dashboards.git"
# Seconds between the steps of a dashboard job, so the demo's progress bars visibly move.
DASHBOARDS_JOB_PAUSE = float(os.environ.get("DASHBOARDS_JOB_PAUSE", "0.4"))
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "assistant:chat"
LOGOUT_REDIRECT_URL = "login"

ASSISTANT = {
    "RESOURCES": {"users": "auth.User", "dashboards": "dashboards.Dashboard"},
    "CONFIRMATION_TTL": 600,
    "HOME_URL": "home",  # the chat header's Home link (none when unset)
    "PLANNER": os.environ.get("ASSISTANT_PLANNER", "keywords"),
    # with Redis, replay after a reconnect works across server processes
    "EVENT_LOG": REDIS_URL,
    "MAX_CONCURRENT_TURNS": int(os.environ.get("ASSISTANT_MAX_CONCURRENT_TURNS", "500")),
    "TURN_THREADS": int(os.environ.get("ASSISTANT_TURN_THREADS", "32")),
    # turns (and API requests) per user; the load benchmarks' users chat faster than people
    "THROTTLE_RATE": os.environ.get("ASSISTANT_THROTTLE_RATE", "120/min"),
    "LLM": {
        "BASE_URL": os.environ.get("ASSISTANT_LLM_BASE_URL"),
        "MODEL": os.environ.get("ASSISTANT_LLM_MODEL", "gpt-4o-mini"),
        "STREAM_TIMEOUT": float(os.environ.get("ASSISTANT_LLM_STREAM_TIMEOUT", "120")),
        "TEMPERATURE": float(os.environ.get("ASSISTANT_LLM_TEMPERATURE", "0.2")),
        "FALLBACK_TO_KEYWORDS": True,
    },
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"assistant": {"handlers": ["console"], "level": "INFO"}},
}
