"""Telemetry asked for but not installed (W020)."""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Warning, register

from .. import telemetry


@register("assistant")
def check_telemetry(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """assistant.W020: telemetry is asked for (the setting or an OTLP endpoint) but not installed."""
    if not telemetry.wanted() or telemetry.installed():
        return []
    return [
        Warning(
            "Telemetry is asked for (ASSISTANT['TELEMETRY'] or OTEL_EXPORTER_OTLP_ENDPOINT), but "
            "the OpenTelemetry SDK or its OTLP/HTTP exporter is not installed: nothing is traced.",
            hint="Install the [otel] extra (pip install 'django-ops-assistant[otel]'), or set "
            "ASSISTANT['TELEMETRY'] = False.",
            id="assistant.W020",
        )
    ]
