"""System checks: every ``assistant.*`` id, over the ASSISTANT settings and the tool registry."""

import sys
from io import StringIO
from typing import Any

import pytest
from channels.routing import ProtocolTypeRouter, URLRouter
from django.core.checks import ERROR, WARNING, run_checks
from django.core.handlers.asgi import ASGIHandler
from django.core.management import call_command
from django.test import override_settings
from django.urls import path

from assistant import ToolCall, ToolResult, assistant_tool
from assistant.checks import (
    check_planner,
    check_services,
    check_settings,
    event_log_problems,
    service_problems,
    tool_errors,
    websocket_problems,
)
from assistant.conf import LLM_SETTINGS, SETTINGS, assistant_settings
from assistant.core.registry import ToolRegistry, registry


def ids(messages: Any) -> list[str]:
    return sorted(message.id for message in messages)


def assistant_messages(messages: Any) -> list[Any]:
    """The assistant's messages the project did not silence (as ``manage.py check`` shows)."""
    return [
        message
        for message in messages
        if (message.id or "").startswith("assistant.") and not message.is_silenced()
    ]


# --- the project as configured ---------------------------------------------------------------


@pytest.mark.django_db  # Django's own model checks ask the database about JSONField support
def test_the_test_project_passes_every_assistant_check():
    assert assistant_messages(run_checks()) == []
    assert check_settings() == []
    assert list(tool_errors(registry)) == []


@pytest.mark.django_db
def test_manage_py_check_passes():
    out = StringIO()

    call_command("check", "--fail-level", "WARNING", stdout=out)

    assert "no issues" in out.getvalue()


def test_the_checks_are_registered_with_django():
    configured = {"RESOURCES": {"orders": "testapp.Order"}}
    with override_settings(ASSISTANT={**configured, "PLANNER": "oracle", "COLOUR": "blue"}):
        messages = assistant_messages(run_checks(tags=["assistant"]))

    assert ids(messages) == ["assistant.E002", "assistant.W001"]


def test_an_empty_assistant_setting_is_fine():
    with override_settings(ASSISTANT={}):
        assert check_settings() == []


# --- settings ---------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [["PLANNER", "keywords"], "keywords", None, 42])
def test_e001_the_setting_is_not_a_dict(value):
    with override_settings(ASSISTANT=value):
        messages = check_settings()

    assert ids(messages) == ["assistant.E001"]
    assert messages[0].level == ERROR
    assert messages[0].hint


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("CONFIRMATION_TTL", 0),
        ("CONFIRMATION_TTL", -60),
        ("CONFIRMATION_TTL", "600"),
        ("CONFIRMATION_TTL", True),
        ("CONFIRMATION_TTL", None),
        ("PLANNER", "gpt"),
        ("PLANNER", None),
        ("MAX_MESSAGE_LENGTH", 0),
        ("MAX_MESSAGE_LENGTH", 4000.5),
        ("MAX_MESSAGE_LENGTH", "4000"),
        ("MAX_MESSAGE_LENGTH", True),
        ("THROTTLE_RATE", "fast"),
        ("THROTTLE_RATE", "120"),
        ("THROTTLE_RATE", "many/min"),
        ("THROTTLE_RATE", "120/fortnight"),
        ("THROTTLE_RATE", 120),
        ("REDACTED", None),
        ("REDACTED", 0),
        ("RESOURCES", ["orders"]),
        ("RESOURCES", "testapp.Order"),
    ],
)
def test_e002_a_setting_has_a_bad_value(key, value):
    with override_settings(ASSISTANT={key: value}):
        messages = check_settings()

    assert ids(messages) == ["assistant.E002"]
    assert f"ASSISTANT[{key!r}]" in messages[0].msg
    assert messages[0].level == ERROR
    assert messages[0].hint


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("CONFIRMATION_TTL", 600),
        ("CONFIRMATION_TTL", 0.5),
        ("PLANNER", "keywords"),
        ("PLANNER", "llm"),
        ("MAX_MESSAGE_LENGTH", 1),
        ("THROTTLE_RATE", None),
        ("THROTTLE_RATE", "5/s"),
        ("THROTTLE_RATE", "100/hour"),
        ("THROTTLE_RATE", "1000/day"),
        ("REDACTED", ""),
        ("RESOURCES", {}),
        ("RESOURCES", {"orders": "testapp.Order", "users": "auth.User"}),
        ("AUTODISCOVER", False),
    ],
)
def test_good_values_pass(key, value):
    with override_settings(ASSISTANT={key: value}):
        assert check_settings() == []


