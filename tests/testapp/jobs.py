"""Job functions the test suite enqueues."""

from __future__ import annotations

import time

from assistant.jobs import JobContext

from .models import Order


def count_orders(job: JobContext, steps: int = 3, delay: float = 0.0) -> str:
    for step in range(1, steps + 1):
        job.report(100 * step / steps, f"step {step} of {steps}")
        time.sleep(delay)
    return f"{Order.objects.count()} orders"


def wait_for_cancel(job: JobContext, seconds: float = 30.0) -> str:
    """Cooperative: runs until cancelled (or ``seconds`` pass)."""
    job.report(10, "waiting")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if job.cancel.wait(0.05):
            return "stopped"
    return "waited"


def wait_for_go(job: JobContext, seconds: float = 30.0) -> str:
    """Runs until an order named "go" exists (the test says when), or ``seconds`` pass."""
    job.report(10, "waiting for go")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if Order.objects.filter(reference="go").exists():
            return "went"
        if job.cancel.wait(0.05):
            return "stopped"
    return "waited"


def explode(job: JobContext) -> str:
    job.report(50, "about to fail")
    raise RuntimeError("the job blew up")
