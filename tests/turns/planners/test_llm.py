"""The LLM planner, driven through the real ``openai`` client against a scripted local endpoint."""

from __future__ import annotations

import asyncio
import json
import time

import openai
import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings as django_settings

from assistant.conf import LLM_DEFAULTS
from assistant.core.cancellation import CancellationToken
from assistant.core.registry import registry
from assistant.dispatch.catalog import get_catalog, visible_tools
from assistant.models import AuditEntry, Conversation, Job, PendingAction
from assistant.stream.broadcast import group_name
from assistant.turns.planners.llm import FALLBACK_NOTICE, RESULT_LIMIT
from assistant.turns.planners.told import DONE as DONE_NOTE
from assistant.turns.runs import arun_turn, run_turn
from tests.audit_trail import audited
from tests.openai_peer import (
    call,
    closed_port_url,
    error,
    hang_up,
    stall,
    text,
    tool_calls,
    trickle,
)
from tests.openai_peer import openai_peer as openai_peer  # the fixtures
from tests.openai_peer import use_llm as use_llm
from tests.testapp.models import Order
from tests.turns.reading import fed_back, next_frame, of_type, stored

pytestmark = pytest.mark.django_db

SECRET = "hunter2-correct-horse"


def said(turn):
    """The reply's text deltas, as the frames carried them."""
    reply = str(turn.assistant_message.pk)
    return [f["delta"] for f in of_type(turn, "TEXT_MESSAGE_CONTENT") if f["messageId"] == reply]


def tool_names(request):
    return [tool["function"]["name"] for tool in request.get("tools", [])]


# Streaming and what the model is sent


def test_streamed_words_arrive_as_several_content_frames_and_are_stored(use_llm, plain_user):
    use_llm().script(text("The ", "answer ", "is 42."))

    turn = run_turn(plain_user, "what is the answer?")

    assert said(turn) == ["The ", "answer ", "is 42."]
    assert [frame["type"] for frame in turn.frames] == [
        "RUN_STARTED",
        *["TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END"],  # the user's message
        "TEXT_MESSAGE_START",
        *["TEXT_MESSAGE_CONTENT"] * 3,
        "TEXT_MESSAGE_END",
        "RUN_FINISHED",
    ]
    assert stored(turn.conversation) == [
        ("user", "what is the answer?", "complete"),
        ("assistant", "The answer is 42.", "complete"),
    ]
    assert not AuditEntry.objects.exists()


def test_the_model_gets_the_system_prompt_the_message_and_the_configured_model(use_llm, plain_user):
    peer = use_llm(SYSTEM_PROMPT="You are a test.", TEMPERATURE=0.7)
    peer.script(text("Hi."))

    run_turn(plain_user, "hello")

    (request,) = peer.requests
    assert request["model"] == "test-model"
    assert request["stream"] is True
    assert request["temperature"] == 0.7
    assert request["messages"] == [
        {"role": "system", "content": "You are a test."},
        {"role": "user", "content": "hello"},
    ]


def test_the_default_system_prompt_is_sent_when_none_is_configured(use_llm, plain_user):
    peer = use_llm()
    peer.script(text("Hi."))

    run_turn(plain_user, "hello")

    assert peer.requests[0]["messages"][0] == {
        "role": "system",
        "content": LLM_DEFAULTS["SYSTEM_PROMPT"],
    }


def test_the_api_key_comes_from_the_environment_variable_the_settings_name(
    use_llm, plain_user, monkeypatch
):
    monkeypatch.setenv("ASSISTANT_TEST_LLM_KEY", "sk-from-the-environment")
    peer = use_llm(API_KEY_ENV="ASSISTANT_TEST_LLM_KEY")
    peer.script(text("Hi."))

    run_turn(plain_user, "hello")

    assert peer.headers[0]["authorization"] == "Bearer sk-from-the-environment"


def test_a_plain_user_is_offered_only_public_tools(use_llm, plain_user):
    peer = use_llm()
    peer.script(text("Hi."))

    run_turn(plain_user, "hello")

    (request,) = peer.requests
    offered = tool_names(request)
    assert offered == [tool.operation for tool in visible_tools(plain_user, site=registry)]
    assert offered, "public tools exist, so the catalog is not empty"
    assert all(registry.get(name).public for name in offered)
    assert "list_orders" not in offered
    assert request["tools"] == get_catalog(plain_user, site=registry)


