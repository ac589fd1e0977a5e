"""System checks over the ``ASSISTANT`` settings and the registry's permission references."""

from __future__ import annotations

import difflib
import importlib.util
from collections.abc import Iterable
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register
from django.core.handlers.asgi import ASGIHandler
from django.db import DatabaseError

from . import telemetry
from .access.approvals import RISK_LEVELS, Policy, configured, configured_for
from .access.oauth import SCOPES
from .access.permissions import permission_for
from .conf import (
    LLM_SETTINGS,
    SETTINGS,
    Setting,
    assistant_settings,
    nearest,
    policies_are_valid,
)
from .core.registry import AssistantTool, RiskLevel, ToolRegistry, registry
from .models import ValidationTask
from .toolsets.sql import QueryError, SQLInspector
from .validation import rules


@register("assistant")
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """assistant.E001/E002/E003/E019/W001: the ASSISTANT dict, its keys and values, LLM's too."""
    value = getattr(settings, "ASSISTANT", {})
    if not isinstance(value, dict):
        return [
            Error(
                "The ASSISTANT setting must be a dict.",
                hint="Write ASSISTANT = {'PLANNER': 'keywords', ...} in your settings.",
                id="assistant.E001",
            )
        ]
    errors = list(_key_errors(value, SETTINGS, "ASSISTANT"))
    llm = value.get("LLM", {})
    if isinstance(llm, dict):
        errors.extend(_key_errors(llm, LLM_SETTINGS, "ASSISTANT['LLM']"))
    errors.extend(_resource_errors(value.get("RESOURCES", {})))
    errors.extend(_home_url_errors(value.get("HOME_URL")))
    if isinstance(value.get("VALIDATION_FILTER_FIELDS", {}), dict):
        errors.extend(_filter_field_errors(value.get("VALIDATION_FILTER_FIELDS", {})))
    return errors


def _key_errors(
    configured: dict[Any, Any], known: dict[str, Setting], where: str
) -> Iterable[CheckMessage]:
    """An unknown key is a warning naming its nearest known key; a bad value is an error."""
    for key, value in configured.items():
        spec = known.get(key) if isinstance(key, str) else None
        if spec is None:
            guess = nearest(key, known)
            yield Warning(
                f"{where}[{key!r}] is not an assistant setting.",
                hint=(f"Did you mean {guess!r}? " if guess else "")
                + f"Known settings: {', '.join(sorted(known))}.",
                id="assistant.W001",
            )
        elif not spec.accepts(value):
            yield Error(
                f"{where}[{key!r}] must be {spec.expected}, not {value!r}.",
                hint=f"E.g. {key!r}: {spec.example} ({spec.doc}).",
                id="assistant.E002",
            )


def _resource_errors(resources: Any) -> list[CheckMessage]:
    if not isinstance(resources, dict):
        return []
    errors: list[CheckMessage] = []
    for resource, label in resources.items():
        if _model(label) is None:
            errors.append(
                Error(
                    f"ASSISTANT['RESOURCES'][{resource!r}] names {label!r}, which is not an "
                    "installed model.",
                    hint="Use 'app_label.ModelName' of a model in INSTALLED_APPS.",
                    id="assistant.E003",
                )
            )
    return errors


def _home_url_errors(home_url: Any) -> list[CheckMessage]:
    """assistant.E019: a HOME_URL that is neither a path nor a URL must name a URL pattern."""
    from django.urls import NoReverseMatch, reverse

    if not SETTINGS["HOME_URL"].accepts(home_url) or not home_url:
        return []  # None, or E002's
    if home_url.startswith(("/", "./", "../")) or "://" in home_url:
        return []
    try:
        reverse(home_url)
    except NoReverseMatch:
        return [
            Error(
                f"ASSISTANT['HOME_URL'] ({home_url!r}) is not a path or URL and names no URL "
                "pattern: the chat page could not render its Home link.",
                hint="Use a path ('/'), a URL, or the name of a URL pattern without arguments "
                "('home', 'admin:index').",
                id="assistant.E019",
            )
        ]
    return []


def _bad_value(key: str, problem: str, hint: str) -> Error:
    return Error(f"ASSISTANT[{key!r}] {problem}.", hint=hint, id="assistant.E002")


