"""The public API: what ``assistant`` exports, and old import paths kept for one release."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import assistant
from assistant.core.registry import registry
from assistant.dispatch.calls import CallContext
from assistant.dispatch.catalog import get_catalog

MOVED = {
    "assistant.registry": "assistant.core.registry",
    "assistant.entities": "assistant.core.entities",
    "assistant.lifecycle": "assistant.core.lifecycle",
    "assistant.cancellation": "assistant.core.cancellation",
    "assistant.storable": "assistant.core.storable",
    "assistant.catalog": "assistant.dispatch.catalog",
    "assistant.permissions": "assistant.access.permissions",
    "assistant.tokens": "assistant.access.tokens",
    "assistant.approvals": "assistant.access.approvals",
    "assistant.turn": "assistant.turns.turn",
    "assistant.planner.keywords": "assistant.turns.planners.keywords",
    "assistant.planner.llm": "assistant.turns.planners.llm",
}


@pytest.fixture
def forgotten(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """Old paths imported afresh, and ``assistant``'s attributes put back afterwards."""
    for name in [*MOVED, "assistant.planner"]:
        monkeypatch.delitem(sys.modules, name, raising=False)
    for name in {old.split(".")[1] for old in MOVED}:
        monkeypatch.setattr(assistant, name, getattr(assistant, name, None), raising=False)
    return monkeypatch


def test_every_public_name_is_importable_from_assistant() -> None:
    for name in assistant.__all__:
        assert getattr(assistant, name) is not None, name


def test_the_adr_names_are_the_ones_the_app_uses() -> None:
    assert assistant.registry is registry
    assert assistant.get_catalog is get_catalog
    assert assistant.CallContext is CallContext
    from assistant.dispatch import adispatch, dispatch

    assert (dispatch.__module__, adispatch.__module__) == ("assistant.dispatch.door",) * 2


def test_importing_assistant_imports_no_model_and_needs_no_settings() -> None:
    code = "import sys, assistant; print(sorted(m for m in sys.modules if m == 'assistant.models'))"
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PATH": "", "PYTHONPATH": str(__import__("pathlib").Path(__file__).parents[1])},
        check=True,
    )
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_an_old_path_warns_and_gives_the_same_module(
    forgotten: pytest.MonkeyPatch, old: str, new: str
) -> None:
    if old.startswith("assistant.planner."):
        with pytest.deprecated_call(match=r"^assistant\.planner moved"):
            importlib.import_module("assistant.planner")
    with pytest.deprecated_call(match=rf"^{old} moved to {new}"):
        moved = importlib.import_module(old)
    if old == "assistant.registry":  # it stands in for the registry object too
        assert moved.ToolCall is importlib.import_module(new).ToolCall
        assert moved.get == registry.get
    else:
        assert moved is importlib.import_module(new)


def test_the_old_planner_package_gives_the_new_ones_names(forgotten: pytest.MonkeyPatch) -> None:
    with pytest.deprecated_call(match=r"^assistant\.planner moved to assistant\.turns\.planners"):
        from assistant.planner import KeywordPlanner, get_planner
    from assistant.turns import planners

    assert (KeywordPlanner, get_planner) == (planners.KeywordPlanner, planners.get_planner)