def test_settings_are_read_as_their_kind():
    with override_settings(ASSISTANT={"JOB_HEARTBEAT": 5, "LLM": {"TIMEOUT": 30}}):
        heartbeat, timeout = assistant_settings.JOB_HEARTBEAT, assistant_settings.llm["TIMEOUT"]

    assert (heartbeat, type(heartbeat), timeout, type(timeout)) == (5.0, float, 30.0, float)


@pytest.mark.parametrize(
    "label", ["testapp.Invoice", "billing.Order", "Order", "testapp.Order.extra", 42]
)
def test_e003_resources_names_an_unknown_model(label):
    with override_settings(ASSISTANT={"RESOURCES": {"orders": "testapp.Order", "bills": label}}):
        messages = check_settings()

    assert ids(messages) == ["assistant.E003"]
    assert "'bills'" in messages[0].msg
    assert messages[0].hint


def test_w001_an_unknown_key_is_a_warning():
    with override_settings(ASSISTANT={"PLANER": "keywords"}):
        messages = check_settings()

    assert ids(messages) == ["assistant.W001"]
    assert messages[0].level == WARNING
    assert "'PLANER'" in messages[0].msg
    assert "PLANNER" in messages[0].hint


def test_every_problem_is_reported_together():
    with override_settings(
        ASSISTANT={
            "PLANNER": "oracle",
            "CONFIRMATION_TTL": 0,
            "RESOURCES": {"bills": "billing.Invoice"},
            "EXTRA": 1,
        }
    ):
        messages = check_settings()

    assert ids(messages) == [
        "assistant.E002",
        "assistant.E002",
        "assistant.E003",
        "assistant.W001",
    ]


def test_malformed_resources_are_reported_once_not_crashed_on():
    with override_settings(ASSISTANT={"RESOURCES": ["orders"]}):
        assert ids(check_settings()) == ["assistant.E002"]
        assert list(tool_errors(registry)) == []


# --- tools ------------------------------------------------------------------------------------


@pytest.fixture
def site() -> ToolRegistry:
    return ToolRegistry("checks")


def declare(site: ToolRegistry, operation: str = "checked_tool", **options: Any) -> Any:
    """Register an ``order_id`` tool on ``site`` with the given permission options."""

    def handler(call: ToolCall, order_id: int = 0) -> ToolResult:
        return ToolResult(text="ok")

    options.setdefault("risk_level", "safe")
    return assistant_tool(
        operation=operation, domain="tests", description="A checked tool", site=site, **options
    )(handler)


@pytest.mark.parametrize(
    "check",
    [
        "testapp.view_order",
        "testapp.approve_order",
        "auth.change_user",
        "assistant.view_auditentry",
        ("orders", "READ"),
        ("orders", "DELETE"),
        ("orders", "APPROVE"),
        ("reports", "READ"),
        ("anything", "AT_ALL"),
    ],
)
def test_a_resolvable_permission_passes(site, check):
    declare(site, permission_checks=[check])

    assert list(tool_errors(site)) == []


def test_a_public_tool_and_a_valid_object_check_pass(site):
    declare(site, "public_tool", public=True)
    declare(
        site,
        "object_tool",
        permission_checks=["testapp.approve_order"],
        object_check=("order_id", "testapp.Order"),
    )

    assert list(tool_errors(site)) == []


@pytest.mark.parametrize("check", ["billing.view_invoice", "Testapp.view_order"])
def test_e004_a_permission_names_an_app_that_is_not_installed(site, check):
    handler = declare(site, permission_checks=[check])

    messages = list(tool_errors(site))

    assert ids(messages) == ["assistant.E004"]
    assert "'checked_tool'" in messages[0].msg
    assert repr(check.split(".")[0]) in messages[0].msg
    assert messages[0].obj is handler
    assert messages[0].hint


def test_e004_a_mapped_resource_in_an_app_that_is_not_installed(site):
    declare(site, permission_checks=[("invoices", "READ")])

    with override_settings(ASSISTANT={"RESOURCES": {"invoices": "billing.Invoice"}}):
        messages = list(tool_errors(site))

    assert ids(messages) == ["assistant.E004"]
    assert "'billing.view_invoice'" in messages[0].msg


@pytest.mark.parametrize(
    ("check", "permission"),
    [
        ("testapp.fly_order", "testapp.fly_order"),
        ("testapp.view_invoice", "testapp.view_invoice"),
        ("assistant.launch_rockets", "assistant.launch_rockets"),
        (("orders", "DEPLOY"), "testapp.deploy_order"),
    ],
)
def test_e005_a_codename_no_model_of_the_app_defines(site, check, permission):
    handler = declare(site, permission_checks=[check])

    messages = list(tool_errors(site))

    assert ids(messages) == ["assistant.E005"]
    assert f"{permission!r}" in messages[0].msg
    assert "'checked_tool'" in messages[0].msg
    assert messages[0].obj is handler
    assert messages[0].hint