def test_a_reader_is_offered_the_order_and_report_tools_as_well(use_llm, plain_user, reader):
    peer = use_llm()
    peer.script(text("Hi."), text("Hi."))

    run_turn(plain_user, "hello")
    run_turn(reader, "hello")

    plain_offer, reader_offer = (set(tool_names(request)) for request in peer.requests)
    assert reader_offer - plain_offer == {"list_orders", "show_report", "export_orders"}
    assert not reader_offer & {"approve_order", "cancel_order", "merge_orders", "store_secret"}


def test_history_is_bounded_to_the_newest_max_history_messages(use_llm, plain_user):
    peer = use_llm(MAX_HISTORY=2)
    peer.script(text("one"), text("two"), text("three"), text("four"))
    first = run_turn(plain_user, "first")
    for message in ("second", "third", "fourth"):
        run_turn(plain_user, message, conversation_id=first.conversation.pk)

    assert peer.requests[1]["messages"][1:] == [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "one"},
        {"role": "user", "content": "second"},
    ]
    assert peer.requests[3]["messages"] == [
        {"role": "system", "content": LLM_DEFAULTS["SYSTEM_PROMPT"]},
        {"role": "user", "content": "third"},
        {"role": "assistant", "content": "three"},
        {"role": "user", "content": "fourth"},
    ]


# Tool calls


def test_a_tool_call_is_dispatched_and_its_result_fed_back_before_the_final_words(
    use_llm, plain_user
):
    peer = use_llm()
    peer.script(
        tool_calls(call("apong", {"times": 2}, id="call_pong")),
        text("Two ", "pongs."),
    )

    turn = run_turn(plain_user, "pong twice please")

    (start,) = of_type(turn, "TOOL_CALL_START")
    assert (start["toolCallId"], start["toolCallName"]) == ("call_pong", "apong")
    assert [f["delta"] for f in of_type(turn, "TOOL_CALL_ARGS")] == ['{"times": 2}']
    (result,) = of_type(turn, "TOOL_CALL_RESULT")
    assert (result["toolCallId"], result["content"]) == ("call_pong", "pong pong")
    assert said(turn) == ["Two ", "pongs."]

    first, second = peer.requests
    assert second["messages"][: len(first["messages"])] == first["messages"]
    assert second["messages"][-2] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_pong",
                "type": "function",
                "function": {"name": "apong", "arguments": '{"times": 2}'},
            }
        ],
    }
    # a finished call says so: without the note a small model proposes the same call again
    done = {"decision": "executed", "text": "pong pong", "note": DONE_NOTE}
    assert fed_back(second) == [("call_pong", done)]

    entry = AuditEntry.objects.get()
    # The audit names the transport that ran the turn; it does not say the LLM proposed the call.
    assert (entry.operation, entry.decision, entry.source) == ("apong", "executed", "rest")
    assert entry.entities == {"times": 2}
    assert entry.conversation == turn.conversation
    (record,) = turn.assistant_message.tool_calls
    assert (record["tool_call_id"], record["operation"], record["decision"]) == (
        "call_pong",
        "apong",
        "executed",
    )
    assert record["audit_id"] == entry.pk
    assert turn.assistant_message.text == "Two pongs."
    assert turn.assistant_message.status == "complete"


def test_the_model_is_told_a_job_s_task_id_beside_its_text(use_llm, diagnostician):
    # (the text is for people: the id the model may ask about later goes beside it)
    peer = use_llm()
    peer.script(tool_calls(call("start_job", id="call_job")), text("Started."))

    run_turn(diagnostician, "start a job")

    job = Job.objects.get()
    told = {
        "decision": "executed",
        "text": f"started count job {job.pk}",
        "task_id": str(job.pk),
        "note": DONE_NOTE,
    }
    assert fed_back(peer.requests[1]) == [("call_job", told)]


