"""The docs' reference pages cover everything the code declares: settings, check ids, commands.

The pages are rendered at build time from ``docs/_ext/reference_data.py``; these tests call its
functions (no Sphinx run) and compare them with the code itself.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from types import ModuleType

from assistant.conf import LLM_SETTINGS, SETTINGS
from tests.wheel import REPO


def reference_data() -> ModuleType:
    path = REPO / "docs" / "_ext" / "reference_data.py"
    spec = importlib.util.spec_from_file_location("reference_data", path)
    assert spec is not None, path
    assert spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_every_setting_conf_declares_is_in_the_settings_reference_with_its_doc() -> None:
    data = reference_data()

    shown = {row.name: row for row in data.setting_rows("ASSISTANT")}
    shown_llm = {row.name: row for row in data.setting_rows("LLM")}

    assert list(shown) == list(SETTINGS)
    assert list(shown_llm) == list(LLM_SETTINGS)
    for rows, declared in ((shown, SETTINGS), (shown_llm, LLM_SETTINGS)):
        for name, spec in declared.items():
            assert rows[name].doc == spec.doc != "", name
            assert rows[name].default == repr(spec.default), name


def test_every_check_id_in_the_checks_is_in_the_checks_reference_with_a_message() -> None:
    data = reference_data()
    code = "".join(path.read_text() for path in (REPO / "assistant/checks").glob("*.py"))
    ids_in_code = set(re.findall(r"assistant\.[EW]\d{3}", code))

    rows = {row.id: row for row in data.check_rows()}

    assert set(rows) == ids_in_code
    assert all(row.messages and row.level in ("Error", "Warning") for row in rows.values())
    assert rows["assistant.E001"].messages == ("The ASSISTANT setting must be a dict.",)
    assert rows["assistant.W001"].level == "Warning"


def test_every_management_command_is_in_the_commands_reference_with_its_help() -> None:
    data = reference_data()
    commands = {
        path.stem
        for path in (REPO / "assistant/management/commands").glob("*.py")
        if not path.stem.startswith("_")
    }

    rows = {row.name: row for row in data.command_rows()}

    assert set(rows) == commands
    assert all(row.help for row in rows.values())
    assert ("--dry-run", "list them, change nothing") in rows["assistant_reap_jobs"].arguments


def test_every_rest_route_is_in_the_rest_reference_with_a_summary() -> None:
    from assistant.surfaces.rest.urls import schema_patterns

    data = reference_data()
    routes = {
        "/assistant/api/" + re.sub(r"<\w+:(\w+)>", r"{\1}", str(pattern.pattern))
        for pattern in schema_patterns
    }

    rows = data.endpoint_rows()

    assert {row.path for row in rows} == routes
    assert all(row.summary for row in rows)
    assert ("POST", "/assistant/api/dispatch/") in {(row.method, row.path) for row in rows}


def test_every_keyword_of_the_decorator_is_in_the_decorator_reference() -> None:
    import inspect

    from assistant import assistant_tool

    data = reference_data()

    rows = {row.name: row for row in data.keyword_rows()}

    assert list(rows) == list(inspect.signature(assistant_tool).parameters)
    assert rows["operation"].default is None  # required
    assert rows["requires_confirmation"].default == "False"