def test_e005_names_the_pair_a_mapped_permission_came_from(site):
    declare(site, permission_checks=[("orders", "DEPLOY")])

    (message,) = tool_errors(site)

    assert "('orders', 'DEPLOY')" in message.msg


def test_e005_is_raised_for_each_bad_check_of_a_tool(site):
    declare(site, permission_checks=["testapp.fly_order", "testapp.view_order", "billing.pay"])

    assert ids(tool_errors(site)) == ["assistant.E004", "assistant.E005"]


def test_a_string_naming_a_permission_the_app_creates_for_a_pair_passes(site):
    # show_report-style tools make the app create assistant.reports_read after migrate;
    # another tool may then name that permission directly.
    declare(site, "by_pair", permission_checks=[("reports", "READ")])
    declare(site, "by_name", permission_checks=["assistant.reports_read"])

    assert list(tool_errors(site)) == []


@pytest.mark.parametrize("model", ["testapp.Invoice", "billing.Order"])
def test_e006_an_object_check_names_an_unknown_model(site, model):
    handler = declare(
        site, permission_checks=["testapp.approve_order"], object_check=("order_id", model)
    )

    messages = list(tool_errors(site))

    assert ids(messages) == ["assistant.E006"]
    assert f"{model!r}" in messages[0].msg
    assert messages[0].obj is handler
    assert messages[0].hint


def test_check_ids_are_not_reused_for_different_problems(site):
    declare(site, "bad_app", permission_checks=["billing.pay"])
    declare(site, "bad_codename", permission_checks=["testapp.fly_order"])
    declare(
        site,
        "bad_model",
        permission_checks=["testapp.approve_order"],
        object_check=("order_id", "testapp.Invoice"),
    )

    by_tool = {message.msg.split("'")[1]: message.id for message in tool_errors(site)}

    assert by_tool == {
        "bad_app": "assistant.E004",
        "bad_codename": "assistant.E005",
        "bad_model": "assistant.E006",
    }


@pytest.mark.django_db
def test_a_validation_task_naming_an_unregistered_rule_is_e007():
    from django.contrib.contenttypes.models import ContentType

    from assistant.checks import check_validation_rules
    from assistant.models import ValidationTask
    from tests.testapp.models import Order

    task = ValidationTask.objects.create(
        name="stale",
        target_type=ContentType.objects.get_for_model(Order),
        rules=[{"name": "llm_review", "options": {}}, {"name": "gone_rule", "options": {}}],
    )

    assert check_validation_rules(databases=None) == []
    errors = check_validation_rules(databases=["default"])
    assert [(error.id, error.obj) for error in errors] == [("assistant.E007", task)]
    assert "'gone_rule'" in errors[0].msg


# --- every key typed, LLM's too -----------------------------------------------------------------


@pytest.mark.parametrize("key", sorted(SETTINGS))
def test_every_setting_accepts_its_default_and_refuses_a_stray_object(key):
    with override_settings(ASSISTANT={key: SETTINGS[key].default}):
        assert check_settings() == []
    with override_settings(ASSISTANT={key: object()}):
        messages = check_settings()

    assert ids(messages) == ["assistant.E002"]
    assert f"ASSISTANT[{key!r}] must be" in messages[0].msg


@pytest.mark.parametrize("key", sorted(LLM_SETTINGS))
def test_every_llm_setting_is_checked_too(key):
    with override_settings(ASSISTANT={"LLM": {key: LLM_SETTINGS[key].default}}):
        assert check_settings() == []
    with override_settings(ASSISTANT={"LLM": {key: object()}}):
        messages = check_settings()

    assert ids(messages) == ["assistant.E002"]
    assert f"ASSISTANT['LLM'][{key!r}] must be" in messages[0].msg


@pytest.mark.parametrize(
    ("where", "typo", "meant"),
    [
        ({}, "PLANER", "PLANNER"),
        ({}, "confirmation_ttl", "CONFIRMATION_TTL"),
        ({}, "EVENTLOG", "EVENT_LOG"),
        ({"LLM": True}, "MODLE", "MODEL"),
        ({"LLM": True}, "BASEURL", "BASE_URL"),
    ],
)
def test_w001_an_unknown_key_names_the_nearest_known_one(where, typo, meant):
    configured = {"LLM": {typo: "x"}} if where else {typo: "x"}
    with override_settings(ASSISTANT=configured):
        messages = check_settings()

    assert ids(messages) == ["assistant.W001"]
    assert f"[{typo!r}]" in messages[0].msg
    assert messages[0].hint.startswith(f"Did you mean {meant!r}?")