def test_calls_streamed_interleaved_are_reassembled_by_index_and_run_in_order(use_llm, plain_user):
    peer = use_llm()
    peer.script(
        tool_calls(call("ping", id="call_a"), call("apong", {"times": 3}, id="call_b", pieces=5)),
        text("Done."),
    )

    run_turn(plain_user, "ping and pong")

    assert audited() == [("ping", "executed", "rest"), ("apong", "executed", "rest")]
    assert fed_back(peer.requests[1]) == [
        ("call_a", {"decision": "executed", "text": "pong for plain", "note": DONE_NOTE}),
        ("call_b", {"decision": "executed", "text": "pong pong pong", "note": DONE_NOTE}),
    ]


def test_a_call_the_model_left_without_an_id_still_pairs_with_its_result(use_llm, plain_user):
    peer = use_llm()
    peer.script(tool_calls(call("ping", id=None)), text("Pinged."))

    turn = run_turn(plain_user, "ping")

    (proposed,) = peer.requests[1]["messages"][-2]["tool_calls"]
    ((answered, _),) = fed_back(peer.requests[1])
    assert proposed["id"]
    assert answered == proposed["id"]
    assert of_type(turn, "TOOL_CALL_RESULT")[0]["toolCallId"] == proposed["id"]


def test_a_tool_outside_the_users_catalog_is_unknown_to_the_model_audited_denied_never_run(
    use_llm, plain_user
):
    order = Order.objects.create(reference="ORD-1")
    peer = use_llm()
    peer.script(
        tool_calls(call("list_orders"), call("approve_order", {"order_id": order.pk})),
        text("You may not do that."),
    )

    turn = run_turn(plain_user, "list and approve")

    assert audited() == [
        ("list_orders", "denied", "rest"),
        ("approve_order", "denied", "rest"),
    ]
    # plain has no part in orders: the model is told they do not exist, as for a missing tool
    assert [decision["decision"] for _, decision in fed_back(peer.requests[1])] == [
        "unknown",
        "unknown",
    ]
    assert {decision["code"] for _, decision in fed_back(peer.requests[1])} == {"unknown_operation"}
    assert "ORD-1" not in json.dumps(turn.frames)
    assert not PendingAction.objects.exists()
    order.refresh_from_db()
    assert (order.status, order.approvals) == ("open", 0)
    assert turn.assistant_message.text == "You may not do that."


def test_an_operation_that_does_not_exist_is_audited_unknown(use_llm, plain_user):
    peer = use_llm()
    peer.script(tool_calls(call("drop_all_tables")), text("No such tool."))

    run_turn(plain_user, "drop everything")

    assert audited() == [("drop_all_tables", "unknown", "rest")]
    ((_, decision),) = fed_back(peer.requests[1])
    assert (decision["decision"], decision["code"]) == ("unknown", "unknown_operation")


def test_malformed_json_arguments_are_refused_as_invalid_and_audited(use_llm, plain_user):
    peer = use_llm()
    peer.script(tool_calls(call("apong", '{"times": 2')), text("Sorry."))

    turn = run_turn(plain_user, "pong twice")

    entry = AuditEntry.objects.get()
    assert (entry.operation, entry.decision) == ("apong", "invalid")
    ((_, decision),) = fed_back(peer.requests[1])
    assert (decision["decision"], decision["code"]) == ("invalid", "invalid_entities")
    (result,) = of_type(turn, "TOOL_CALL_RESULT")
    assert result["content"].startswith("Invalid entities for apong")
    assert result["content"] == decision["text"]
    assert turn.assistant_message.tool_calls[0]["decision"] == "invalid"


def test_a_sensitive_value_in_malformed_arguments_is_never_shown(use_llm, superuser):
    peer = use_llm()
    peer.script(
        tool_calls(call("store_secret", f'{{"label": "wifi", "secret": "{SECRET}"')),
        text("That went wrong."),
    )

    turn = run_turn(superuser, "store my wifi password")

    assert AuditEntry.objects.get().decision == "invalid"
    assert SECRET not in json.dumps(AuditEntry.objects.get().entities)
    assert SECRET not in json.dumps(turn.assistant_message.tool_calls)
    assert SECRET not in json.dumps(turn.frames)


