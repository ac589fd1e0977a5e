"""Tools the test suite relies on; found by autodiscovery like any project's."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from typing import Annotated, Literal

from django.db.models import F

from assistant import ToolCall, ToolResult, assistant_tool
from assistant.exceptions import PermissionDenied

from .models import Order


@assistant_tool(
    operation="ping",
    domain="diagnostics",
    description="Answer pong",
    risk_level="safe",
    public=True,
    keywords=["ping"],
)
def ping(call: ToolCall) -> ToolResult:
    return ToolResult(text=f"pong for {call.user.get_username()}")


@assistant_tool(
    operation="apong",
    domain="diagnostics",
    description="Answer pong from an async handler",
    risk_level="safe",
    public=True,
    keywords=["async ping"],
)
async def apong(call: ToolCall, times: int = 1) -> ToolResult:
    return ToolResult(text=" ".join(["pong"] * times))


@assistant_tool(
    operation="list_orders",
    domain="orders",
    description="List orders, optionally by status",
    risk_level="safe",
    permission_checks=[("orders", "READ")],
    keywords=["list orders", "orders"],
)
def list_orders(
    call: ToolCall,
    status: Literal["open", "shipped", "cancelled"] | None = None,
    page: int = 1,
) -> ToolResult:
    orders = Order.objects.order_by("reference")
    if status:
        orders = orders.filter(status=status)
    references = list(orders.values_list("reference", flat=True))
    return ToolResult(text=", ".join(references) or "no orders", data=references)


@assistant_tool(
    operation="show_report",
    domain="reports",
    description="Show a named report",
    risk_level="safe",
    permission_checks=[("reports", "READ")],
    keywords=["show report", "report"],
)
def show_report(call: ToolCall, name: Annotated[str, "the report's name"]) -> ToolResult:
    return ToolResult(text=f"report {name}")


@assistant_tool(
    operation="approve_order",
    domain="orders",
    description="Approve an order",
    risk_level="guarded",
    requires_confirmation=True,
    permission_checks=["testapp.approve_order"],
    object_check=("order_id", "testapp.Order"),
    keywords=["approve order", "approve"],
)
def approve_order(call: ToolCall, order_id: int, note: str = "") -> ToolResult:
    Order.objects.filter(pk=order_id).update(approvals=F("approvals") + 1, status="approved")
    return ToolResult(
        text=f"Approved {call.instance.reference}", actions=[{"type": "approved", "id": order_id}]
    )


@assistant_tool(
    operation="cancel_order",
    domain="orders",
    description="Cancel an order for good",
    risk_level="dangerous",
    requires_confirmation=True,
    permission_checks=[("orders", "UPDATE")],
    object_check=("order_id", "testapp.Order"),
    keywords=["cancel order"],
)
def cancel_order(call: ToolCall, order_id: int) -> ToolResult:
    Order.objects.filter(pk=order_id).update(status="cancelled")
    return ToolResult(text=f"Cancelled order {order_id}")


@assistant_tool(
    operation="merge_orders",
    domain="orders",
    description="Merge two orders into one",
    risk_level="guarded",
    permission_checks=[("orders", "UPDATE"), ("orders", "DELETE")],
    keywords=["merge orders"],
)
def merge_orders(call: ToolCall, keep: int, remove: int) -> ToolResult:
    return ToolResult(text=f"merged {remove} into {keep}")


@assistant_tool(
    operation="export_orders",
    domain="orders",
    description="Export orders as CSV",
    risk_level="safe",
    permission_checks=["testapp.view_order", ("reports", "READ")],
    permission_mode="any",
    keywords=["export orders"],
)
def export_orders(call: ToolCall) -> ToolResult:
    return ToolResult(
        text="reference\n" + "\n".join(Order.objects.values_list("reference", flat=True))
    )


@assistant_tool(
    operation="store_secret",
    domain="vault",
    description="Store a secret under a label",
    risk_level="guarded",
    permission_checks=[("vault", "WRITE")],
    sensitive_entities=["secret"],
    keywords=["store secret"],
)
def store_secret(call: ToolCall, label: str, secret: str) -> ToolResult:
    return ToolResult(text=f"stored {label} ({len(secret)} characters)")


@assistant_tool(
    operation="explode",
    domain="diagnostics",
    description="Always fails",
    risk_level="safe",
    public=True,
    keywords=["explode"],
)
def explode(call: ToolCall) -> ToolResult:
    raise RuntimeError("boom: internal detail 42")


@assistant_tool(
    operation="forbid",
    domain="diagnostics",
    description="Refuses from inside the handler",
    risk_level="safe",
    public=True,
    keywords=["forbid"],
)
def forbid(call: ToolCall) -> ToolResult:
    raise PermissionDenied("Not on Sundays.")


@assistant_tool(
    operation="echo_types",
    domain="diagnostics",
    description="Echo typed entities back",
    risk_level="safe",
    public=True,
    keywords=["echo types"],
)
def echo_types(
    call: ToolCall,
    count: int,
    ratio: float = 1.0,
    flag: bool = False,
    tags: list[str] | None = None,
    when: dt.date | None = None,
    kind: Literal["a", "b"] = "a",
    ident: uuid.UUID | None = None,
    meta: dict[str, object] | None = None,
) -> ToolResult:
    values = {
        "count": count,
        "ratio": ratio,
        "flag": flag,
        "tags": tags,
        "when": when.isoformat() if when else None,
        "kind": kind,
        "ident": str(ident) if ident else None,
        "meta": meta,
    }
    return ToolResult(text=repr(values), data=values)


@assistant_tool(
    operation="slow",
    domain="diagnostics",
    description="Take a while (async), reporting how long it ran",
    risk_level="safe",
    public=True,
    keywords=["slow", "take your time"],
)
async def slow(call: ToolCall, seconds: float = 30.0) -> ToolResult:
    await asyncio.sleep(seconds)
    return ToolResult(text=f"slept {seconds:g}s")


@assistant_tool(
    operation="slow_sync",
    domain="diagnostics",
    description="Take a while in a thread, stopping early when cancelled",
    risk_level="safe",
    public=True,
    keywords=["slow sync"],
)
def slow_sync(call: ToolCall, seconds: float = 30.0) -> ToolResult:
    assert call.cancel is not None
    if call.cancel.wait(seconds):
        return ToolResult(text="stopped early")
    return ToolResult(text=f"slept {seconds:g}s")