def test_a_key_nothing_resembles_gets_the_list_only():
    with override_settings(ASSISTANT={"COLOUR": "blue"}):
        (message,) = check_settings()

    assert message.id == "assistant.W001"
    assert message.hint.startswith("Known settings: ")


# --- services the chat relies on --------------------------------------------------------------


SQLITE = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
POSTGRES = {"default": {"ENGINE": "django.db.backends.postgresql", "NAME": "db"}}
REDIS_LAYER = {"default": {"BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer"}}
MEMORY_LAYER = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
DB_TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}


@pytest.mark.parametrize(
    "layers", [None, {}, {"other": MEMORY_LAYER["default"]}, {"default": {}}, ["default"]]
)
def test_e008_no_channel_layer(layers):
    assert ids(service_problems(layers, SQLITE, DB_TASKS)) == ["assistant.E008"]


def test_e008_through_django_when_channel_layers_is_missing(settings):
    del settings.CHANNEL_LAYERS

    assert "assistant.E008" in ids(check_services())


@pytest.mark.parametrize(
    ("layers", "databases", "expected"),
    [
        (MEMORY_LAYER, SQLITE, []),
        (MEMORY_LAYER, POSTGRES, ["assistant.W002"]),
        (MEMORY_LAYER, {**SQLITE, "reports": POSTGRES["default"]}, ["assistant.W002"]),
        (REDIS_LAYER, POSTGRES, []),
        (REDIS_LAYER, SQLITE, []),
    ],
)
def test_w002_the_in_memory_layer_beside_a_server_database(layers, databases, expected):
    assert ids(service_problems(layers, databases, DB_TASKS)) == expected


