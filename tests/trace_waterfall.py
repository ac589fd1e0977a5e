"""An exported trace (the OTLP receiver's spans) drawn as a waterfall page, as trace viewers do."""

from __future__ import annotations

import html
from typing import Any

KINDS = {1: "internal", 2: "server", 3: "client"}
SHOWN_ATTRIBUTES = (
    "gen_ai.operation.name",
    "gen_ai.agent.name",
    "gen_ai.conversation.id",
    "gen_ai.request.model",
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "gen_ai.response.finish_reasons",
    "gen_ai.tool.name",
    "gen_ai.tool.call.id",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
    "assistant.audit_entry_id",
    "assistant.decision",
    "error.type",
)
STYLE = """
body { font: 13px system-ui, sans-serif; margin: 16px; color: #1f2328; background: #fff; }
h1 { font-size: 15px; margin: 0 0 4px; } p.trace { color: #57606a; margin: 0 0 12px; }
table { border-collapse: collapse; width: 100%; }
td { padding: 4px 6px; border-bottom: 1px solid #eaeef2; vertical-align: top; }
td.name { white-space: nowrap; width: 30%; } td.ms { text-align: right; width: 80px; white-space: nowrap; color: #57606a; }
.kind { font-size: 11px; color: #57606a; margin-left: 4px; }
.lane { position: relative; height: 14px; background: #f6f8fa; }
.bar { position: absolute; top: 0; height: 14px; border-radius: 2px; min-width: 2px; }
.server { background: #8250df; } .internal { background: #0969da; } .client { background: #1a7f37; }
.error { background: #cf222e; }
dl { margin: 4px 0 0; font: 11px ui-monospace, monospace; color: #424a53; }
dt { display: inline; color: #57606a; } dd { display: inline; margin: 0 10px 0 2px; }
"""


def depth_first(spans: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    """The spans in tree order (children by start time), each with its depth."""
    ids = {span["span_id"] for span in spans}
    children: dict[str, list[dict[str, Any]]] = {}
    for span in spans:
        parent = span["parent"] if span["parent"] in ids else ""
        children.setdefault(parent, []).append(span)
    ordered: list[tuple[int, dict[str, Any]]] = []

    def visit(parent: str, depth: int) -> None:
        for span in sorted(children.get(parent, []), key=lambda s: s["start"]):
            ordered.append((depth, span))
            visit(span["span_id"], depth + 1)

    visit("", 0)
    return ordered


def waterfall(spans: list[dict[str, Any]], title: str) -> str:
    """The page: one row a span, indented by depth, its bar placed on the trace's time line."""
    start = min(span["start"] for span in spans)
    total = max(span["end"] for span in spans) - start or 1
    rows = []
    for depth, span in depth_first(spans):
        left = 100 * (span["start"] - start) / total
        width = 100 * (span["end"] - span["start"]) / total
        kind = KINDS.get(span["kind"], "internal")
        tone = "error" if "error.type" in span["attributes"] else kind
        shown = "".join(
            f"<dt>{html.escape(key)}</dt><dd>{html.escape(str(span['attributes'][key]))}</dd>"
            for key in SHOWN_ATTRIBUTES
            if key in span["attributes"]
        )
        rows.append(
            f"<tr><td class='name' style='padding-left:{6 + 18 * depth}px'>"
            f"{html.escape(span['name'])}<span class='kind'>{kind}</span></td>"
            f"<td class='ms'>{(span['end'] - span['start']) / 1e6:.1f} ms</td>"
            f"<td><div class='lane'><div class='bar {tone}' "
            f"style='left:{left:.2f}%;width:{width:.2f}%'></div></div><dl>{shown}</dl></td></tr>"
        )
    trace_id = spans[0]["trace_id"]
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
        f"<p class='trace'>trace {trace_id} · {len(spans)} spans · {total / 1e6:.1f} ms</p>"
        f"<table>{''.join(rows)}</table></body></html>"
    )
