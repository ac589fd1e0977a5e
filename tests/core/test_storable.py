"""A call that cannot be audited never runs, and nothing a handler returns can break a write."""

from __future__ import annotations

import json
from typing import Any

import pytest

from assistant.core.storable import storable, storable_text, unstorable
from assistant.dispatch.door import dispatch
from assistant.exceptions import InvalidMessage
from assistant.models import AuditEntry, Conversation, Job, Message, PendingAction
from assistant.turns.messages import check_message
from tests.clients import post_raw
from tests.testapp.assistant_tools import RECORDED

NUL_AND_SURROGATES = "a\x00b\ud800c\udc80"

# Raw JSON bodies: json.dumps writes a lone surrogate as a \ud800 escape, as a client would.
UNSTORABLE_CALLS = {
    "nul-value": (
        {"name": "x\x00y"},
        {"name": "contains a NUL character or an unpaired surrogate"},
    ),
    "surrogate-value": (
        {"name": "x\ud800"},
        {"name": "contains a NUL character or an unpaired surrogate"},
    ),
    "surrogate-key": ({"\udc80": 1}, {"\ufffd": "unknown entity"}),
    "nul-key": ({"na\x00me": "x"}, {"na\ufffdme": "unknown entity"}),
    "nested-surrogate": (
        {"meta": {"list": [1, {"deep": "\udc80"}]}},
        {"meta": "contains a NUL character or an unpaired surrogate"},
    ),
    "nested-surrogate-key": ({"meta": {"\ud800": 1}}, {"meta": "has a key that is not plain text"}),
    "huge-integer-for-a-float": ({"ratio": 10**400}, {"ratio": "is too large a number"}),
    "overflowing-float": ({"ratio": float("inf")}, {"ratio": "is not a finite number"}),
    "integer-beyond-64-bits": (
        {"count": 2**63},
        {"count": "must fit in 64 bits (between -2**63 and 2**63-1)"},
    ),
    "over-long-string": ({"name": "x" * 10_001}, {"name": "must be at most 10000 characters long"}),
}


def assert_refused_and_audited(superuser: Any, entities: dict[str, Any], errors: Any) -> None:
    RECORDED.clear()

    response = post_raw(superuser, "dispatch", {"operation": "record_call", "entities": entities})

    assert response.status_code == 400
    body = response.json()
    assert (body["code"], body["errors"]) == ("invalid_entities", errors)
    assert list(AuditEntry.objects.values_list("operation", "decision")) == [
        ("record_call", "invalid")
    ]
    assert RECORDED == []  # the handler never ran


@pytest.mark.django_db
@pytest.mark.parametrize(("entities", "errors"), UNSTORABLE_CALLS.values(), ids=UNSTORABLE_CALLS)
def test_unstorable_entities_are_refused_audited_and_never_run(
    superuser: Any, entities: dict[str, Any], errors: dict[str, str]
) -> None:
    assert_refused_and_audited(superuser, entities, errors)


@pytest.mark.postgres
@pytest.mark.django_db
@pytest.mark.parametrize(("entities", "errors"), UNSTORABLE_CALLS.values(), ids=UNSTORABLE_CALLS)
def test_unstorable_entities_are_refused_and_audited_on_postgresql(
    superuser: Any, entities: dict[str, Any], errors: dict[str, str]
) -> None:
    assert_refused_and_audited(superuser, entities, errors)


@pytest.mark.django_db
def test_the_refused_call_is_audited_with_what_could_be_stored(superuser: Any) -> None:
    post_raw(
        superuser,
        "dispatch",
        {"operation": "record_call", "entities": {"name": "x\x00", "\ud800": "y"}},
    )

    entry = AuditEntry.objects.get()
    assert entry.entities == {"name": "x\ufffd", "\ufffd": "[redacted]"}
    assert "\ufffd: unknown entity" in entry.error


# -- what a handler returns or raises is stored, whatever it holds -----------------------------


