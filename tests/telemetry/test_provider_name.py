"""``gen_ai.provider.name`` says who serves the model: the well-known provider whose hosted
endpoint ``LLM["BASE_URL"]`` names, a custom value for any other, or ``LLM["PROVIDER_NAME"]``."""

from __future__ import annotations

import pytest
from django.core.checks import run_checks

from assistant import telemetry
from assistant.conf import assistant_settings
from assistant.turns.runs import run_turn
from tests.openai_peer import openai_peer as openai_peer  # the fixtures
from tests.openai_peer import text
from tests.openai_peer import use_llm as use_llm
from tests.telemetry.tracing import otlp_receiver as otlp_receiver
from tests.telemetry.tracing import traced as traced

pytestmark = pytest.mark.django_db

PROVIDER = "gen_ai.provider.name"


@pytest.mark.parametrize(
    ("llm", "provider"),
    [
        ({}, "openai"),
        ({"BASE_URL": "https://api.openai.com/v1"}, "openai"),
        ({"BASE_URL": "https://ops-east.openai.azure.com/openai/v1"}, "azure.ai.openai"),
        ({"BASE_URL": "https://generativelanguage.googleapis.com/v1beta/openai/"}, "gcp.gemini"),
        ({"BASE_URL": "https://api.mistral.ai/v1"}, "mistral_ai"),
        ({"BASE_URL": "http://127.0.0.1:8080/v1"}, "openai_compatible"),
        ({"BASE_URL": "http://localhost:11434/v1", "PROVIDER_NAME": "ollama"}, "ollama"),
        ({"BASE_URL": "https://api.groq.com/openai/v1", "PROVIDER_NAME": "my-proxy"}, "my-proxy"),
    ],
)
def test_the_provider_is_named_alike_on_the_turn_the_model_call_and_their_metrics(
    traced, settings, plain_user, llm, provider
):
    settings.ASSISTANT = {**settings.ASSISTANT, "LLM": {"MODEL": "m", **llm}}

    run_turn(plain_user, "ping")  # (the keyword planner: a turn with no model call)
    with telemetry.model_span(assistant_settings.llm):
        pass  # (a model call's span, without calling a model on the internet)

    receiver = traced()
    agent = receiver.one("invoke_agent assistant")
    chat = receiver.one("chat m")
    assert (agent["attributes"][PROVIDER], chat["attributes"][PROVIDER]) == (provider, provider)
    durations = {
        point["attributes"]["gen_ai.operation.name"]: point["attributes"][PROVIDER]
        for point in receiver.metrics["gen_ai.client.operation.duration"]
    }
    assert durations == {"invoke_agent": provider, "chat": provider}


def test_a_local_model_server_is_named_by_the_setting_on_every_span_and_metric(
    traced, use_llm, plain_user
):
    use_llm(PROVIDER_NAME="llama.cpp").script(text("Hi."))

    run_turn(plain_user, "hello")

    receiver = traced()
    assert receiver.one("invoke_agent assistant")["attributes"][PROVIDER] == "llama.cpp"
    assert receiver.one("chat test-model")["attributes"][PROVIDER] == "llama.cpp"
    tokens_used = receiver.metrics["gen_ai.client.token.usage"]
    assert {point["attributes"][PROVIDER] for point in tokens_used} == {"llama.cpp"}


@pytest.mark.parametrize("value", [42, "", ["ollama"]])
def test_a_provider_name_that_is_not_text_is_a_check_error(settings, value):
    settings.ASSISTANT = {**settings.ASSISTANT, "LLM": {"PROVIDER_NAME": value}}

    errors = [m.msg for m in run_checks() if m.id == "assistant.E002"]

    assert errors == [
        f"ASSISTANT['LLM']['PROVIDER_NAME'] must be None or a non-empty string, not {value!r}."
    ]