def test_a_sensitive_value_the_user_typed_is_redacted_wherever_it_is_kept(use_llm, superuser):
    peer = use_llm()
    peer.script(
        tool_calls(call("store_secret", {"label": "wifi", "secret": SECRET})),
        text("Stored."),
    )

    turn = run_turn(superuser, f"store secret wifi {SECRET}")

    entry = AuditEntry.objects.get()
    assert (entry.decision, entry.entities) == (
        "executed",
        {"label": "wifi", "secret": "[redacted]"},
    )
    assert [f["delta"] for f in of_type(turn, "TOOL_CALL_ARGS")] == [
        '{"label": "wifi", "secret": "[redacted]"}'
    ]
    assert turn.assistant_message.tool_calls[0]["entities"]["secret"] == "[redacted]"
    # As the keyword planner does: history (sent to the model on later turns) keeps no secret.
    assert turn.user_message.text == "store secret wifi [redacted]"


def test_a_tool_needing_confirmation_ends_the_run_with_an_interrupt(use_llm, clerk):
    order = Order.objects.create(reference="ORD-7")
    peer = use_llm()
    peer.script(
        tool_calls(call("approve_order", {"order_id": order.pk}, id="call_approve")),
        text("This must never be asked for."),
    )

    turn = run_turn(clerk, "approve ORD-7")

    assert len(peer.requests) == 1
    assert peer.unplayed == 1
    action = PendingAction.objects.get()
    (finished,) = of_type(turn, "RUN_FINISHED")
    assert finished["outcome"]["type"] == "interrupt"
    (interrupt,) = finished["outcome"]["interrupts"]
    assert (interrupt["id"], interrupt["toolCallId"]) == (str(action.pk), "call_approve")
    assert audited() == [("approve_order", "confirmation_requested", "rest")]
    order.refresh_from_db()
    assert order.approvals == 0
    assert turn.assistant_message.status == "complete"
    assert turn.assistant_message.tool_calls[0]["pending_action"] == str(action.pk)


def test_max_steps_bounds_the_model_tool_loop(use_llm, plain_user):
    peer = use_llm(MAX_STEPS=2)
    peer.script(*[tool_calls(call("apong", {"times": times})) for times in range(3)])

    turn = run_turn(plain_user, "pong forever")

    assert len(peer.requests) == 2
    assert peer.unplayed == 1
    assert audited() == [("apong", "executed", "rest")] * 2
    assert turn.assistant_message.text == "\n\n(I stopped after 2 steps.)"
    assert turn.assistant_message.status == "complete"


def test_a_large_result_is_truncated_for_the_model_and_kept_whole_for_the_user(use_llm, plain_user):
    peer = use_llm()
    peer.script(tool_calls(call("echo_types", {"count": 1, "tags": ["x" * 6000]})), text("Big."))

    turn = run_turn(plain_user, "echo something big")

    full = turn.assistant_message.tool_calls[0]["text"]
    assert len(full) > 6000
    ((_, decision),) = fed_back(peer.requests[1])
    assert decision["text"] == full[:RESULT_LIMIT] + " …(truncated)"
    assert of_type(turn, "TOOL_CALL_RESULT")[0]["content"] == full


# A dead, failing or slow endpoint


@pytest.mark.parametrize(("status", "kind"), [(500, "server_error"), (401, "invalid_api_key")])
def test_an_http_error_fails_the_turn_with_llm_error(use_llm, plain_user, status, kind):
    use_llm().script(error(status, "The model server is unhappy.", kind))

    turn = run_turn(plain_user, "hello")

    (failure,) = of_type(turn, "RUN_ERROR")
    assert failure["code"] == "llm_error"
    assert str(status) in failure["message"]
    assert not of_type(turn, "RUN_FINISHED")
    assert stored(turn.conversation) == [
        ("user", "hello", "complete"),
        ("assistant", failure["message"], "failed"),
    ]


def test_a_stalled_endpoint_fails_within_the_timeout_with_llm_unavailable(use_llm, plain_user):
    use_llm(STREAM_TIMEOUT=0.5).script(stall())

    started = time.monotonic()
    turn = run_turn(plain_user, "hello")
    elapsed = time.monotonic() - started

    assert 0.5 <= elapsed < 3
    (failure,) = of_type(turn, "RUN_ERROR")
    assert failure["code"] == "llm_unavailable"
    assert stored(turn.conversation) == [
        ("user", "hello", "complete"),
        ("assistant", failure["message"], "failed"),
    ]


