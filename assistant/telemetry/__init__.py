"""Traces and metrics of turns, model calls and tool calls (OpenTelemetry GenAI conventions).

Off unless configured (``ASSISTANT["TELEMETRY"]``, or an ``OTEL_EXPORTER_OTLP_*`` endpoint in
the environment) and installed (the ``[otel]`` extra). Off, every function here answers with a
shared no-op and nothing imports ``opentelemetry``: the cost is one cached lookup per call.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from django.core.signals import setting_changed
from django.dispatch import receiver

from ..conf import assistant_settings

if TYPE_CHECKING:
    from ._otel import Telemetry

# The W3C trace context headers a caller's trace continues from.
PROPAGATED = ("traceparent", "tracestate")
ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


class Span(Protocol):
    """What instrumented code tells an open span (a no-op one when telemetry is off)."""

    def set(self, name: str, value: Any) -> None: ...

    def fail(self, error_type: str) -> None: ...


class NoSpan:
    """The span of disabled telemetry: it hears everything and keeps nothing."""

    def set(self, name: str, value: Any) -> None:
        return None

    def fail(self, error_type: str) -> None:
        return None


NO_SPAN = NoSpan()
_OFF: contextlib.nullcontext[NoSpan] = contextlib.nullcontext(NO_SPAN)
_UNSET: Any = object()
_active: Telemetry | None = _UNSET
_starting = threading.Lock()  # two first turns at once (two lanes) set up one telemetry


def installed() -> bool:
    """Whether the ``[otel]`` extra is installed (the SDK and its OTLP/HTTP exporter)."""
    try:  # (a submodule's lookup imports its parents: a missing one raises)
        return all(
            importlib.util.find_spec(name) is not None
            for name in ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http")
        )
    except ImportError:
        return False


def wanted() -> bool:
    """Whether telemetry is asked for: the setting, else an OTLP endpoint in the environment."""
    configured = assistant_settings.TELEMETRY
    if configured is not None:
        return bool(configured)
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return any(os.environ.get(name) for name in ENDPOINT_VARIABLES)


def active() -> Telemetry | None:
    """The process's telemetry, set up on first use; None when off (the common case: cached)."""
    if _active is _UNSET:
        _start()
    return _active


def _start() -> None:
    global _active
    with _starting:
        if _active is not _UNSET:
            return
        started = None
        if wanted() and installed():
            from ._otel import Telemetry

            started = Telemetry.start()
        _active = started


def reset() -> None:
    """Forget the telemetry (settings changed; a test's fresh start): flushed and shut down."""
    global _active
    with _starting:
        if _active is not _UNSET and _active is not None:
            _active.shutdown()
        _active = _UNSET


@receiver(setting_changed)
def _reset_on_change(*, setting: str, **kwargs: Any) -> None:
    if setting == "ASSISTANT":
        reset()


def carrier_of(headers: Mapping[str, Any] | Iterable[tuple[bytes, bytes]] | None) -> dict[str, str]:
    """The trace context of a request's headers (Django's ``request.headers``, an ASGI scope's)
    or of a process's environment (``os.environ``: ``TRACEPARENT``, ``TRACESTATE``)."""
    if not headers:
        return {}
    if isinstance(headers, Mapping):
        pairs: Iterable[tuple[Any, Any]] = headers.items()
    else:
        pairs = ((name.decode("latin-1"), value.decode("latin-1")) for name, value in headers)
    return {name.lower(): str(value)[:512] for name, value in pairs if name.lower() in PROPAGATED}


def incoming(carrier: Mapping[str, str] | None) -> contextlib.AbstractContextManager[Any]:
    """Continue the caller's trace (its ``traceparent``) for what starts inside the block."""
    telemetry = active()
    if telemetry is None or not carrier:
        return _OFF
    return telemetry.incoming(carrier)


def server_span(
    name: str,
    carrier: Mapping[str, str] | None,
    attributes: dict[str, Any],
    *,
    current: bool = True,
) -> contextlib.AbstractContextManager[Span]:
    """A SERVER span for a request a protocol surface serves (MCP, AG-UI), the caller's child.

    ``current=False`` for a block that yields (a streamed response): only ``within`` makes it
    the parent of what starts, for a step that does not.
    """
    telemetry = active()
    if telemetry is None:
        return _OFF
    return telemetry.server_span(name, carrier, attributes, current=current)


def within(span: Span) -> contextlib.AbstractContextManager[Any]:
    """Make ``span`` the parent of what starts inside the block (a launched turn)."""
    telemetry = active()
    return _OFF if telemetry is None or span is NO_SPAN else telemetry.within(span)


def turn_span(turn: Any) -> contextlib.AbstractContextManager[Span]:
    """The turn's ``invoke_agent`` span: the parent of its model and tool calls."""
    telemetry = active()
    return _OFF if telemetry is None else telemetry.turn_span(turn)


def model_span(config: Mapping[str, Any]) -> contextlib.AbstractContextManager[Span]:
    """One model call's ``chat {model}`` span (``answered`` adds what the model reported)."""
    telemetry = active()
    return _OFF if telemetry is None else telemetry.model_span(config)


def tool_span(call: Any) -> contextlib.AbstractContextManager[Span]:
    """A call's ``execute_tool`` span, opened at the door: current while its steps and its handler
    run (a handler's own spans are its children), ended once the call is audited."""
    telemetry = active()
    return _OFF if telemetry is None else telemetry.tool_span(call)


def tool_called(span: Span, call: Any, outcome: Any) -> None:
    """What an audited call came to, on the ``execute_tool`` span its door opened."""
    if span is NO_SPAN:
        return
    telemetry = active()
    if telemetry is not None:
        telemetry.tool_called(span, call, outcome)


@contextlib.contextmanager
def flushed() -> Iterator[None]:
    """Export what is pending when the block ends (a CLI command, a test)."""
    try:
        yield
    finally:
        telemetry = active()
        if telemetry is not None:
            telemetry.flush()


def answered(span: Span, model: str, usage: Mapping[str, int] | None, reasons: list[str]) -> None:
    """What a model call reported, on its span: the model that answered, tokens, finish reasons."""
    if span is NO_SPAN:
        return
    span.set("gen_ai.response.model", model or None)
    if usage is not None:
        span.set("gen_ai.usage.input_tokens", usage.get("prompt_tokens"))
        span.set("gen_ai.usage.output_tokens", usage.get("completion_tokens"))
    span.set("gen_ai.response.finish_reasons", reasons[:16])