def _filter_field_errors(listed: dict[Any, Any]) -> list[CheckMessage]:
    """E002 unless VALIDATION_FILTER_FIELDS maps installed models to their own column names."""
    key, hint = "VALIDATION_FILTER_FIELDS", "E.g. {'dashboards.Dashboard': ['slug', 'owner_id']}."
    errors: list[CheckMessage] = []
    for label, names in listed.items():
        model = _model(label)
        if model is None:
            errors.append(
                _bad_value(key, f"names {label!r}, which is not an installed model", hint)
            )
            continue
        fields = model._meta.concrete_fields
        own = {f.name for f in fields} | {f.attname for f in fields}
        if not isinstance(names, list | tuple) or any(name not in own for name in names):
            problem = f"[{label!r}] must list fields of {label} itself (no '__' paths)"
            errors.append(_bad_value(key, problem, hint))
    return errors


def _model(label: Any) -> Any:
    if not isinstance(label, str):
        return None
    try:
        return apps.get_model(label)
    except (LookupError, ValueError):
        return None


def _codenames(app_label: str) -> set[str]:
    """Every permission codename the app's models declare (from metadata, no queries)."""
    codenames: set[str] = set()
    for model in apps.get_app_config(app_label).get_models(include_auto_created=True):
        opts = model._meta
        codenames.update(f"{action}_{opts.model_name}" for action in opts.default_permissions)
        codenames.update(codename for codename, _ in opts.permissions)
    return codenames


