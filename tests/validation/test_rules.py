"""The built-in validation rules: llm_review and tool_access_matrix."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.utils import translation

from assistant.core.registry import registry
from assistant.models import ValidationRun, ValidationTask
from assistant.validation import ValidationTaskService
from tests.conftest import perm
from tests.openai_peer import closed_port_url, error, text
from tests.openai_peer import openai_peer as openai_peer  # the fixture
from tests.testapp.models import Order
from tests.validations import counted, counts, findings, task_for
from tests.validations import orders as orders  # a fixture
from tests.validations import run_now as run_now  # a fixture

pytestmark = pytest.mark.django_db


# llm_review


@pytest.fixture
def llm(settings: Any, openai_peer: Any) -> Any:
    """The configured LLM is the local OpenAI peer."""
    settings.ASSISTANT = {
        **django_settings.ASSISTANT,
        "LLM": {"BASE_URL": openai_peer.url, "MODEL": "test-model", "TIMEOUT": 5},
    }
    return openai_peer


def test_without_an_llm_configured_llm_review_warns_and_never_passes(run_now, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    Order.objects.create(reference="ORD-1")
    task = task_for(rules=["llm_review"])

    run = run_now(task)

    assert run.status == ValidationRun.Status.WARNED
    assert findings(run) == [("llm_review", "ORD-1", "warn", "no LLM configured")]


def test_the_llm_passes_a_record_with_its_reason(run_now, llm):
    llm.script(text('{"verdict": "PASS", "reason": "The reference is well formed."}'))
    Order.objects.create(reference="ORD-1", status="open")
    task = task_for(
        rules=[
            {
                "name": "llm_review",
                "options": {"fields": ["reference", "status"], "requirement": "it is open"},
            }
        ]
    )

    run = run_now(task)

    assert run.status == ValidationRun.Status.PASSED
    assert findings(run) == [("llm_review", "ORD-1", "pass", "The reference is well formed.")]
    assert run.findings.get().details == {"model": "test-model"}
    (request,) = llm.requests
    assert request["model"] == "test-model"
    assert not request.get("stream")
    (message,) = request["messages"]
    assert message["role"] == "user"
    assert "it is open" in message["content"]
    assert "reference: ORD-1\nstatus: open" in message["content"]


def test_the_llm_fails_a_record_with_its_reason(run_now, llm):
    llm.script(text('Here you go: {"verdict": "fail", "reason": "No customer is named."}'))
    Order.objects.create(reference="ORD-1")

    run = run_now(task_for(rules=["llm_review"]))

    assert run.status == ValidationRun.Status.FAILED
    assert findings(run) == [("llm_review", "ORD-1", "fail", "No customer is named.")]
    assert "ORD-1" in llm.requests[0]["messages"][0]["content"]


def test_the_llm_may_warn_with_its_reason(run_now, llm):
    llm.script(text('{"verdict": "WARN", "reason": "The amount looks low."}'))
    Order.objects.create(reference="ORD-1")

    run = run_now(task_for(rules=["llm_review"]))

    assert findings(run) == [("llm_review", "ORD-1", "warn", "The amount looks low.")]


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (text("Looks fine to me!"), "the LLM gave no verdict"),
        (text('{"verdict": "MAYBE", "reason": "Hard to say."}'), "the LLM answered 'MAYBE'"),
        (error(500, "The model is overloaded."), "the LLM gave no verdict"),
    ],
    ids=["garbage", "unknown-verdict", "http-error"],
)
def test_an_llm_answer_that_is_no_verdict_is_a_warning_never_a_pass(run_now, llm, reply, message):
    llm.script(reply)
    Order.objects.create(reference="ORD-1")

    run = run_now(task_for(rules=["llm_review"]))

    assert run.status == ValidationRun.Status.WARNED
    ((rule, target, outcome, said),) = findings(run)
    assert (rule, target, outcome) == ("llm_review", "ORD-1", "warn")
    assert said.startswith(message)


def test_an_unreachable_llm_is_a_warning(run_now, settings):
    settings.ASSISTANT = {
        **django_settings.ASSISTANT,
        "LLM": {"BASE_URL": closed_port_url(), "MODEL": "test-model", "TIMEOUT": 2},
    }
    Order.objects.create(reference="ORD-1")

    run = run_now(task_for(rules=["llm_review"]))

    assert [outcome for _, _, outcome, _ in findings(run)] == ["warn"]
    assert findings(run)[0][3].startswith("the LLM gave no verdict")


def test_each_target_gets_its_own_llm_verdict(run_now, llm, orders):
    llm.script(
        text('{"verdict": "PASS", "reason": "ok"}'),
        text('{"verdict": "PASS", "reason": "ok"}'),
        text('{"verdict": "FAIL", "reason": "bad prefix"}'),
    )

    run = run_now(task_for(rules=["llm_review"]))

    assert [(target, outcome) for _, target, outcome, _ in findings(run)] == [
        ("ORD-1", "pass"),
        ("ORD-2", "pass"),
        ("bad-3", "fail"),
    ]
    assert counts(run) == {"passed": 2, "failed": 1, "warned": 0}
    assert llm.unplayed == 0


# tool_access_matrix


PUBLIC = sorted(tool.operation for tool in registry if tool.public)


@pytest.fixture
def roles() -> dict[str, Group]:
    readers = Group.objects.create(name="order readers")
    readers.permissions.set([perm("testapp.view_order")])
    approvers = Group.objects.create(name="approvers")
    approvers.permissions.set([perm("testapp.view_order"), perm("testapp.approve_order")])
    return {
        "readers": readers,
        "approvers": approvers,
        "nobody": Group.objects.create(name="nobody"),
    }


def matrix_task(roles_expected: dict[str, list[str]]) -> ValidationTask:
    return ValidationTaskService.create_task(
        name="Tool access",
        target="auth.Group",
        rules=[{"name": "tool_access_matrix", "options": {"roles": roles_expected}}],
    )


def validation_users() -> list[str]:
    return list(
        get_user_model()
        .objects.filter(username__startswith="__validation_")
        .values_list("username", flat=True)
    )


def test_every_role_seeing_exactly_its_expected_tools_passes(run_now, roles):
    task = matrix_task(
        {
            "order readers": [*PUBLIC, "list_orders", "export_orders"],
            "approvers": [*PUBLIC, "list_orders", "export_orders", "approve_order"],
            "nobody": PUBLIC,
        }
    )

    run = run_now(task)

    assert run.status == ValidationRun.Status.PASSED, findings(run)
    # options are JSON: PostgreSQL's jsonb does not keep the roles in the order given
    assert sorted(findings(run)) == [
        ("tool_access_matrix", "", "pass", f"role 'approvers' sees {len(PUBLIC) + 3} tools"),
        ("tool_access_matrix", "", "pass", f"role 'nobody' sees {len(PUBLIC)} tools"),
        ("tool_access_matrix", "", "pass", f"role 'order readers' sees {len(PUBLIC) + 2} tools"),
    ]
    assert run.findings.filter(target_type__isnull=False).count() == 0
    assert validation_users() == []


def test_a_run_in_french_records_its_findings_in_french(run_now, roles):
    task = matrix_task({"nobody": PUBLIC, "ghosts": []})

    with translation.override("fr"):
        run = run_now(task)

    assert sorted(message for *_, message in findings(run)) == [
        "le rôle 'ghosts' n’existe pas",
        f"le rôle 'nobody' voit {len(PUBLIC)} outils",
    ]


def test_a_role_whose_catalog_differs_fails_naming_the_missing_and_unexpected_tools(run_now, roles):
    task = matrix_task(
        {
            "order readers": [*PUBLIC, "list_orders", "show_report"],
            "nobody": PUBLIC,
        }
    )

    run = run_now(task)

    assert run.status == ValidationRun.Status.FAILED
    assert counts(run) == counted(run) == {"passed": 1, "failed": 1, "warned": 0}
    failing = run.findings.get(outcome="fail")
    assert failing.message == "role 'order readers': catalog differs from what is expected"
    assert failing.details == {"missing": ["show_report"], "unexpected": ["export_orders"]}


def test_forgetting_the_public_tools_shows_them_as_unexpected(run_now, roles):
    run = run_now(matrix_task({"nobody": []}))

    assert run.findings.get().details == {"missing": [], "unexpected": PUBLIC}


def test_a_role_that_does_not_exist_fails(run_now, roles):
    run = run_now(matrix_task({"ghosts": PUBLIC}))

    assert run.status == ValidationRun.Status.FAILED
    assert findings(run) == [("tool_access_matrix", "", "fail", "role 'ghosts' does not exist")]


def test_the_throwaway_role_members_are_rolled_back(run_now, roles):
    users_before = get_user_model().objects.count()

    run_now(matrix_task({"order readers": PUBLIC, "approvers": PUBLIC, "nobody": PUBLIC}))

    assert validation_users() == []
    assert get_user_model().objects.count() == users_before
    assert list(roles["readers"].user_set.all()) == []