def assert_stored_after_the_run(superuser: Any) -> None:
    garbled = storable_text("NUL \x00, lone \ud800 and \udc80")

    replied = post_raw(
        superuser, "dispatch", {"operation": "record_call", "entities": {"reply": "garbled"}}
    )
    raised = post_raw(
        superuser, "dispatch", {"operation": "record_call", "entities": {"reply": "raise"}}
    )

    assert (replied.status_code, replied.json()["decision"]) == (200, "executed")
    assert replied.json()["text"] == garbled
    assert (raised.status_code, raised.json()["decision"]) == (200, "failed")
    entries = AuditEntry.objects.order_by("pk")
    assert [entry.decision for entry in entries] == ["executed", "failed"]
    assert entries[1].error == f"RuntimeError: {garbled}"


@pytest.mark.django_db
def test_a_reply_or_error_that_cannot_be_stored_is_stored_sanitised(superuser: Any) -> None:
    assert_stored_after_the_run(superuser)


@pytest.mark.postgres
@pytest.mark.django_db
def test_a_reply_or_error_that_cannot_be_stored_is_stored_sanitised_on_postgresql(
    superuser: Any,
) -> None:
    assert_stored_after_the_run(superuser)


@pytest.mark.django_db
def test_a_turn_whose_tool_replies_unstorable_text_is_stored(superuser: Any) -> None:
    garbled = storable_text("NUL \x00, lone \ud800 and \udc80")

    response = post_raw(superuser, "messages", {"message": "record call reply=garbled"})

    assert response.status_code == 201, response.json()
    reply = Message.objects.get(role=Message.Role.ASSISTANT)
    assert garbled in reply.text
    assert reply.tool_calls[0]["text"] == garbled
    assert reply.actions == [{"type": garbled, garbled: [garbled]}]


@pytest.mark.django_db
@pytest.mark.parametrize("text", ["hello\x00", "hello \ud800", "\udc80 there"])
def test_a_message_with_nul_or_a_lone_surrogate_is_refused(superuser: Any, text: str) -> None:
    response = post_raw(superuser, "messages", {"message": text})

    assert response.status_code == 400
    assert response.json()["code"] == "invalid"  # the request's own field check says which
    assert list(response.json()["errors"]) == ["message"]
    assert (Conversation.objects.count(), Message.objects.count()) == (0, 0)


@pytest.mark.parametrize("text", ["hello\x00", "hello \ud800", "\udc80 there"])
def test_every_transport_refuses_a_message_with_nul_or_a_lone_surrogate(text: str) -> None:
    with pytest.raises(InvalidMessage, match="a NUL character or an unpaired surrogate"):
        check_message(text)


@pytest.mark.django_db
@pytest.mark.parametrize("operation", ["ping\x00", "ping\ud800"])
def test_an_unstorable_operation_name_is_a_400_over_rest(superuser: Any, operation: str) -> None:
    response = post_raw(superuser, "dispatch", {"operation": operation, "entities": {}})

    assert (response.status_code, response.json()["code"]) == (400, "invalid")
    assert AuditEntry.objects.count() == 0


@pytest.mark.django_db
def test_an_unknown_operation_with_a_surrogate_is_audited(superuser: Any) -> None:
    outcome = dispatch("ping\ud800", {}, user=superuser, source="websocket")

    assert outcome.decision == "unknown"
    assert list(AuditEntry.objects.values_list("operation", "decision")) == [
        ("ping\ufffd", "unknown")
    ]


# -- the models store what they are given, made storable ---------------------------------------


