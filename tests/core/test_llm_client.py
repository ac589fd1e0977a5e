"""The model clients' HTTP: what they send again, and the proxies they honour."""

from __future__ import annotations

import pytest
from django.conf import settings as django_settings

from assistant.conf import assistant_settings
from assistant.core.llm_client import make_client
from assistant.turns.runs import run_turn
from tests.openai_peer import hang_up, text
from tests.openai_peer import openai_peer as openai_peer  # the fixtures
from tests.openai_peer import use_llm as use_llm

pytestmark = pytest.mark.django_db


def test_the_sync_client_sends_a_request_the_server_hung_up_on_once_more(use_llm):
    # (what a validation rule's model review asks with: one request, not streamed)
    peer = use_llm()
    peer.script(hang_up(), text("Looks fine."))

    client = make_client(assistant_settings.llm)
    try:
        reply = client.chat.completions.create(
            model="test-model", messages=[{"role": "user", "content": "review this"}]
        )
    finally:
        client.close()

    assert reply.choices[0].message.content == "Looks fine."
    assert len(peer.requests) == 2


def test_the_sync_client_gives_up_after_the_second_hang_up(use_llm):
    import openai

    peer = use_llm()
    peer.script(hang_up(), hang_up(), text("never sent"))

    client = make_client(assistant_settings.llm)
    try:
        with pytest.raises(openai.APIConnectionError):
            client.chat.completions.create(
                model="test-model", messages=[{"role": "user", "content": "review this"}]
            )
    finally:
        client.close()

    assert len(peer.requests) == 2


def test_a_turn_reaches_the_model_through_the_proxy_the_environment_names(
    settings, openai_peer, monkeypatch, plain_user
):
    # Behind a corporate proxy, HTTP(S)_PROXY is how the model is reached at all.
    proxy = openai_peer.url.removesuffix("/v1")
    for name in ("HTTP_PROXY", "http_proxy"):
        monkeypatch.setenv(name, proxy)
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    settings.ASSISTANT = {
        **django_settings.ASSISTANT,
        "PLANNER": "llm",
        "LLM": {"BASE_URL": "http://model.invalid/v1", "MODEL": "test-model", "TIMEOUT": 5},
    }
    openai_peer.script(text("Through the proxy."))

    turn = run_turn(plain_user, "hello")

    assert turn.assistant_message.text == "Through the proxy."
    assert openai_peer.targets == ["http://model.invalid/v1/chat/completions"]
