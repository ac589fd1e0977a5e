"""``manage.py assistant_llm_check`` against a real local endpoint: what it probes, what it says."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from tests.openai_peer import call, closed_port_url, error, raw, text, tool_calls
from tests.openai_peer import openai_peer as openai_peer  # the fixtures
from tests.openai_peer import use_llm as use_llm
from tests.stream_shapes import chunk


def check(**options):
    out = StringIO()
    try:
        call_command("assistant_llm_check", stdout=out, **options)
    except CommandError as exc:
        return out.getvalue(), exc.returncode
    return out.getvalue(), 0


def test_a_capable_endpoint_passes_every_probe(use_llm):
    peer = use_llm()
    peer.script(
        text("ready"),
        tool_calls(call("assistant_probe", {"word": "alpha"})),
        tool_calls(
            call("assistant_probe", {"word": "alpha"}), call("assistant_probe", {"word": "beta"})
        ),
    )

    out, code = check()

    assert code == 0
    assert "[ok  ] a streamed reply — 'ready'" in out
    assert "[ok  ] one tool call — got 1 call(s) ['alpha']" in out
    assert "[ok  ] two parallel tool calls — got 2 call(s) ['alpha', 'beta']" in out
    assert "[ok  ] token usage — 120 tokens for the reply" in out
    assert [r["tools"][0]["function"]["name"] for r in peer.requests[1:]] == ["assistant_probe"] * 2
    assert all(r["stream"] for r in peer.requests)


def test_parallel_calls_at_one_index_are_told_apart(use_llm):
    # Ollama's shape: both calls at index 0, distinct ids.
    parts = [
        {
            "index": 0,
            "id": f"c{n}",
            "type": "function",
            "function": {"name": "assistant_probe", "arguments": f'{{"word": "{w}"}}'},
        }
        for n, w in ((1, "alpha"), (2, "beta"))
    ]
    use_llm().script(
        text("ready"),
        tool_calls(call("assistant_probe", {"word": "alpha"})),
        raw(
            chunk({"tool_calls": [parts[0]]}), chunk({"tool_calls": [parts[1]]}), chunk({}, "stop")
        ),
    )

    out, code = check()

    assert code == 0
    assert "[ok  ] two parallel tool calls — got 2 call(s) ['alpha', 'beta']" in out


def test_an_endpoint_without_tool_calling_fails_and_says_why(use_llm):
    use_llm().script(text("ready"), text("alpha"), text("alpha beta"))

    out, code = check()

    assert code == 1
    assert (
        "[FAIL] one tool call — got 0 call(s) []; use a model (or server flag) with tool calling"
        in out
    )
    assert "[warn] two parallel tool calls" in out


def test_a_dead_endpoint_names_the_setting_to_change(settings):
    settings.ASSISTANT = {
        **settings.ASSISTANT,
        "LLM": {"BASE_URL": closed_port_url(), "MODEL": "m", "TIMEOUT": 2},
    }

    out, code = check()

    assert code == 1
    assert "[FAIL] a streamed reply" in out
    assert "Check ASSISTANT['LLM']['BASE_URL']" in out


def test_an_unknown_model_points_at_the_model_setting(use_llm):
    use_llm().script(error(404, "The model `nope` does not exist", "not_found_error"))

    out, code = check()

    assert code == 1
    assert "Check ASSISTANT['LLM']['MODEL']" in out


def test_no_model_configured_fails_before_any_request(use_llm):
    peer = use_llm(MODEL=None)

    out, code = check()

    assert code == 1
    assert "[FAIL] a model — set ASSISTANT['LLM']['MODEL']" in out
    assert peer.requests == []


def test_the_command_line_overrides_the_settings(use_llm, openai_peer, settings):
    settings.ASSISTANT = {
        **settings.ASSISTANT,
        "LLM": {"BASE_URL": closed_port_url(), "MODEL": "m"},
    }
    openai_peer.script(text("ready"), text("no"), text("no"))

    out, _ = check(base_url=openai_peer.url, model="other-model")

    assert "[ok  ] a streamed reply" in out
    assert openai_peer.requests[0]["model"] == "other-model"


def test_a_server_refusing_usage_is_a_warning_not_a_failure(use_llm):
    peer = use_llm()
    peer.refuses_stream_options = True
    peer.script(
        text("ready"),
        tool_calls(call("assistant_probe", {"word": "alpha"})),
        tool_calls(
            call("assistant_probe", {"word": "alpha"}), call("assistant_probe", {"word": "beta"})
        ),
    )

    out, code = check()

    assert code == 0
    assert "[warn] token usage — the server refuses stream_options" in out


@pytest.mark.parametrize("planner", ["keywords"])
def test_it_warns_when_the_chat_does_not_use_the_llm(use_llm, settings, planner):
    use_llm().script(text("ready"), text("x"), text("x"))
    settings.ASSISTANT = {**settings.ASSISTANT, "PLANNER": planner}

    out, _ = check()

    assert "[warn] ASSISTANT['PLANNER'] is not 'llm'" in out


def test_a_call_written_as_text_counts_as_the_planner_would_run_it(use_llm):
    # Qwen2.5-Coder 1.5B on llama.cpp: the call as words, its braces doubled
    written = '{{"name": "assistant_probe", "arguments": {"word": "alpha"}}}'
    use_llm().script(text("ready"), text(written), text(written))

    out, code = check()

    assert code == 0, out
    assert "[ok  ] one tool call — got 1 call(s) ['alpha'] (written as JSON text" in out
    assert "TEXT_TOOL_CALLS is on" in out


def test_a_call_written_as_text_fails_where_the_planner_would_not_run_it(use_llm):
    written = '{"name": "assistant_probe", "arguments": {"word": "alpha"}}'
    use_llm(TEXT_TOOL_CALLS=False).script(text("ready"), text(written), text(written))

    out, code = check()

    assert code == 1
    assert "[FAIL] one tool call — got 0 call(s) []" in out