def assert_models_store_unstorable_text(superuser: Any) -> None:
    garbled = storable_text(NUL_AND_SURROGATES)
    conversation = Conversation.objects.create(user=superuser, title=NUL_AND_SURROGATES)
    message = Message.objects.create(
        conversation=conversation,
        role=Message.Role.ASSISTANT,
        text=NUL_AND_SURROGATES,
        tool_calls=[{NUL_AND_SURROGATES: NUL_AND_SURROGATES}],
    )
    action = PendingAction.open(
        user=superuser,
        operation="record_call",
        entities={"name": NUL_AND_SURROGATES},
        ttl_seconds=60,
        summary=NUL_AND_SURROGATES,
    )
    job = Job.objects.create(function="f.g", user=superuser, status=Job.Status.RUNNING)
    job.report(50, NUL_AND_SURROGATES)
    job.finish(Job.Status.FAILED, error=NUL_AND_SURROGATES)

    conversation.refresh_from_db()
    message.refresh_from_db()
    action.refresh_from_db()
    job.refresh_from_db()
    assert conversation.title == garbled
    assert (message.text, message.tool_calls) == (garbled, [{garbled: garbled}])
    assert (action.entities, action.summary) == ({"name": garbled}, garbled)
    assert (job.progress_message, job.error) == (garbled, garbled)


@pytest.mark.django_db
def test_models_store_text_with_nul_and_surrogates_sanitised(superuser: Any) -> None:
    assert_models_store_unstorable_text(superuser)


@pytest.mark.postgres
@pytest.mark.django_db
def test_models_store_text_with_nul_and_surrogates_sanitised_on_postgresql(
    superuser: Any,
) -> None:
    assert_models_store_unstorable_text(superuser)


@pytest.mark.django_db
def test_plain_unicode_reaches_the_handler_and_the_audit_unchanged(superuser: Any) -> None:
    RECORDED.clear()

    outcome = dispatch("record_call", {"name": "café ☕ 😀"}, user=superuser)

    assert outcome.decision == "executed"
    assert RECORDED == [{"name": "café ☕ 😀"}]
    assert AuditEntry.objects.get().entities == {"name": "café ☕ 😀"}


# -- the helper itself -------------------------------------------------------------------------


def test_storable_text_replaces_nul_and_lone_surrogates_only() -> None:
    assert storable_text("a\x00b\ud800c\udc80 é ☕ 😀") == "a\ufffdb\ufffdc\ufffd é ☕ 😀"


def nested(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = [value]
    return value


def test_storable_makes_any_value_plain_json_utf8_can_encode() -> None:
    value = {
        "\ud800": ("\x00", {1, 2}),
        7: float("nan"),
        "big": 10**400,
        "deep": nested(40),
        "object": object,
    }

    stored = storable(value)

    text = json.dumps(stored, ensure_ascii=False, allow_nan=False)
    text.encode("utf-8")
    assert "\x00" not in text
    assert stored["\ufffd"] == ["\ufffd", [1, 2]]
    assert stored["7"] == "nan"
    assert stored["big"] == "<1329-bit integer>"


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("fine ☕", None),
        ({"a": [1, 2.5, None, True]}, None),
        ("\x00", "contains a NUL character or an unpaired surrogate"),
        ([{"k": "\ud800"}], "contains a NUL character or an unpaired surrogate"),
        ({1: "x"}, "has a key that is not plain text"),
        (float("nan"), "is not a finite number"),
        (10**400, "is too large a number"),
        (nested(40), "is nested more than 32 levels deep"),
    ],
)
def test_unstorable_says_why_an_input_cannot_be_stored(value: Any, problem: str | None) -> None:
    assert unstorable(value) == problem


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("target_filter", {"reference": "a\x00"}),
        ("target_filter", {"reference\ud800": "a"}),
        ("rules", [{"rule": "required_fields", "fields": ["\x00"]}]),
    ],
)
def test_a_validation_task_with_unstorable_json_is_a_400_not_a_500(
    superuser: Any, field: str, value: Any
) -> None:
    response = post_raw(superuser, "validation-tasks", {"target": "testapp.Order", field: value})

    assert response.status_code == 400
    # Refused where the service checks each of them, with that check's stable code.
    code = {"target_filter": "invalid_target_filter", "rules": "invalid_entities"}[field]
    assert (response.json()["code"], list(response.json()["errors"])) == (code, [field])
