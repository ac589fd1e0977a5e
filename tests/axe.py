"""axe-core (pinned in package.json, installed by ``npm ci``) run in a Playwright page."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Page

AXE = Path(__file__).resolve().parent.parent / "node_modules" / "axe-core" / "axe.min.js"
BLOCKING = ("serious", "critical")


def require_axe() -> None:
    """Skip without ``node_modules`` (run ``npm ci``), or fail when services are required."""
    if AXE.exists():
        return
    reason = f"needs axe-core at {AXE} (run `npm ci` at the repository root)"
    if os.environ.get("ASSISTANT_REQUIRE_SERVICES") == "1":
        pytest.fail(f"ASSISTANT_REQUIRE_SERVICES=1: {reason}")
    pytest.skip(reason)


def violations(page: Page) -> list[dict[str, Any]]:
    """The page's serious and critical axe violations (the chat page's context needs ``bypass_csp``)."""
    require_axe()
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.add_script_tag(path=str(AXE))
    found: list[dict[str, Any]] = page.evaluate(
        "async () => (await axe.run(document, {resultTypes: ['violations']})).violations"
    )
    return [violation for violation in found if violation["impact"] in BLOCKING]


def described(found: list[dict[str, Any]]) -> list[str]:
    """Each violation as its rule, help and the first offending elements (a readable failure)."""
    return [
        f"{violation['id']} ({violation['impact']}): {violation['help']}: "
        + " | ".join(
            f"{node['target']} {node.get('failureSummary', '')[:160]}"
            for node in violation["nodes"][:4]
        )
        for violation in found
    ]


def assert_accessible(page: Page) -> None:
    """No serious or critical axe violation on the page as it stands."""
    found = described(violations(page))
    assert not found, "\n".join(found)
