"""A real OTLP/HTTP receiver on 127.0.0.1: what the SDK's exporter sends, decoded (protobuf).

``receiver.spans`` are the exported spans as plain dicts (name, ids, parent, kind, attributes,
events, resource); ``receiver.metrics`` the exported metric points by name.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


def plain(value: AnyValue) -> Any:
    """An OTLP attribute value as Python."""
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [plain(item) for item in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: plain(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind) if kind else None


def attributes(pairs: Any) -> dict[str, Any]:
    return {kv.key: plain(kv.value) for kv in pairs}


@dataclass
class Receiver:
    url: str = ""
    spans: list[dict[str, Any]] = field(default_factory=list)
    metrics: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    requests: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take_traces(self, body: bytes) -> bytes:
        request = ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            resource = attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.spans.append(
                        {
                            "name": span.name,
                            "trace_id": span.trace_id.hex(),
                            "span_id": span.span_id.hex(),
                            "parent": span.parent_span_id.hex(),
                            "kind": span.kind,
                            "start": span.start_time_unix_nano,
                            "end": span.end_time_unix_nano,
                            "status": span.status.code,
                            "attributes": attributes(span.attributes),
                            "events": [
                                {"name": e.name, "attributes": attributes(e.attributes)}
                                for e in span.events
                            ],
                            "resource": resource,
                            "scope": scope_spans.scope.name,
                            "schema_url": scope_spans.schema_url,
                        }
                    )
        return ExportTraceServiceResponse().SerializeToString()

    def take_metrics(self, body: bytes) -> bytes:
        request = ExportMetricsServiceRequest.FromString(body)
        for resource_metrics in request.resource_metrics:
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    kind = metric.WhichOneof("data")
                    points = getattr(metric, kind).data_points
                    self.metrics[metric.name] = [
                        {
                            "kind": kind,
                            "unit": metric.unit,
                            "attributes": attributes(point.attributes),
                            "count": getattr(point, "count", None),
                            "sum": getattr(point, "sum", None),
                            "value": getattr(point, "as_int", None),
                        }
                        for point in points
                    ]
        return ExportMetricsServiceResponse().SerializeToString()

    def named(self, name: str) -> list[dict[str, Any]]:
        return [span for span in self.spans if span["name"] == name]

    def one(self, name: str) -> dict[str, Any]:
        (found,) = self.named(name)
        return found

    def clear(self) -> None:
        with self.lock:
            self.spans.clear()
            self.metrics.clear()


class _Handler(BaseHTTPRequestHandler):
    receiver: Receiver

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        assert self.headers.get("Content-Encoding") in (None, "identity"), "compressed export"
        with self.receiver.lock:
            self.receiver.requests.append(self.path)
            if self.path == "/v1/traces":
                answer = self.receiver.take_traces(body)
            elif self.path == "/v1/metrics":
                answer = self.receiver.take_metrics(body)
            else:
                self.send_response(404)
                self.end_headers()
                return
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)


@pytest.fixture
def otlp_receiver() -> Iterator[Receiver]:
    receiver = Receiver()
    handler = type("Handler", (_Handler,), {"receiver": receiver})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
