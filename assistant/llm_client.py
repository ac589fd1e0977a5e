"""Clients of the configured OpenAI-compatible endpoint (``ASSISTANT["LLM"]``), sync and async."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from .conf import assistant_settings
from .exceptions import LLMUnavailable

if TYPE_CHECKING:  # openai is the [llm] extra: imported only when a client is made
    import openai


def api_key(config: dict[str, Any]) -> str:
    """The key from the environment variable ``API_KEY_ENV`` names; ``""`` when there is none."""
    return os.environ.get(config["API_KEY_ENV"] or "", "")


def llm_configured() -> bool:
    """A model is named and there is an endpoint or a key to reach one with."""
    config = assistant_settings.llm
    return bool(config["MODEL"] and (config["BASE_URL"] or api_key(config)))


def _options(config: dict[str, Any]) -> dict[str, Any]:
    if not config["MODEL"]:
        raise LLMUnavailable("No language model is configured (ASSISTANT['LLM']['MODEL']).")
    return {
        "base_url": config["BASE_URL"],
        "api_key": api_key(config) or "not-needed",  # local servers take any key
        "timeout": config["TIMEOUT"],
        "max_retries": 0,
    }


def make_client(config: dict[str, Any] | None = None) -> openai.OpenAI:
    """A client of ``config`` (``assistant_settings.llm`` by default); close it when done."""
    import openai

    return openai.OpenAI(**_options(assistant_settings.llm if config is None else config))


def make_async_client(config: dict[str, Any] | None = None) -> openai.AsyncOpenAI:
    """The async twin of ``make_client``."""
    import openai

    return openai.AsyncOpenAI(**_options(assistant_settings.llm if config is None else config))
