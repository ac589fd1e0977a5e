"""What a validation task may be told to look at: filters, rules and schedules, refused before use."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from assistant.exceptions import InvalidEntities, InvalidTargetFilter
from assistant.models import Job, ValidationRun, ValidationTask
from assistant.validation import (
    MAX_INTERVAL,
    ValidationTaskService,
    Verdict,
    rules,
    run_due_validations,
    validation_rule,
)
from tests.openai_peer import openai_peer as openai_peer  # the fixture
from tests.openai_peer import text
from tests.testapp.models import Dashboard, Environment, Order

pytestmark = pytest.mark.django_db

TASKS = "/assistant/api/validation-tasks/"


def dashboard_has_a_title(dashboard: Dashboard, options: dict[str, Any], run: Any) -> Verdict:
    """A dashboard without a title cannot be found in the list."""
    return Verdict(outcome="pass" if dashboard.title else "fail")


@pytest.fixture(autouse=True)
def _title_rule() -> Any:
    """The rule exists for this module's tests only (other modules count a run's findings)."""
    validation_rule(name="test_dashboard_has_a_title", models=["testapp.Dashboard"])(
        dashboard_has_a_title
    )
    yield
    rules.unregister("test_dashboard_has_a_title")


@pytest.fixture
def admin(django_user_model: Any) -> Any:
    """The superuser whose token and password hash the attacker is after."""
    user = django_user_model.objects.create_superuser("admin", "admin@example.com", "s3cret-pw")
    Token.objects.create(user=user)
    return user


@pytest.fixture
def dashboards(admin: Any) -> list[Dashboard]:
    prod = Environment.objects.create(name="Production", slug="prod", database="default")
    return [
        Dashboard.objects.create(environment=prod, title=title, slug=slug, owner=admin)
        for title, slug in [("Revenue", "revenue"), ("Churn", "churn"), ("Signups", "signups")]
    ]


@pytest.fixture
def attacker(make_user: Callable[..., Any]) -> Any:
    """May create validation tasks and view dashboards: nothing about other users."""
    return make_user("mallory", "assistant.add_validationtask", "testapp.view_dashboard")


def api(user: Any) -> APIClient:
    client = APIClient()
    client.force_login(user)
    return client


def create(user: Any, **payload: Any) -> Any:
    payload.setdefault("target", "testapp.Dashboard")
    payload.setdefault("rules", ["test_dashboard_has_a_title"])
    return api(user).post(TASKS, payload, format="json")


def run_task(task: ValidationTask, capture: Any) -> ValidationRun:
    with capture(execute=True):
        run = ValidationTaskService.trigger_run(task, ValidationRun.Trigger.USER)
    run.refresh_from_db()
    return run


def titles(run: ValidationRun) -> list[str]:
    """The titles of the dashboards the run validated."""
    ids = run.findings.values_list("target_id", flat=True)
    return [Dashboard.objects.get(pk=pk).title for pk in ids]


# The oracle: a filter through a relation answered "how many records match" about other tables.


@pytest.mark.parametrize(
    "key",
    [
        "owner__auth_token__key__startswith",
        "owner__password__startswith",
        "owner__username",
        "owner",
        "owner_id",
        "environment__database",
        "owner__owned_dashboards__title",  # forward, then back through a reverse relation
        "colour",  # not a field of Dashboard at all
    ],
)
def test_a_filter_that_leaves_the_target_model_is_a_400_and_creates_no_task(
    attacker, admin, dashboards, key
):
    response = create(attacker, target_filter={key: Token.objects.get(user=admin).key[:1]})

    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid_target_filter"
    assert list(body["errors"]) == ["target_filter"]
    assert body["errors"]["target_filter"].startswith(f"{key!r}: Dashboard may be filtered only")
    assert not ValidationTask.objects.exists()
    assert not ValidationRun.objects.exists()


def test_whatever_the_guess_the_refusal_is_the_same(attacker, admin, dashboards):
    """Right and wrong token prefixes get the same answer, so the answer says nothing."""
    key = Token.objects.get(user=admin).key
    wrong = "0" if key[0] != "0" else "1"

    answers = [
        create(attacker, target_filter={"owner__auth_token__key__startswith": guess}).json()
        for guess in (key[:1], wrong)
    ]

    assert answers[0]["detail"].replace(repr(key[:1]), "") == answers[1]["detail"].replace(
        repr(wrong), ""
    )
    assert answers[0]["errors"] == answers[1]["errors"]


@pytest.mark.parametrize(
    "key",
    [
        "auth_token__key__startswith",
        "owned_dashboards__title",
        "password__startswith",
        "groups__name",
    ],
)
def test_on_the_user_model_reverse_relations_and_the_password_are_refused(make_user, admin, key):
    viewer = make_user("ursula", "assistant.add_validationtask", "auth.view_user")

    response = create(viewer, target="auth.User", rules=None, target_filter={key: "p"})

    assert response.status_code == 400
    assert response.json()["code"] == "invalid_target_filter"
    assert not ValidationTask.objects.exists()


@pytest.mark.parametrize(
    "key",
    [
        "title__regex",
        "title__iregex",
        "title__lower",  # a transform
        "title__lower__startswith",
        "charts__0__sql__startswith",  # a JSON key path
        "created_at__year",
        "title__search",
    ],
)
def test_a_lookup_outside_the_fixed_set_is_refused(attacker, dashboards, key):
    response = create(attacker, target_filter={key: "("})

    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid_target_filter"
    assert repr(key) in body["errors"]["target_filter"]
    assert not ValidationTask.objects.exists()


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("title", {"$ne": ""}),
        ("title", ["Revenue"]),
        ("title__startswith", ["R"]),
        ("charts__contains", [{"type": "line"}]),
        ("pk__in", 5),
        ("pk__in", [[1]]),
        ("pk__in", list(range(1001))),
        ("pk__range", [1]),
        ("pk__range", [1, 2, 3]),
        ("published__isnull", "yes"),
        ("pk__in", [2**70]),
        ("pk", -(2**64)),
        ("title", "a\x00b"),
        ("title", "x" * 1001),
        ("pk", "not-a-number"),
        ("title\x00", "x"),
        ("created_at__gte", "2024-01-01"),  # no time zone
        ("documented_at__range", ["2024-01-01T00:00:00Z", "soon"]),
        ("published", "maybe"),
    ],
)
def test_a_value_of_the_wrong_shape_is_refused_naming_the_key(attacker, dashboards, key, value):
    response = create(attacker, target_filter={key: value})

    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid_target_filter"
    assert body["errors"]["target_filter"].startswith(repr(key))
    assert not ValidationTask.objects.exists()


def test_too_many_lookups_are_refused(attacker, dashboards):
    response = create(attacker, target_filter={f"title__{i}": "x" for i in range(21)})

    assert response.status_code == 400
    assert response.json()["code"] == "invalid_target_filter"
    assert response.json()["errors"] == {"target_filter": "at most 20 lookups"}
    assert not ValidationTask.objects.exists()


@pytest.mark.parametrize(
    ("target_filter", "expected"),
    [
        ({"pk__in": "first-two"}, ["Revenue", "Churn"]),
        ({"title__icontains": "U"}, ["Revenue", "Churn", "Signups"]),
        ({"slug__startswith": "s", "published": False}, ["Signups"]),
        ({"title__in": ["Churn", "Nope"]}, ["Churn"]),
        ({"pk__range": "first-two"}, ["Revenue", "Churn"]),
        ({"description__isnull": False, "title__gte": "R"}, ["Revenue", "Signups"]),
        (
            {"created_at__lt": "2999-01-01T00:00:00+00:00", "version": 1},
            ["Revenue", "Churn", "Signups"],
        ),
    ],
)
def test_plain_lookups_on_the_models_own_fields_select_the_targets(
    attacker, dashboards, django_capture_on_commit_callbacks, target_filter, expected
):
    ids = [dashboards[0].pk, dashboards[1].pk]
    target_filter = {k: ids if v == "first-two" else v for k, v in target_filter.items()}

    response = create(attacker, target_filter=target_filter)

    assert response.status_code == 201, response.json()
    run = run_task(ValidationTask.objects.get(), django_capture_on_commit_callbacks)
    assert sorted(titles(run)) == sorted(expected)


def test_a_setting_names_the_fields_a_model_may_be_filtered_by(
    settings, attacker, dashboards, django_capture_on_commit_callbacks
):
    settings.ASSISTANT = {
        **settings.ASSISTANT,
        "VALIDATION_FILTER_FIELDS": {"testapp.Dashboard": ["slug", "owner_id"]},
    }

    accepted = create(attacker, target_filter={"owner_id": dashboards[0].owner_id, "slug": "churn"})
    refused = create(attacker, target_filter={"title": "Churn"})

    assert accepted.status_code == 201, accepted.json()
    assert refused.status_code == 400
    assert "owner_id, pk, slug" in refused.json()["errors"]["target_filter"]
    run = run_task(ValidationTask.objects.get(), django_capture_on_commit_callbacks)
    assert titles(run) == ["Churn"]


def test_the_service_refuses_the_same_filters_as_the_api(admin, dashboards):
    with pytest.raises(InvalidTargetFilter) as refused:
        ValidationTaskService.create_task(
            name="x",
            target="testapp.Dashboard",
            owner=admin,
            target_filter={"owner__password__startswith": "pbkdf2"},
        )

    assert refused.value.code == "invalid_target_filter"
    assert refused.value.key == "owner__password__startswith"
    assert not ValidationTask.objects.exists()


@pytest.mark.parametrize("target_filter", [{5: "x"}, {None: "x"}, ["title"], "title=Churn"])
def test_the_service_refuses_a_filter_that_is_not_an_object_of_text_keys(admin, target_filter):
    with pytest.raises(InvalidTargetFilter):
        ValidationTaskService.create_task(
            name="x", target="testapp.Dashboard", target_filter=target_filter
        )

    assert not ValidationTask.objects.exists()


@pytest.mark.parametrize("pk", ["²", "\u0661", "9" * 5000, "+1", " 1", "1e3"])
def test_a_target_id_that_is_not_plain_digits_is_a_400(attacker, dashboards, pk):
    response = create(attacker, target=f"testapp.Dashboard:{pk}")

    assert response.status_code == 400
    assert list(response.json()["errors"]) == ["target"]
    assert not ValidationTask.objects.exists()


# A task stored before the policy: its run fails and the relation is never queried.


@pytest.mark.parametrize(
    "target_filter",
    [
        {"owner__password__startswith": "pbkdf2_"},
        {"owner__auth_token__key__startswith": "a"},
        {"title__regex": "("},
        {"title": {"nested": 1}},
    ],
)
def test_a_stored_task_with_a_forbidden_filter_fails_its_run_without_querying(
    admin, dashboards, django_capture_on_commit_callbacks, target_filter
):
    task = legacy_task(admin, target_filter)

    with CaptureQueriesContext(connection) as queries:
        run = run_task(task, django_capture_on_commit_callbacks)

    assert run.status == ValidationRun.Status.ERRORED
    assert run.error.startswith("InvalidTargetFilter: ")
    assert repr(next(iter(target_filter))) in run.error
    assert Job.objects.get(pk=run.job_id).status == Job.Status.FAILED
    assert (run.passed, run.failed, run.warned, run.findings.count()) == (0, 0, 0, 0)
    touched = [q["sql"] for q in queries.captured_queries if "testapp_dashboard" in q["sql"]]
    assert touched == []


def test_a_stored_task_with_an_allowed_filter_still_runs(
    admin, dashboards, django_capture_on_commit_callbacks
):
    task = legacy_task(admin, {"slug__in": ["churn", "revenue"]})

    with CaptureQueriesContext(connection) as queries:
        run = run_task(task, django_capture_on_commit_callbacks)

    assert (run.status, run.passed) == (ValidationRun.Status.PASSED, 2)
    assert any("testapp_dashboard" in q["sql"] for q in queries.captured_queries)


def legacy_task(owner: Any, target_filter: dict[str, Any]) -> ValidationTask:
    """A row written straight to the table, as an older release (or a shell) could."""
    from django.contrib.contenttypes.models import ContentType

    return ValidationTask.objects.create(
        name="Old dashboards check",
        owner=owner,
        target_type=ContentType.objects.get_for_model(Dashboard),
        target_filter=target_filter,
        rules=[{"name": "test_dashboard_has_a_title", "options": {}}],
    )


# Rules and schedules: every malformed one is a 400 naming the field, never a 500.


@pytest.mark.parametrize(
    "rules",
    [
        [5],
        [None],
        [["test_dashboard_has_a_title"]],
        [{"name": 5}],
        [{"options": {}}],
        [{"name": "test_dashboard_has_a_title", "options": 5}],
        [{"name": "test_dashboard_has_a_title", "options": [], "extra": 1}],
        [{"name": "llm_review", "options": {"prompt": "judge \x00 this"}}],
        [{"name": "llm_review", "options": {"a\x00": "b"}}],
        ["test_dashboard_has_a_title"] * 51,
        {"name": "test_dashboard_has_a_title"},
    ],
)
def test_a_malformed_rule_is_a_400_naming_rules(attacker, dashboards, rules):
    response = create(attacker, rules=rules)

    assert response.status_code == 400
    body = response.json()
    assert body["code"] in ("invalid_entities", "invalid")
    assert list(body["errors"]) == ["rules"]
    assert not ValidationTask.objects.exists()


@pytest.mark.parametrize(
    "options",
    [
        {"fields": ["owner"]},
        {"fields": ["environment_id"]},
        {"fields": "title"},
        {"fields": [5]},
        {"prompt": "{text.__class__.__init__}"},
        {"prompt": "{text:{requirement.__class__}}"},
        {"prompt": "{0} {}"},
        {"prompt": "unbalanced {"},
        {"requirement": 5},
    ],
)
def test_llm_review_options_that_read_past_the_record_are_a_400(attacker, dashboards, options):
    response = create(attacker, rules=[{"name": "llm_review", "options": options}])

    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid_entities"
    assert body["errors"]["rules"].startswith("rule 0: options: ")
    assert not ValidationTask.objects.exists()


def test_llm_review_may_read_the_models_own_fields_with_a_plain_prompt(attacker, dashboards):
    options = {"fields": ["title", "slug"], "prompt": "Does {text!r} meet {requirement}?"}

    response = create(attacker, rules=[{"name": "llm_review", "options": options}])

    assert response.status_code == 201, response.json()


def test_a_stored_llm_review_that_reads_a_relation_never_asks_the_llm(
    settings, openai_peer, admin, dashboards, django_capture_on_commit_callbacks
):
    settings.ASSISTANT = {**settings.ASSISTANT, "LLM": {"BASE_URL": openai_peer.url}}
    openai_peer.script(text('{"verdict": "PASS", "reason": "fine"}'))
    task = legacy_task(admin, {"slug": "churn"})
    options = {"fields": ["owner"], "requirement": "the owner's hash starts with pbkdf2"}
    ValidationTask.objects.filter(pk=task.pk).update(
        rules=[{"name": "llm_review", "options": options}]
    )
    task.refresh_from_db()

    run = run_task(task, django_capture_on_commit_callbacks)

    (finding,) = run.findings.all()
    assert finding.outcome == "warn"
    assert finding.message.startswith("the rule's options are refused: fields: 'owner'")
    assert openai_peer.requests == []


@pytest.mark.parametrize(
    "schedule",
    [
        10**30,
        MAX_INTERVAL + 1,
        2**31,
        -1,
        "0 0 31 2 *",  # February the 31st never comes
        "*" * 5000,
        "0 3 * * *\x00",
        "9" * 5000,
        {"cron": "0 3 * * *"},
    ],
)
def test_a_huge_or_malformed_schedule_is_a_400_naming_schedule(attacker, dashboards, schedule):
    response = create(attacker, schedule=schedule)

    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid_entities"
    assert list(body["errors"]) == ["schedule"]
    assert not ValidationTask.objects.exists()


def test_the_longest_interval_is_accepted(attacker, dashboards):
    response = create(attacker, schedule=MAX_INTERVAL)

    assert response.status_code == 201, response.json()
    assert ValidationTask.objects.get().interval_seconds == MAX_INTERVAL


def test_a_stored_cron_that_never_fires_does_not_stop_the_other_schedules(admin, orders_task):
    never = legacy_task(admin, {})
    ValidationTask.objects.filter(pk=never.pk).update(
        schedule=ValidationTask.Schedule.CRON, cron="0 0 31 2 *", next_run_at=orders_task
    )

    started = run_due_validations()

    assert len(started) == 2
    never.refresh_from_db()
    assert never.next_run_at is None  # it will not come round again


@pytest.fixture
def orders_task(admin: Any) -> Any:
    """An hourly orders task that is due; returns the moment it was due."""
    from django.utils import timezone

    Order.objects.create(reference="ORD-1")
    task = ValidationTaskService.create_task(
        name="Orders", target="testapp.Order", owner=admin, schedule=3600, rules=None
    )
    due = timezone.now() - timezone.timedelta(minutes=1)
    ValidationTask.objects.filter(pk=task.pk).update(next_run_at=due)
    return due


def test_the_service_refuses_an_over_long_name(admin, dashboards):
    with pytest.raises(InvalidEntities) as refused:
        ValidationTaskService.create_task(name="x" * 201, target="testapp.Dashboard")

    assert list(refused.value.errors) == ["name"]
    assert not ValidationTask.objects.exists()


# The admin's form holds edited tasks to the same rules.


@pytest.mark.parametrize(
    ("field", "changes"),
    [
        ("target_filter", {"target_filter": '{"owner__password__startswith": "pbkdf2"}'}),
        ("rules", {"rules": "[5]"}),
        ("schedule", {"schedule": "interval", "interval_seconds": str(MAX_INTERVAL + 1)}),
        ("schedule", {"schedule": "cron", "cron": "0 0 31 2 *"}),
    ],
)
def test_the_admin_form_refuses_what_the_api_refuses(admin, dashboards, field, changes):
    from django.contrib.contenttypes.models import ContentType

    client = Client()
    client.force_login(admin)
    form = {
        "name": "Edited in the admin",
        "target_type": ContentType.objects.get_for_model(Dashboard).pk,
        "target_id": "",
        "target_filter": "{}",
        "rules": '[{"name": "test_dashboard_has_a_title", "options": {}}]',
        "schedule": "none",
        "interval_seconds": "",
        "cron": "",
        "enabled": "on",
        **changes,
    }

    response = client.post("/admin/assistant/validationtask/add/", form)

    assert response.status_code == 200  # the form again, with the error
    assert field in response.context["adminform"].form.errors
    assert not ValidationTask.objects.exists()


def test_the_admin_form_saves_a_task_with_an_allowed_filter(admin, dashboards):
    from django.contrib.contenttypes.models import ContentType

    client = Client()
    client.force_login(admin)

    response = client.post(
        "/admin/assistant/validationtask/add/",
        {
            "name": "Edited in the admin",
            "target_type": ContentType.objects.get_for_model(Dashboard).pk,
            "target_filter": '{"slug__in": ["churn"]}',
            "rules": '["test_dashboard_has_a_title"]',
            "schedule": "none",
            "enabled": "on",
        },
    )

    assert response.status_code == 302, response.context["adminform"].form.errors
    assert ValidationTask.objects.get().target_filter == {"slug__in": ["churn"]}


def test_a_user_model_is_filtered_by_its_own_fields_but_never_its_password():
    from assistant.validation import filterable_fields

    fields = filterable_fields(get_user_model())

    assert {"pk", "username", "email", "is_staff"} <= set(fields)
    assert "password" not in fields


@pytest.mark.parametrize(
    "listed",
    [
        ["testapp.Dashboard"],
        {"testapp.Nothing": ["slug"]},
        {"testapp.Dashboard": "slug"},
        {"testapp.Dashboard": ["owner__username"]},
        {"testapp.Dashboard": ["colour"]},
    ],
)
def test_a_filter_field_setting_that_names_no_own_field_is_check_e002(listed):
    from django.test import override_settings

    from assistant.checks import check_settings

    with override_settings(ASSISTANT={"VALIDATION_FILTER_FIELDS": listed}):
        messages = check_settings()

    assert [message.id for message in messages] == ["assistant.E002"]
    assert "VALIDATION_FILTER_FIELDS" in messages[0].msg


def test_a_filter_field_setting_of_own_columns_passes_the_checks():
    from django.test import override_settings

    from assistant.checks import check_settings

    listed = {"testapp.Dashboard": ["slug", "owner_id"], "testapp.order": ["status"]}
    with override_settings(ASSISTANT={"VALIDATION_FILTER_FIELDS": listed}):
        assert check_settings() == []