def test_a_stream_stalled_midway_fails_and_keeps_the_words_so_far(use_llm, plain_user):
    use_llm(STREAM_TIMEOUT=0.5).script(text("Let me ", "think", then="stall"))

    started = time.monotonic()
    turn = run_turn(plain_user, "hello")

    assert time.monotonic() - started < 3
    assert of_type(turn, "RUN_ERROR")[0]["code"] == "llm_unavailable"
    assert stored(turn.conversation)[-1] == ("assistant", "Let me think", "failed")


def test_an_endpoint_that_only_keeps_the_connection_warm_is_bounded_by_the_timeout(
    use_llm, plain_user
):
    # SSE comments every 0.1 s for 4 s, no chunk: STREAM_TIMEOUT bounds the wait for a chunk.
    use_llm(STREAM_TIMEOUT=0.5).script(trickle(4.0, "too late"))

    started = time.monotonic()
    turn = run_turn(plain_user, "hello")

    assert time.monotonic() - started < 2.5
    assert of_type(turn, "RUN_ERROR")[0]["code"] == "llm_unavailable"


def test_a_slow_first_chunk_is_waited_for_up_to_the_stream_timeout(use_llm, plain_user):
    # a CPU model reading an uncached prompt: silent for longer than it takes to send a request
    use_llm(TIMEOUT=0.5, STREAM_TIMEOUT=5).script(stall(1.5))

    turn = run_turn(plain_user, "hello")

    assert not of_type(turn, "RUN_ERROR")
    assert stored(turn.conversation)[-1] == ("assistant", "too late", "complete")


def test_no_model_configured_fails_the_turn_without_asking_anyone(use_llm, plain_user):
    peer = use_llm(MODEL=None)

    turn = run_turn(plain_user, "hello")

    failure = of_type(turn, "RUN_ERROR")[0]
    assert failure["code"] == "llm_unavailable"
    assert "MODEL" in failure["message"]
    assert peer.requests == []
    assert stored(turn.conversation)[0] == ("user", "hello", "complete")


def test_a_dropped_connection_midway_fails_without_falling_back(use_llm, plain_user):
    use_llm(FALLBACK_TO_KEYWORDS=True).script(text("Half an ans", then="drop"))

    turn = run_turn(plain_user, "ping")

    assert of_type(turn, "RUN_ERROR")[0]["code"] == "llm_unavailable"
    assert all(frame["name"] != "assistant.notice" for frame in of_type(turn, "CUSTOM"))
    assert not AuditEntry.objects.exists()
    assert stored(turn.conversation) == [
        ("user", "ping", "complete"),
        ("assistant", "Half an ans", "failed"),
    ]


def test_a_request_the_server_hung_up_on_unanswered_is_sent_once_more(use_llm, plain_user):
    # llama.cpp's server closes keep-alive connections as the client reuses them: the request
    # goes out and the connection closes with no answer. Sent again, on a new connection, it
    # is answered; the user never hears of it.
    peer = use_llm()
    peer.script(tool_calls(call("ping")), hang_up(), text("All ", "good."))

    turn = run_turn(plain_user, "ping")

    assert turn.assistant_message.text == "All good."
    assert turn.assistant_message.status == "complete"
    assert len(peer.requests) == 3
    assert peer.requests[2] == peer.requests[1]  # the same request, resent
    assert audited() == [("ping", "executed", "rest")]  # the tool ran once


def test_a_server_that_hangs_up_twice_fails_the_turn_after_two_tries(use_llm, plain_user):
    peer = use_llm()
    peer.script(hang_up(), hang_up(), text("never sent"))

    turn = run_turn(plain_user, "ping")

    assert of_type(turn, "RUN_ERROR")[0]["code"] == "llm_unavailable"
    assert len(peer.requests) == 2
    assert peer.unplayed == 1
    assert stored(turn.conversation)[-1][2] == "failed"


def test_a_request_that_timed_out_is_not_sent_again(use_llm, plain_user):
    # The server may still be working on it: a second copy would double the cost and the wait.
    peer = use_llm(STREAM_TIMEOUT=0.5)
    peer.script(stall(2), text("never sent"))

    turn = run_turn(plain_user, "ping")

    assert of_type(turn, "RUN_ERROR")[0]["code"] == "llm_unavailable"
    assert len(peer.requests) == 1


