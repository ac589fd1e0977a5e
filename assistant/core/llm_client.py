"""Clients of the configured OpenAI-compatible endpoint (``ASSISTANT["LLM"]``), sync and async.

Turns share one async client per event loop and configuration (``shared_async_client``): one
HTTP connection pool with keep-alive, built once. Every client this module makes verifies TLS
with one SSL context made once per process: building a client costs no CA-bundle load.

The openai package's own retries are off (``max_retries=0``): a turn has its deadline and budget,
and an error the server answered (429, 5xx) is the turn's to report, not to repeat. One failure
is sent again, once: a request the server closed the connection on without answering a byte
(a keep-alive connection it closed as the client reused it; llama.cpp's server does this between
streamed replies). It cannot have been answered, so nothing of it was charged; a timeout is never
sent again, since the server may still be working on it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import ssl
from typing import TYPE_CHECKING, Any

from ..conf import assistant_settings
from ..exceptions import LLMUnavailable

if TYPE_CHECKING:  # openai is the [llm] extra: imported only when a client is made
    import openai

logger = logging.getLogger("assistant.llm_client")


def api_key(config: dict[str, Any]) -> str:
    """The key from the environment variable ``API_KEY_ENV`` names; ``""`` when there is none."""
    return os.environ.get(config["API_KEY_ENV"] or "", "")


def llm_configured() -> bool:
    """A model is named and there is an endpoint or a key to reach one with."""
    config = assistant_settings.llm
    return bool(config["MODEL"] and (config["BASE_URL"] or api_key(config)))


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The process's one SSL context for model endpoints (loading the CA bundle is the costly
    part of building an HTTP client: ~20 ms of CPU)."""
    return ssl.create_default_context()


def _options(config: dict[str, Any]) -> dict[str, Any]:
    if not config["MODEL"]:
        raise LLMUnavailable("No language model is configured (ASSISTANT['LLM']['MODEL']).")
    return {
        "base_url": config["BASE_URL"],
        "api_key": api_key(config) or "not-needed",  # local servers take any key
        "timeout": config["TIMEOUT"],
        "read_timeout": config.get("STREAM_TIMEOUT") or config["TIMEOUT"],
        "max_retries": 0,
    }


def _client_options(config: dict[str, Any]) -> dict[str, Any]:
    """``TIMEOUT`` to connect and send; ``STREAM_TIMEOUT`` for each wait on the reply."""
    import openai

    options = _options(config)
    read = options.pop("read_timeout")
    return {**options, "timeout": openai.Timeout(options["timeout"], read=read)}


@functools.cache
def _http_clients() -> tuple[type[Any], type[Any]]:
    """openai's sync and async HTTP clients, sending a request the server hung up on once more.

    At the client, not a transport: a transport of our own would turn off the proxies the
    environment names (``HTTPS_PROXY``), which the openai package's clients honour.
    """
    import httpx2  # what the openai package speaks HTTP with (a dependency of openai>=3.50)
    import openai

    unanswered = (httpx2.RemoteProtocolError, httpx2.ReadError, httpx2.WriteError)

    def resent(exc: Exception) -> None:
        logger.info("The model server closed the connection unanswered (%s): sending again", exc)

    class Resending(openai.DefaultHttpxClient):
        def send(self, request: Any, *, stream: bool = False, **options: Any) -> Any:
            try:  # (streamed, it returns at the headers: an error here is no answer at all)
                response = super().send(request, stream=True, **options)
            except unanswered as exc:
                resent(exc)
                response = super().send(request, stream=True, **options)
            if not stream:
                try:
                    response.read()
                except BaseException:
                    response.close()
                    raise
            return response

    class AsyncResending(openai.DefaultAsyncHttpxClient):
        async def send(self, request: Any, *, stream: bool = False, **options: Any) -> Any:
            try:
                response = await super().send(request, stream=True, **options)
            except unanswered as exc:
                resent(exc)
                response = await super().send(request, stream=True, **options)
            if not stream:
                try:
                    await response.aread()
                except BaseException:
                    await response.aclose()
                    raise
            return response

    return Resending, AsyncResending


def make_client(config: dict[str, Any] | None = None) -> openai.OpenAI:
    """A client of ``config`` (``assistant_settings.llm`` by default); close it when done."""
    import openai

    http = _http_clients()[0](verify=tls_context())
    options = _client_options(assistant_settings.llm if config is None else config)
    return openai.OpenAI(**options, http_client=http)


def make_async_client(config: dict[str, Any] | None = None) -> openai.AsyncOpenAI:
    """The async twin of ``make_client``."""
    import openai

    http = _http_clients()[1](verify=tls_context())
    options = _client_options(assistant_settings.llm if config is None else config)
    return openai.AsyncOpenAI(**options, http_client=http)


_shared: dict[asyncio.AbstractEventLoop, dict[tuple[Any, ...], openai.AsyncOpenAI]] = {}


def shared_async_client(config: dict[str, Any] | None = None) -> openai.AsyncOpenAI:
    """This event loop's client of ``config``, made on first use and kept: never close it
    (``aclose_shared_clients`` does, at shutdown)."""
    config = assistant_settings.llm if config is None else config
    options = _options(config)
    loop = asyncio.get_running_loop()
    clients = _shared.get(loop)
    if clients is None:
        for old in [old for old in _shared if old.is_closed()]:
            del _shared[old]  # its connections went with its loop
        clients = _shared[loop] = {}
    key = tuple(sorted(options.items()))
    client = clients.get(key)
    if client is None:
        client = clients[key] = make_async_client(config)
    return client


async def aclose_shared_clients() -> None:
    """Close this event loop's shared clients (a server's shutdown; tests)."""
    clients = _shared.pop(asyncio.get_running_loop(), {})
    for client in clients.values():
        try:
            await client.close()
        except Exception:
            logger.exception("Closing a language-model client failed")
