"""Tools the test suite relies on; found by autodiscovery like any project's."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import uuid
from typing import Annotated, Literal

from django.db.models import F

from assistant import (
    CancellationToken,
    ToolCall,
    ToolResult,
    Toolset,
    assistant_tool,
    register_toolset,
)
from assistant.exceptions import PermissionDenied
from assistant.toolsets.sql import SQLInspector

from . import jobs
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
    operation="rotate_secret",
    domain="vault",
    description="Replace the secret stored under a label (asks first)",
    risk_level="guarded",
    requires_confirmation=True,
    permission_checks=[("vault", "WRITE")],
    sensitive_entities=["secret"],
    keywords=["rotate secret"],
)
def rotate_secret(call: ToolCall, label: str, secret: str) -> ToolResult:
    ROTATED.append(secret)
    return ToolResult(text=f"rotated {label} ({len(secret)} characters)")


ROTATED: list[str] = []  # the secrets rotate_secret's handler was given, in order


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


# -- toolsets (lifecycle tests) ------------------------------------------------------------------

LIFECYCLE_LOG: list[str] = []


@register_toolset
class Probe(Toolset):
    """Records its lifecycle; keeps a background task running until its token fires."""

    name = "probe"

    async def on_start(self, cancel: CancellationToken) -> None:
        LIFECYCLE_LOG.append("probe:start")
        self.heartbeats = 0
        self.spawn(self._beat())

    async def _beat(self) -> None:
        try:
            while True:
                self.heartbeats += 1
                await asyncio.sleep(0.01)
        except asyncio.CancelledError:
            LIFECYCLE_LOG.append("probe:background-exit")
            raise

    async def on_stop(self) -> None:
        LIFECYCLE_LOG.append("probe:stop")

    async def on_cancel(self) -> None:
        LIFECYCLE_LOG.append("probe:cancel")
        await super().on_cancel()

    @assistant_tool(
        operation="probe_state",
        domain="diagnostics",
        description="Report the probe toolset's state",
        risk_level="safe",
        permission_checks=[("diagnostics", "RUN")],
        keywords=["probe state"],
    )
    async def probe_state(self, call: ToolCall) -> ToolResult:
        return ToolResult(text=f"probe {self.state} id={id(self)}", data={"id": id(self)})


@register_toolset
class Broken(Toolset):
    """Fails to start."""

    name = "broken"

    async def on_start(self, cancel: CancellationToken) -> None:
        raise ConnectionError("the backend is down")

    @assistant_tool(
        operation="broken_tool",
        domain="diagnostics",
        description="A tool whose toolset cannot start",
        risk_level="safe",
        permission_checks=[("diagnostics", "RUN")],
        keywords=["broken tool"],
    )
    def broken_tool(self, call: ToolCall) -> ToolResult:
        return ToolResult(text="never")


@register_toolset
class Outage(Toolset):
    """A process-wide service that fails to start (one per server process)."""

    name = "outage"
    scope = "process"

    async def on_start(self, cancel: CancellationToken) -> None:
        raise ConnectionError("the service is down")

    @assistant_tool(
        operation="outage_status",
        domain="diagnostics",
        description="A tool whose process-wide toolset cannot start",
        risk_level="safe",
        permission_checks=[("diagnostics", "RUN")],
        keywords=["outage status"],
    )
    def outage_status(self, call: ToolCall) -> ToolResult:
        return ToolResult(text="never")


@register_toolset
class Sluggish(Toolset):
    """Takes ``delay`` seconds to start (set it in a test)."""

    name = "sluggish"
    delay: float = 0.0

    async def on_start(self, cancel: CancellationToken) -> None:
        await asyncio.sleep(type(self).delay)

    @assistant_tool(
        operation="sluggish_tool",
        domain="diagnostics",
        description="A tool whose toolset starts slowly",
        risk_level="safe",
        permission_checks=[("diagnostics", "RUN")],
        keywords=["sluggish tool"],
    )
    def sluggish_tool(self, call: ToolCall) -> ToolResult:
        return ToolResult(text="ready")


@register_toolset
class TestDatabase(SQLInspector):
    """The test database, read-only."""

    name = "test_database"
    database = "default"
    # On PostgreSQL the suite connects as a superuser: conftest creates a read-only role for this.
    role = os.environ.get("ASSISTANT_TEST_SQL_ROLE", "")


@assistant_tool(
    operation="overrun",
    domain="diagnostics",
    description="An async tool that overruns its timeout",
    risk_level="safe",
    permission_checks=[("diagnostics", "RUN")],
    timeout=0.2,
    keywords=["overrun"],
)
async def overrun(call: ToolCall, seconds: float = 5.0) -> ToolResult:
    await asyncio.sleep(seconds)
    return ToolResult(text="finished")


@assistant_tool(
    operation="overrun_sync",
    domain="diagnostics",
    description="A sync tool that overruns its timeout but watches its token",
    risk_level="safe",
    permission_checks=[("diagnostics", "RUN")],
    timeout=0.2,
    keywords=["overrun sync"],
)
def overrun_sync(call: ToolCall, seconds: float = 5.0) -> ToolResult:
    assert call.cancel is not None
    call.cancel.wait(seconds)
    return ToolResult(text="finished")


@assistant_tool(
    operation="start_job",
    domain="diagnostics",
    description="Start a background job",
    risk_level="guarded",
    permission_checks=[("diagnostics", "RUN")],
    keywords=["start job"],
    background=True,
)
def start_job(
    call: ToolCall,
    kind: Literal["count", "wait", "until", "explode"] = "count",
    steps: int = 3,
    seconds: float = 30.0,
) -> ToolResult:
    if kind == "count":
        job = call.jobs.enqueue(jobs.count_orders, steps)
    elif kind == "wait":
        job = call.jobs.enqueue(jobs.wait_for_cancel, seconds)
    elif kind == "until":
        job = call.jobs.enqueue(jobs.wait_for_go, seconds)
    else:
        job = call.jobs.enqueue(jobs.explode)
    return ToolResult(text=f"started {kind} job {job.pk}", task_id=str(job.pk))


RECORDED: list[dict[str, object]] = []


@assistant_tool(
    operation="record_call",
    domain="diagnostics",
    description="Remember that it ran; reply with unstorable text or raise if asked",
    risk_level="safe",
    permission_checks=[("diagnostics", "RUN")],
    keywords=["record call"],
)
def record_call(
    call: ToolCall,
    name: str = "",
    count: int = 0,
    ratio: float = 1.0,
    meta: dict[str, object] | None = None,
    reply: Literal["plain", "garbled", "raise"] = "plain",
) -> ToolResult:
    RECORDED.append(dict(call.entities))
    garbled = "NUL \x00, lone \ud800 and \udc80"
    if reply == "raise":
        raise RuntimeError(garbled)
    if reply == "garbled":
        return ToolResult(text=garbled, actions=[{"type": garbled, garbled: [garbled]}])
    return ToolResult(text=f"recorded {name}")
