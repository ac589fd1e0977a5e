"""Without ``node_modules`` the accessibility tests skip, or fail where services are required (CI)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import axe


@pytest.fixture
def no_axe(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(axe, "AXE", tmp_path / "node_modules" / "axe-core" / "axe.min.js")


def test_missing_axe_skips_the_accessibility_tests(
    no_axe: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ASSISTANT_REQUIRE_SERVICES", raising=False)

    with pytest.raises(pytest.skip.Exception, match="run `npm ci`"):
        axe.require_axe()


def test_missing_axe_fails_them_when_services_are_required(
    no_axe: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ASSISTANT_REQUIRE_SERVICES", "1")

    with pytest.raises(pytest.fail.Exception, match="ASSISTANT_REQUIRE_SERVICES=1: needs axe-core"):
        axe.require_axe()


def test_the_installed_axe_is_the_one_package_json_pins() -> None:
    axe.require_axe()
    pinned = json.loads((Path(__file__).parents[3] / "package.json").read_text())
    header = axe.AXE.read_text(encoding="utf-8")[:100]
    assert f"axe v{pinned['devDependencies']['axe-core']}\n" in header  # else: run `npm ci` again