def test_a_dead_endpoint_fails_the_turn_when_there_is_no_fallback(settings, plain_user):
    settings.ASSISTANT = {
        **django_settings.ASSISTANT,
        "PLANNER": "llm",
        "LLM": {"BASE_URL": closed_port_url(), "TIMEOUT": 2},
    }

    turn = run_turn(plain_user, "ping")

    assert of_type(turn, "RUN_ERROR")[0]["code"] == "llm_unavailable"
    assert not AuditEntry.objects.exists()
    assert stored(turn.conversation)[-1][2] == "failed"


def test_a_dead_endpoint_falls_back_to_keywords_with_a_visible_notice(settings, plain_user):
    settings.ASSISTANT = {
        **django_settings.ASSISTANT,
        "PLANNER": "llm",
        "LLM": {"BASE_URL": closed_port_url(), "TIMEOUT": 2, "FALLBACK_TO_KEYWORDS": True},
    }

    turn = run_turn(plain_user, "ping")

    (notice,) = [frame for frame in of_type(turn, "CUSTOM") if frame["name"] == "assistant.notice"]
    assert notice["value"]["code"] == "llm_unavailable"
    assert not of_type(turn, "RUN_ERROR")
    assert "".join(said(turn)) == FALLBACK_NOTICE + "pong for plain"
    assert audited() == [("ping", "executed", "rest")]
    assert stored(turn.conversation) == [
        ("user", "ping", "complete"),
        ("assistant", FALLBACK_NOTICE + "pong for plain", "complete"),
    ]


def test_an_http_error_also_falls_back_when_configured(use_llm, plain_user):
    use_llm(FALLBACK_TO_KEYWORDS=True).script(error(503, "Overloaded."))

    turn = run_turn(plain_user, "ping")

    (notice,) = [frame for frame in of_type(turn, "CUSTOM") if frame["name"] == "assistant.notice"]
    assert notice["value"]["code"] == "llm_error"
    assert turn.assistant_message.text == FALLBACK_NOTICE + "pong for plain"
    assert turn.assistant_message.status == "complete"


# Cancellation


@pytest.mark.django_db(transaction=True)
async def test_cancelling_during_a_stalled_stream_ends_the_turn_cancelled_promptly(
    use_llm, plain_user
):
    peer = use_llm(TIMEOUT=10)
    peer.script(text("Thinking", then="stall"))
    conversation = await Conversation.objects.acreate(user=plain_user, title="cancel me")
    layer = get_channel_layer()
    watcher = await layer.new_channel()
    await layer.group_add(group_name(conversation.pk), watcher)
    cancel = CancellationToken()
    running = asyncio.ensure_future(
        arun_turn(plain_user, "think hard", conversation_id=conversation.pk, cancel=cancel)
    )

    await next_frame(layer, watcher, lambda frame: frame.get("delta") == "Thinking")
    started = time.monotonic()
    cancel.cancel()
    async with asyncio.timeout(5):
        turn = await running
    elapsed = time.monotonic() - started

    assert elapsed < 1.5
    (finished,) = of_type(turn, "RUN_FINISHED")
    assert finished["outcome"]["type"] == "cancelled"
    assert finished["result"]["status"] == "cancelled"
    assert await sync_to_async(stored)(conversation) == [
        ("user", "think hard", "complete"),
        ("assistant", "Thinking", "cancelled"),
    ]
    assert len(peer.requests) == 1
    await layer.group_discard(group_name(conversation.pk), watcher)


# The peer itself


def test_the_peer_answers_a_request_that_is_not_streamed_with_one_completion(openai_peer):
    openai_peer.script(tool_calls(call("ping", id="call_1"), said=("Pinging.",)))
    client = openai.OpenAI(base_url=openai_peer.url, api_key="k", timeout=5, max_retries=0)

    completion = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "ping"}]
    )

    client.close()
    (choice,) = completion.choices
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Pinging."
    assert [(c.id, c.function.name) for c in choice.message.tool_calls] == [("call_1", "ping")]
    assert openai_peer.requests[0]["messages"] == [{"role": "user", "content": "ping"}]