@register("assistant")
def check_tool_permissions(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """assistant.E004/E005/E006: every permission reference and object check resolves."""
    return list(tool_errors(registry))


def tool_errors(site: ToolRegistry) -> Iterable[CheckMessage]:
    configured = getattr(settings, "ASSISTANT", {})
    resources = configured.get("RESOURCES", {}) if isinstance(configured, dict) else {}
    malformed = not isinstance(resources, dict)  # already E001/E002; guessing would be noise
    resources = {} if malformed else resources
    # Permissions the app itself creates after migrate, for pairs no model stands for.
    created = {
        permission_for(check)
        for tool in site
        for check in tool.permission_checks
        if isinstance(check, tuple) and check[0] not in resources
    }
    if not malformed:
        yield from _unmapped_resources(site, resources)
    for tool in site:
        yield from _permission_errors(tool, resources, created)
        if tool.object_check is not None and _model(tool.object_check[1]) is None:
            yield Error(
                f"Tool {tool.operation!r}: object_check names {tool.object_check[1]!r}, which is "
                "not an installed model.",
                hint="Use 'app_label.ModelName' of a model in INSTALLED_APPS.",
                obj=tool.handler,
                id="assistant.E006",
            )


def _unmapped_resources(site: ToolRegistry, resources: dict[str, Any]) -> Iterable[CheckMessage]:
    """assistant.W004: a pair that falls back to an ``assistant.*`` permission while an
    installed model carries the resource's name (the mapping was probably forgotten)."""
    tools: dict[str, list[str]] = {}
    for tool in site:
        for check in tool.permission_checks:
            if isinstance(check, tuple) and check[0] not in resources:
                tools.setdefault(check[0], []).append(tool.operation)
    for resource, operations in sorted(tools.items()):
        models = _models_named(resource)
        if not models:
            continue
        names = ", ".join(sorted(set(operations)))
        yield Warning(
            f"Resource {resource!r} (tools: {names}) is not in ASSISTANT['RESOURCES'], so its "
            f"tools need permissions the app creates (assistant.{resource.lower()}_*), which "
            f"nobody holds until granted — yet the installed model {models[0]} has that name.",
            hint=f"Did you mean ASSISTANT['RESOURCES'] = {{{resource!r}: {models[0]!r}}}? "
            "If the app's own permissions are meant, grant them after migrate and silence "
            "assistant.W004.",
            id="assistant.W004",
        )


def _models_named(resource: str) -> list[str]:
    wanted = resource.lower().replace("_", "").replace(" ", "")
    found = []
    for model in apps.get_models():
        opts = model._meta
        names = {
            opts.model_name,
            f"{opts.model_name}s",
            str(opts.verbose_name_plural).lower().replace(" ", ""),
        }
        if wanted in names:
            found.append(opts.label)
    return sorted(found)


def _permission_errors(
    tool: AssistantTool, resources: dict[str, Any], created: set[str]
) -> Iterable[CheckMessage]:
    for check in tool.permission_checks:
        perm = permission_for(check)
        if perm in created:
            continue
        app_label, codename = perm.split(".", 1)
        if app_label not in apps.app_configs:
            yield Error(
                f"Tool {tool.operation!r}: permission {perm!r} names app {app_label!r}, which is "
                "not installed.",
                hint="Check the app label, or add the app to INSTALLED_APPS.",
                obj=tool.handler,
                id="assistant.E004",
            )
        elif codename not in _codenames(app_label):
            source = f" (from {check!r})" if isinstance(check, tuple) else ""
            yield Error(
                f"Tool {tool.operation!r}: permission {perm!r}{source} is not defined by any "
                f"model of {app_label!r}.",
                hint="Fix the codename, or add it to the model's Meta.permissions.",
                obj=tool.handler,
                id="assistant.E005",
            )


@register("assistant")
def check_approval_policies(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """assistant.E011/E012/E013/E014: ASSISTANT['APPROVAL_POLICIES'] names real operations and
    policies, a two_person approver's permission, and never runs a dangerous tool unasked."""
    return list(policy_errors(registry))


def policy_errors(site: ToolRegistry) -> Iterable[CheckMessage]:
    configured_settings = getattr(settings, "ASSISTANT", {})
    policies = (
        configured_settings.get("APPROVAL_POLICIES", {})
        if isinstance(configured_settings, dict)
        else {}
    )
    if not policies_are_valid(policies):
        return  # its shape is assistant.E002's
    where = "ASSISTANT['APPROVAL_POLICIES']"
    operations = {tool.operation for tool in site}
    created = {permission_for(check) for tool in site for check in tool.permission_checks}
    for name, entry in policies.items():
        approval = configured(entry)
        if name not in RISK_LEVELS and name not in operations:
            guess = difflib.get_close_matches(name, sorted(operations | RISK_LEVELS), n=1)
            yield Error(
                f"{where}[{name!r}] names no tool's operation and no risk level.",
                hint=(f"Did you mean {guess[0]!r}? " if guess else "")
                + "Use a registered operation or one of 'safe', 'guarded', 'dangerous'.",
                id="assistant.E011",
            )
        if approval.policy not in Policy.values:
            yield Error(
                f"{where}[{name!r}] asks for policy {approval.policy!r}, which does not exist.",
                hint=f"Use one of {', '.join(map(repr, Policy.values))}.",
                id="assistant.E012",
            )
        elif approval.policy == Policy.TWO_PERSON and not (
            approval.permission in created or _is_permission(approval.permission)
        ):
            yield Error(
                f"{where}[{name!r}] is two_person, but its approver permission "
                f"{approval.permission!r} is not a permission any installed model defines.",
                hint="Write {'policy': 'two_person', 'permission': 'app_label.codename'} "
                "naming the permission a second person needs to approve.",
                id="assistant.E013",
            )
    for tool in site:
        if tool.risk_level is not RiskLevel.DANGEROUS:
            continue
        chosen = configured_for(tool, policies)
        if chosen is not None and chosen.policy == Policy.AUTO:
            yield Error(
                f"Tool {tool.operation!r} is dangerous, but {where} would run it unconfirmed "
                "('auto'); it is asked as 'confirm' instead.",
                hint="Give dangerous tools 'confirm', 'confirm_with_reason' or 'two_person'.",
                obj=tool.handler,
                id="assistant.E014",
            )


def _is_permission(label: str) -> bool:
    app_label, _, codename = label.partition(".")
    return app_label in apps.app_configs and codename in _codenames(app_label)


@register("database")
def check_validation_rules(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[CheckMessage]:
    """assistant.E007: validation tasks naming rules no code registers (``check --database``)."""
    if not databases:
        return []

    errors: list[CheckMessage] = []
    for alias in databases:
        try:
            tasks = list(ValidationTask.objects.using(alias).only("pk", "name", "rules"))
        except DatabaseError:
            continue  # not migrated yet (migrate runs database checks first)
        for task in tasks:
            for entry in task.rules:  # as normalise_rules stored them: {"name", "options"}
                name = entry["name"]
                if name not in rules:
                    errors.append(
                        Error(
                            f"Validation task {task.pk} ({task.name!r}) runs rule {name!r}, "
                            "which no installed app registers.",
                            hint="Register it with @validation_rule, or edit the task's rules.",
                            obj=task,
                            id="assistant.E007",
                        )
                    )
    return errors


IN_MEMORY_LAYER = "channels.layers.InMemoryChannelLayer"
INLINE_TASK_BACKENDS = {
    "django.tasks.backends.immediate.ImmediateBackend": "run inline, during the turn that starts them",
    "django_tasks.backends.immediate.ImmediateBackend": "run inline, during the turn that starts them",
    "django.tasks.backends.dummy.DummyBackend": "are never run",
    "django_tasks.backends.dummy.DummyBackend": "are never run",
}


@register("assistant")
def check_services(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """assistant.E008/W002/W003: the channel layer and the Tasks backend the chat relies on."""
    return service_problems(
        getattr(settings, "CHANNEL_LAYERS", None),
        settings.DATABASES,
        getattr(settings, "TASKS", None),
    )


def service_problems(layers: Any, databases: Any, tasks: Any) -> list[CheckMessage]:
    """What is wrong with these CHANNEL_LAYERS, DATABASES and TASKS for the chat."""
    errors: list[CheckMessage] = []
    layer = layers.get("default") if isinstance(layers, dict) else None
    if not isinstance(layer, dict) or not layer.get("BACKEND"):
        errors.append(
            Error(
                "No default channel layer is configured: the chat websocket cannot stream "
                "replies, stop turns or follow permission changes.",
                hint="Set CHANNEL_LAYERS = {'default': {'BACKEND': "
                "'channels.layers.InMemoryChannelLayer'}} for one process, or channels-redis's "
                "layer for several.",
                id="assistant.E008",
            )
        )
    elif layer["BACKEND"] == IN_MEMORY_LAYER and _shared_database(databases):
        errors.append(
            Warning(
                "The in-memory channel layer reaches only its own process, but the database "
                "suggests several server processes: Stop, replies to other tabs and permission "
                "news would not cross between them.",
                hint="Use channels-redis (the [redis] extra) when you run more than one ASGI "
                "process; silence assistant.W002 if you run exactly one.",
                id="assistant.W002",
            )
        )
    backend = _task_backend(tasks)
    if backend in INLINE_TASK_BACKENDS:
        errors.append(
            Warning(
                f"Django's Tasks backend is {backend.rsplit('.', 1)[-1]}: background jobs "
                f"(backups, deployments, validation runs) {INLINE_TASK_BACKENDS[backend]}.",
                hint="Add 'django_tasks_db' to INSTALLED_APPS, set TASKS = {'default': "
                "{'BACKEND': 'django_tasks_db.DatabaseBackend'}} and run manage.py db_worker.",
                id="assistant.W003",
            )
        )
    return errors


def _shared_database(databases: Any) -> bool:
    """A server database (not SQLite) usually means more than one process serves the site."""
    return isinstance(databases, dict) and any(
        not str(config.get("ENGINE", "")).endswith("sqlite3")
        for config in databases.values()
        if isinstance(config, dict)
    )


def _task_backend(tasks: Any) -> str:
    if not isinstance(tasks, dict) or "default" not in tasks:
        return "django.tasks.backends.immediate.ImmediateBackend"  # Django's own default
    default = tasks["default"]
    return str(default.get("BACKEND", "")) if isinstance(default, dict) else ""


ASGI_SERVER_APPS = ("daphne",)  # apps whose runserver serves ASGI (websockets)
REDIS_LAYER_PREFIX = "channels_redis."


@register("assistant")
def check_websocket_served(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """assistant.W013/E018/W014: something serves the chat's websocket where the page expects."""
    return websocket_problems(
        list(settings.INSTALLED_APPS),
        getattr(settings, "ASGI_APPLICATION", None),
        str(assistant_settings.WEBSOCKET_PATH),
    )


def websocket_problems(
    installed: list[str], asgi_application: Any, path: str
) -> list[CheckMessage]:
    """What keeps these INSTALLED_APPS and ASGI_APPLICATION from serving a websocket at ``path``."""
    from django.utils.module_loading import import_string

    served_by = [name for name in installed if name.split(".")[0] in ASGI_SERVER_APPS]
    if not served_by:
        return [
            Warning(
                f"No ASGI server app is in INSTALLED_APPS: manage.py runserver serves WSGI, and "
                f"the chat's websocket ({path}) is never served.",
                hint="Put 'daphne' first in INSTALLED_APPS; silence assistant.W013 if an ASGI "
                "server (daphne, uvicorn) runs the project outside runserver.",
                id="assistant.W013",
            )
        ]
    hint = (
        "Set ASGI_APPLICATION = 'yourproject.asgi.application', a ProtocolTypeRouter whose "
        "'websocket' is URLRouter(assistant.routing.websocket_urlpatterns) (see the README)."
    )
    if not asgi_application:
        return [
            Error(
                f"{served_by[0]} is installed, but ASGI_APPLICATION is not set: runserver cannot "
                f"start an ASGI server, and the chat's websocket ({path}) is never served.",
                hint=hint,
                id="assistant.E018",
            )
        ]
    try:
        application = import_string(str(asgi_application))
    except ImportError as error:
        return [
            Error(
                f"ASGI_APPLICATION {asgi_application!r} cannot be imported ({error}).",
                hint=hint,
                id="assistant.E018",
            )
        ]
    if _routes_websocket(application, path.removeprefix("/")) is False:
        return [
            Warning(
                f"ASGI_APPLICATION {asgi_application!r} routes no websocket to {path}, where the "
                "chat page connects.",
                hint=hint + " Or set ASSISTANT['WEBSOCKET_PATH'] to the path you route.",
                id="assistant.W014",
            )
        ]
    return []


def _routes_websocket(application: Any, path: str, depth: int = 0) -> bool | None:
    """Whether ``application`` routes a websocket at ``path``; None when it cannot be told."""
    if depth > 12:
        return None
    if isinstance(application, ASGIHandler):
        return False  # Django's own handler: HTTP only
    mapping = getattr(application, "application_mapping", None)
    if isinstance(mapping, dict):  # channels' ProtocolTypeRouter
        if "websocket" not in mapping:
            return False
        return _routes_websocket(mapping["websocket"], path, depth + 1)
    routes = getattr(application, "routes", None)
    if isinstance(routes, list | tuple):  # channels' URLRouter
        return any(_route_matches(route, path, depth) for route in routes)
    for attribute in ("application", "inner", "app"):  # middleware wrapping another application
        inner = getattr(application, attribute, None)
        if inner is not None and inner is not application:
            return _routes_websocket(inner, path, depth + 1)
    return None


def _route_matches(route: Any, path: str, depth: int) -> bool:
    pattern = getattr(route, "pattern", None)
    match = pattern.match(path) if pattern is not None else None
    if match is None:
        return False
    inner = getattr(route, "callback", None)
    if isinstance(getattr(inner, "routes", None), list | tuple):  # a nested URLRouter
        return _routes_websocket(inner, match[0], depth + 1) is not False
    return True


@register("assistant")
def check_event_log(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """assistant.W015: a Redis channel layer with the replay log left in one process's memory."""
    return event_log_problems(
        getattr(settings, "CHANNEL_LAYERS", None), assistant_settings.EVENT_LOG
    )


def event_log_problems(layers: Any, event_log: Any) -> list[CheckMessage]:
    """W015 when these CHANNEL_LAYERS cross processes but the event log ``event_log`` does not."""
    layer = layers.get("default") if isinstance(layers, dict) else None
    backend = str(layer.get("BACKEND", "")) if isinstance(layer, dict) else ""
    if not backend.startswith(REDIS_LAYER_PREFIX) or event_log is not None:
        return []
    return [
        Warning(
            "The channel layer is Redis, but ASSISTANT['EVENT_LOG'] is not set, so replay "
            "is kept in each process's memory: a tab that reconnects to another process "
            "cannot replay a run it missed.",
            hint="Set ASSISTANT['EVENT_LOG'] to a Redis URL (e.g. the channel layer's, "
            "'redis://127.0.0.1:6379/0'); silence assistant.W015 if you run exactly one process.",
            id="assistant.W015",
        )
    ]


@register("assistant")
def check_planner(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """assistant.E009/E010: the LLM planner can actually be used."""
    configured = getattr(settings, "ASSISTANT", {})
    if not isinstance(configured, dict) or configured.get("PLANNER") != "llm":
        return []
    errors: list[CheckMessage] = []
    if importlib.util.find_spec("openai") is None:
        errors.append(
            Error(
                "ASSISTANT['PLANNER'] is 'llm', but the openai package is not installed.",
                hint="Install the [llm] extra (the openai package), or set PLANNER to 'keywords'.",
                id="assistant.E009",
            )
        )
    llm = configured.get("LLM", {})
    if not isinstance(llm, dict) or not llm.get("MODEL"):
        errors.append(
            Error(
                "ASSISTANT['PLANNER'] is 'llm', but ASSISTANT['LLM']['MODEL'] names no model.",
                hint="Set ASSISTANT['LLM']['MODEL'], e.g. 'gpt-4o-mini' or 'qwen2.5:7b-instruct'.",
                id="assistant.E010",
            )
        )
    return errors


@register("assistant")
def check_telemetry(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """assistant.W020: telemetry is asked for (the setting or an OTLP endpoint) but not installed."""
    if not telemetry.wanted() or telemetry.installed():
        return []
    return [
        Warning(
            "Telemetry is asked for (ASSISTANT['TELEMETRY'] or OTEL_EXPORTER_OTLP_ENDPOINT), but "
            "the OpenTelemetry SDK or its OTLP/HTTP exporter is not installed: nothing is traced.",
            hint="Install the [otel] extra (pip install 'django-ops-assistant[otel]'), or set "
            "ASSISTANT['TELEMETRY'] = False.",
            id="assistant.W020",
        )
    ]


@register("assistant")
def check_turn_liveness(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """assistant.E017: a live process's turns are never closed as interrupted between beats."""
    configured = getattr(settings, "ASSISTANT", {})
    if not isinstance(configured, dict):
        return []  # (E001)
    beat = configured.get("TURN_HEARTBEAT", SETTINGS["TURN_HEARTBEAT"].default)
    stale = configured.get("TURN_STALE_AFTER", SETTINGS["TURN_STALE_AFTER"].default)
    if not (
        SETTINGS["TURN_HEARTBEAT"].accepts(beat) and SETTINGS["TURN_STALE_AFTER"].accepts(stale)
    ):
        return []  # (E002)
    if beat is None or stale > 2 * beat:
        return []
    return [
        Error(
            f"ASSISTANT['TURN_STALE_AFTER'] ({stale!r} s) must be more than twice "
            f"ASSISTANT['TURN_HEARTBEAT'] ({beat!r} s).",
            hint="A process that is alive would be taken for dead between two heartbeats, and "
            "its turns closed as interrupted; e.g. TURN_HEARTBEAT 5 and TURN_STALE_AFTER 30.",
            id="assistant.E017",
        )
    ]


@register("database")
def check_sql_inspector_roles(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[CheckMessage]:
    """assistant.W010: an SQL inspector connects as an unsafe role (``check --database``)."""
    return sql_role_warnings(registry, databases)


def sql_role_warnings(site: ToolRegistry, databases: Any) -> list[CheckMessage]:
    """Ask the server about the role of each of ``site``'s SQL inspectors on ``databases``."""
    if not databases:
        return []
    warnings: list[CheckMessage] = []
    for toolset in site.toolsets.values():
        if not issubclass(toolset, SQLInspector):
            continue
        is_alias = "://" not in toolset.database and "=" not in toolset.database
        if is_alias and toolset.database not in databases:
            continue
        try:
            problem = toolset.role_problem()
        except QueryError:
            continue  # unreachable or the role not created yet: its start fails and logs why
        if problem is not None:
            warnings.append(
                Warning(
                    f"SQL inspector {toolset.name!r}: {problem}; it refuses to start.",
                    hint="Set its `role` to a read-only role (CREATE ROLE ... LOGIN; GRANT "
                    "SELECT ON ...), see the SQL inspector in docs/howto/toolsets.md.",
                    obj=toolset,
                    id="assistant.W010",
                )
            )
    return warnings


@register("assistant")
def check_oauth(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """assistant.E015/E016/W011/W012: django-oauth-toolkit, when installed, as MCP clients need it."""
    if not apps.is_installed("oauth2_provider"):
        return []
    from oauth2_provider.scopes import get_scopes_backend
    from oauth2_provider.settings import oauth2_settings

    return oauth_problems(oauth2_settings, set(get_scopes_backend().get_all_scopes()))


def oauth_problems(oauth2_settings: Any, available_scopes: set[str]) -> list[CheckMessage]:
    problems: list[CheckMessage] = []
    if oauth2_settings.PKCE_REQUIRED is False:  # a callable decides per client: not judged here
        problems.append(
            Error(
                "OAUTH2_PROVIDER['PKCE_REQUIRED'] is False: MCP clients sign in with OAuth 2.1, "
                "which requires PKCE.",
                hint="Remove PKCE_REQUIRED from OAUTH2_PROVIDER (its default is True).",
                id="assistant.E015",
            )
        )
    missing = [scope for scope in SCOPES if scope not in available_scopes]
    if missing:
        problems.append(
            Error(
                f"django-oauth-toolkit offers none of the assistant's scopes {missing}: no client "
                "can ask for them, so no OAuth token reaches the MCP endpoint.",
                hint="Add them to OAUTH2_PROVIDER['SCOPES']: "
                + ", ".join(f"{scope!r}: {text!r}" for scope, text in SCOPES.items())
                + ".",
                id="assistant.E016",
            )
        )
    if not (
        oauth2_settings.ROTATE_REFRESH_TOKEN and oauth2_settings.REFRESH_TOKEN_REUSE_PROTECTION
    ):
        problems.append(
            Warning(
                "A refresh token used twice does not end its sign-in: MCP clients register as "
                "public clients, so whoever copies one keeps a working token (OAuth 2.1, "
                "RFC 9700 4.14.2: rotate refresh tokens and revoke the family on reuse).",
                hint="Set OAUTH2_PROVIDER['REFRESH_TOKEN_REUSE_PROTECTION'] = True (and leave "
                "ROTATE_REFRESH_TOKEN at its default, True).",
                id="assistant.W012",
            )
        )
    problems.extend(_metadata_warnings(oauth2_settings))
    return problems


def _metadata_warnings(oauth2_settings: Any) -> list[CheckMessage]:
    """assistant.W011: MCP clients cannot find this site's authorization-server metadata."""
    from django.urls import NoReverseMatch, Resolver404, resolve, reverse

    well_known = "/.well-known/oauth-authorization-server"
    if oauth2_settings.OAUTH2_PROTECTED_RESOURCE_AUTHORIZATION_SERVERS or (
        oauth2_settings.OIDC_ISS_ENDPOINT
    ):
        return []  # the issuer is named outright; where its metadata lives is its own business
    try:
        path = reverse("oauth2_provider:oauth-server-metadata")
    except NoReverseMatch:
        return [
            Warning(
                "django-oauth-toolkit is installed but its URLs are not: MCP clients have no "
                "authorization server to sign in with.",
                hint='Add path("o/", include("oauth2_provider.urls", namespace="oauth2_provider")) '
                "to your ROOT_URLCONF (see OAuth 2.1 in docs/howto/mcp-clients.md).",
                id="assistant.W011",
            )
        ]
    issuer_path = path.removesuffix(well_known)
    if not issuer_path or issuer_path == path:
        return []
    try:
        resolve(f"{well_known}{issuer_path}")
    except Resolver404:
        return [
            Warning(
                f"The authorization server's metadata is at {path}, but MCP clients look for it "
                f"at {well_known}{issuer_path} (RFC 8414's form for the issuer {issuer_path}).",
                hint=f'Add path("{well_known[1:]}/<path:issuer_path>", '
                "oauth2_provider.views.OAuthServerMetadataView.as_view()) to your ROOT_URLCONF.",
                id="assistant.W011",
            )
        ]
    return []