@pytest.mark.parametrize(
    ("tasks", "expected"),
    [
        ({"default": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"}}, True),
        ({"default": {"BACKEND": "django.tasks.backends.dummy.DummyBackend"}}, True),
        ({"default": {"BACKEND": "django_tasks.backends.immediate.ImmediateBackend"}}, True),
        (None, True),  # Django's own default is the immediate backend
        (DB_TASKS, False),
    ],
)
def test_w003_jobs_would_run_inline_or_never(tasks, expected):
    messages = service_problems(MEMORY_LAYER, SQLITE, tasks)

    assert ids(messages) == (["assistant.W003"] if expected else [])
    if expected:
        assert "db_worker" in messages[0].hint


def test_the_test_project_silences_what_it_does_deliberately():
    messages = check_services()  # jobs inline in tests; on PostgreSQL the in-memory layer too

    assert "assistant.W003" in ids(messages)
    assert all(message.is_silenced() for message in messages)


# --- the LLM planner --------------------------------------------------------------------------


def test_the_llm_planner_with_a_model_and_openai_passes():
    with override_settings(ASSISTANT={"PLANNER": "llm", "LLM": {"MODEL": "gpt-4o-mini"}}):
        assert check_planner() == []


def test_e010_the_llm_planner_without_a_model():
    with override_settings(ASSISTANT={"PLANNER": "llm"}):
        assert ids(check_planner()) == ["assistant.E010"]
    with override_settings(ASSISTANT={"PLANNER": "llm", "LLM": {"MODEL": ""}}):
        assert ids(check_planner()) == ["assistant.E010"]


def test_e009_the_llm_planner_without_the_openai_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "openai", None)  # as if it were not installed

    with override_settings(ASSISTANT={"PLANNER": "llm", "LLM": {"MODEL": "m"}}):
        messages = check_planner()

    assert ids(messages) == ["assistant.E009"]
    assert "[llm]" in messages[0].hint


def test_the_keyword_planner_needs_neither(monkeypatch):
    monkeypatch.setitem(sys.modules, "openai", None)
    with override_settings(ASSISTANT={"PLANNER": "keywords"}):
        assert check_planner() == []


# --- a resource mapping probably forgotten ----------------------------------------------------


def test_w004_an_unmapped_resource_named_like_an_installed_model(site):
    declare(site, "read_orders", permission_checks=[("orders", "READ")])
    declare(site, "change_orders", permission_checks=[("orders", "UPDATE")])
    declare(site, "read_reports", permission_checks=[("reports", "READ")])

    with override_settings(ASSISTANT={"RESOURCES": {}}):
        messages = list(tool_errors(site))

    assert ids(messages) == ["assistant.W004"]
    assert messages[0].level == WARNING
    assert "change_orders, read_orders" in messages[0].msg
    assert "Did you mean ASSISTANT['RESOURCES'] = {'orders': 'testapp.Order'}?" in messages[0].hint


def test_w004_not_for_a_mapped_resource(site):
    declare(site, "read_orders", permission_checks=[("orders", "READ")])

    with override_settings(ASSISTANT={"RESOURCES": {"orders": "testapp.Order"}}):
        assert list(tool_errors(site)) == []


# --- the websocket: served by an ASGI server, routed where the page connects -----------------

WS_PATH = "/ws/assistant/"
ROUTED = "tests.asgi.application"
HTTP_ONLY = ASGIHandler()  # what a fresh startproject's asgi.py serves: no websocket
ELSEWHERE = ProtocolTypeRouter({"websocket": URLRouter([path("ws/other/", lambda *a: None)])})


def test_w013_no_asgi_server_app_means_runserver_serves_no_websocket():
    messages = websocket_problems(["django.contrib.admin", "assistant"], ROUTED, WS_PATH)

    assert ids(messages) == ["assistant.W013"]
    assert WS_PATH in messages[0].msg
    assert "'daphne' first in INSTALLED_APPS" in messages[0].hint


def test_e018_daphne_without_asgi_application():
    messages = websocket_problems(["daphne", "assistant"], None, WS_PATH)

    assert ids(messages) == ["assistant.E018"]
    assert messages[0].level == ERROR
    assert "ASGI_APPLICATION" in messages[0].hint


def test_e018_an_asgi_application_that_cannot_be_imported():
    assert ids(websocket_problems(["daphne"], "nowhere.asgi.application", WS_PATH)) == [
        "assistant.E018"
    ]


@pytest.mark.parametrize(
    "application", ["tests.test_checks.HTTP_ONLY", "tests.test_checks.ELSEWHERE"]
)
def test_w014_an_asgi_application_that_routes_no_websocket_where_the_page_connects(application):
    messages = websocket_problems(["daphne"], application, WS_PATH)

    assert ids(messages) == ["assistant.W014"]
    assert messages[0].level == WARNING
    assert "websocket_urlpatterns" in messages[0].hint


def test_the_test_projects_asgi_application_routes_the_websocket_through_its_middleware():
    assert websocket_problems(["daphne"], ROUTED, WS_PATH) == []


def test_w013_through_django_when_daphne_is_not_installed(settings):
    settings.INSTALLED_APPS = [app for app in settings.INSTALLED_APPS if app != "daphne"]

    assert "assistant.W013" in ids(run_checks(tags=["assistant"]))


# --- the replay log beside a Redis channel layer ----------------------------------------------


@pytest.mark.parametrize(
    ("layers", "event_log", "expected"),
    [
        (REDIS_LAYER, None, ["assistant.W015"]),
        (
            {"default": {"BACKEND": "channels_redis.core.RedisChannelLayer"}},
            None,
            ["assistant.W015"],
        ),
        (REDIS_LAYER, "redis://127.0.0.1:6379/0", []),
        (MEMORY_LAYER, None, []),
    ],
)
def test_w015_a_redis_channel_layer_with_the_replay_log_in_memory(layers, event_log, expected):
    messages = event_log_problems(layers, event_log)

    assert ids(messages) == expected
    if expected:
        assert "EVENT_LOG" in messages[0].hint


def test_w015_through_django(settings):
    settings.CHANNEL_LAYERS = REDIS_LAYER
    settings.ASSISTANT = {**settings.ASSISTANT, "EVENT_LOG": None}

    assert "assistant.W015" in ids(run_checks(tags=["assistant"]))


# --- HOME_URL ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "home_url", [None, "/", "/ops/", "https://ops.example.com/", "admin:index"]
)
def test_home_url_a_path_a_url_or_a_url_name_passes(home_url):
    with override_settings(ASSISTANT={"HOME_URL": home_url}):
        assert check_settings() == []


@pytest.mark.parametrize("home_url", ["", 42, ["/"]])
def test_e002_home_url_of_the_wrong_type(home_url):
    with override_settings(ASSISTANT={"HOME_URL": home_url}):
        assert ids(check_settings()) == ["assistant.E002"]


def test_e019_home_url_names_no_url_pattern():
    with override_settings(ASSISTANT={"HOME_URL": "dashbaord"}):
        messages = check_settings()

    assert ids(messages) == ["assistant.E019"]
    assert "'dashbaord'" in messages[0].msg
    assert messages[0].hint
