"""What the reference pages show, read from the code: settings, system checks, commands.

Plain Python (no Sphinx), so the test suite can check the reference covers everything.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import assistant

PACKAGE = Path(assistant.__file__).resolve().parent
CHECK_ID = re.compile(r"assistant\.[EW]\d{3}")


@dataclass(frozen=True, kw_only=True, slots=True)
class SettingRow:
    """One key of ``ASSISTANT`` (or of ``ASSISTANT["LLM"]``) as conf.py declares it."""

    name: str
    default: str
    expected: str
    example: str
    doc: str


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckRow:
    """One system check id: its level and every message and hint the checks give under it."""

    id: str
    level: str
    messages: tuple[str, ...]
    hints: tuple[str, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class EndpointRow:
    """One operation of the REST API as its OpenAPI schema describes it."""

    method: str
    path: str
    summary: str
    operation_id: str


@dataclass(frozen=True, kw_only=True, slots=True)
class KeywordRow:
    """One keyword of ``@assistant_tool``: its type and default, from the signature."""

    name: str
    annotation: str
    default: str | None  # None: required


@dataclass(frozen=True, kw_only=True, slots=True)
class CommandRow:
    """One management command: its help and its own arguments."""

    name: str
    help: str
    arguments: tuple[tuple[str, str], ...]


def setting_rows(group: str = "ASSISTANT") -> list[SettingRow]:
    """The declared keys of ``ASSISTANT`` or, with ``group="LLM"``, of ``ASSISTANT["LLM"]``."""
    from assistant.conf import LLM_SETTINGS, SETTINGS

    declared = LLM_SETTINGS if group == "LLM" else SETTINGS
    return [
        SettingRow(
            name=name,
            default=repr(spec.default),
            expected=spec.expected,
            example=spec.example,
            doc=spec.doc,
        )
        for name, spec in declared.items()
    ]


def _text(node: ast.expr | None) -> str:
    """A message as written, with each interpolated value shown as ``<its expression>``."""
    if node is None:
        return ""
    if isinstance(node, ast.Constant):
        return str(node.value)
    if isinstance(node, ast.JoinedStr):
        return "".join(_text(part) for part in node.values)
    if isinstance(node, ast.FormattedValue):
        return f"<{ast.unparse(node.value)}>"
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _text(node.left) + _text(node.right)
    if isinstance(node, ast.IfExp):
        return _text(node.body)
    return f"<{ast.unparse(node)}>"


def check_rows(source: Path = PACKAGE / "checks") -> list[CheckRow]:
    """Every ``Error``/``Warning`` with an ``assistant.*`` id in ``assistant/checks/``, by id."""
    found: dict[str, tuple[str, list[str], list[str]]] = {}
    paths = sorted(source.glob("*.py")) if source.is_dir() else [source]
    nodes = [node for path in paths for node in ast.walk(ast.parse(path.read_text()))]
    # _bad_value(key, problem, hint) is E002's template: its callers say what the problem is
    template = {
        id(inner)
        for node in nodes
        if isinstance(node, ast.FunctionDef) and node.name == "_bad_value"
        for inner in ast.walk(node)
    }
    for node in nodes:
        if not isinstance(node, ast.Call) or id(node) in template:
            continue
        keywords = {keyword.arg: keyword.value for keyword in node.keywords}
        ident = keywords.get("id")
        if isinstance(ident, ast.Constant) and isinstance(ident.value, str):
            level = node.func.id if isinstance(node.func, ast.Name) else ast.unparse(node.func)
            message = _text(node.args[0] if node.args else keywords.get("msg"))
            hint = _text(keywords.get("hint"))
        elif isinstance(node.func, ast.Name) and node.func.id == "_bad_value":
            ident = ast.Constant("assistant.E002")
            key, problem, hint_node = [*node.args, None, None, None][:3]
            level = "Error"
            message = f"ASSISTANT[{_text(key)}] {_text(problem)}."
            hint = _text(hint_node)
        else:
            continue
        if not CHECK_ID.fullmatch(ident.value):
            continue
        _, messages, hints = found.setdefault(ident.value, (level, [], []))
        if message and message not in messages:
            messages.append(message)
        if hint and hint not in hints:
            hints.append(hint)
    return [
        CheckRow(id=ident, level=level, messages=tuple(messages), hints=tuple(hints))
        for ident, (level, messages, hints) in sorted(found.items())
    ]


def command_rows() -> list[CommandRow]:
    """The app's management commands (Django must be set up), as ``manage.py help`` shows them."""
    from django.core.management import load_command_class

    rows = []
    for path in sorted((PACKAGE / "management" / "commands").glob("[!_]*.py")):
        command = load_command_class("assistant", path.stem)
        parser = command.create_parser("manage.py", path.stem)
        arguments = tuple(
            (
                ", ".join(action.option_strings) or str(action.metavar or action.dest),
                action.help or "",
            )
            for action in parser._actions
            if action.dest not in _DJANGO_OPTIONS and action.help != "==SUPPRESS=="
        )
        rows.append(
            CommandRow(
                name=path.stem,
                help=str(command.help),
                arguments=arguments,
            )
        )
    return rows


# the options every Django command has (manage.py help lists them once, so do we)
_DJANGO_OPTIONS = {
    "help",
    "version",
    "verbosity",
    "settings",
    "pythonpath",
    "traceback",
    "no_color",
    "force_color",
    "skip_checks",
}


def endpoint_rows(mount: str = "assistant/api/") -> list[EndpointRow]:
    """The REST API's operations, from the OpenAPI schema drf-spectacular makes of its views."""
    from django.urls import include, path
    from drf_spectacular.drainage import GENERATOR_STATS
    from drf_spectacular.generators import SchemaGenerator
    from drf_spectacular.settings import patched_settings

    from assistant.surfaces.rest.urls import schema_patterns

    with GENERATOR_STATS.silence(), patched_settings({"COMPONENT_SPLIT_REQUEST": True}):
        generator = SchemaGenerator(patterns=[path(mount, include(schema_patterns))])
        schema = generator.get_schema(request=None, public=True)
    return [
        EndpointRow(
            method=method.upper(),
            path=route,
            summary=operation.get("summary") or operation.get("description", ""),
            operation_id=operation.get("operationId", ""),
        )
        for route, operations in schema["paths"].items()
        for method, operation in operations.items()
    ]


def keyword_rows() -> list[KeywordRow]:
    """The keywords ``@assistant_tool`` takes, as its signature declares them."""
    import inspect

    from assistant import assistant_tool

    return [
        KeywordRow(
            name=name,
            annotation=str(parameter.annotation),
            default=None if parameter.default is parameter.empty else repr(parameter.default),
        )
        for name, parameter in inspect.signature(assistant_tool).parameters.items()
    ]
