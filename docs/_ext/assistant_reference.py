"""Sphinx directives that render the app's settings, system checks and commands from the code.

``assistant-settings`` (argument ``ASSISTANT`` or ``LLM``), ``assistant-checks``,
``assistant-commands``, ``assistant-rest-api`` and ``assistant-decorator`` build their tables at
build time, so the reference cannot drift.
"""

from __future__ import annotations

import os
from typing import Any

import django
import reference_data
from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

Cell = str | list[nodes.Node]


def _code(text: str) -> nodes.literal:
    return nodes.literal(text, text)


def _paragraph(*parts: nodes.Node | str) -> nodes.paragraph:
    paragraph = nodes.paragraph()
    for part in parts:
        paragraph += nodes.Text(part) if isinstance(part, str) else part
    return paragraph


def _table(
    headers: list[str], widths: list[int], rows: list[tuple[list[str], list[Cell]]]
) -> nodes.table:
    """A table; each row is (the ids of its anchor, its cells: text or a list of nodes)."""
    table = nodes.table(classes=["assistant-reference"])
    group = nodes.tgroup(cols=len(headers))
    table += group
    for width in widths:
        group += nodes.colspec(colwidth=width)
    head = nodes.thead()
    group += head
    row = nodes.row()
    for header in headers:
        row += nodes.entry("", _paragraph(header))
    head += row
    body = nodes.tbody()
    group += body
    for ids, cells in rows:
        row = nodes.row(ids=ids)
        for cell in cells:
            entry = nodes.entry()
            entry += [_paragraph(cell)] if isinstance(cell, str) else cell
            row += entry
        body += row
    return table


class SettingsDirective(SphinxDirective):
    """Every key of ``ASSISTANT`` (or ``ASSISTANT["LLM"]``) that assistant/conf.py declares."""

    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        group = self.arguments[0]
        prefix = "llm-" if group == "LLM" else ""
        rows: list[tuple[list[str], list[Cell]]] = [
            (
                [f"setting-{prefix}{row.name.lower().replace('_', '-')}"],
                [
                    [_paragraph(_code(row.name))],
                    [_paragraph(_code(row.default))],
                    [_paragraph(row.expected, "; e.g. ", _code(row.example))],
                    row.doc,
                ],
            )
            for row in reference_data.setting_rows(group)
        ]
        return [_table(["key", "default", "accepts", "what it does"], [20, 15, 25, 40], rows)]


class ChecksDirective(SphinxDirective):
    """Every system check id assistant/checks/ can report, with its messages and hints."""

    def run(self) -> list[nodes.Node]:
        rows: list[tuple[list[str], list[Cell]]] = []
        for row in reference_data.check_rows():
            messages: list[nodes.Node] = [_paragraph(message) for message in row.messages]
            hints: list[nodes.Node] = [_paragraph(hint) for hint in row.hints]
            rows.append(
                (
                    [row.id.replace(".", "-").lower()],
                    [[_paragraph(_code(row.id))], row.level, messages, hints],
                )
            )
        return [_table(["id", "level", "message", "hint"], [14, 8, 45, 33], rows)]


class CommandsDirective(SphinxDirective):
    """The app's management commands, their help and their own arguments."""

    def run(self) -> list[nodes.Node]:
        rows: list[tuple[list[str], list[Cell]]] = []
        for row in reference_data.command_rows():
            arguments = nodes.bullet_list()
            for flags, text in row.arguments:
                arguments += nodes.list_item(
                    "", _paragraph(_code(flags), f": {text}" if text else "")
                )
            rows.append(
                (
                    [f"command-{row.name.replace('_', '-')}"],
                    [[_paragraph(_code(row.name))], row.help, [arguments] if row.arguments else ""],
                )
            )
        return [_table(["command", "what it does", "arguments"], [22, 38, 40], rows)]


class RestApiDirective(SphinxDirective):
    """The REST API's operations under ``assistant/api/``, from its OpenAPI schema."""

    def run(self) -> list[nodes.Node]:
        rows: list[tuple[list[str], list[Cell]]] = [
            (
                [f"api-{row.operation_id.replace('_', '-')}"],
                [[_paragraph(_code(f"{row.method} {row.path}"))], row.summary],
            )
            for row in reference_data.endpoint_rows()
        ]
        return [_table(["operation", "what it does"], [45, 55], rows)]


class DecoratorDirective(SphinxDirective):
    """The keywords of ``@assistant_tool``, from its signature."""

    def run(self) -> list[nodes.Node]:
        rows: list[tuple[list[str], list[Cell]]] = [
            (
                [f"keyword-{row.name.replace('_', '-')}"],
                [
                    [_paragraph(_code(row.name))],
                    [_paragraph(_code(row.annotation))],
                    "required" if row.default is None else [_paragraph(_code(row.default))],
                ],
            )
            for row in reference_data.keyword_rows()
        ]
        return [_table(["keyword", "type", "default"], [30, 45, 25], rows)]


def setup(app: Sphinx) -> dict[str, Any]:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "docs_settings")
    django.setup()
    app.add_directive("assistant-settings", SettingsDirective)
    app.add_directive("assistant-checks", ChecksDirective)
    app.add_directive("assistant-commands", CommandsDirective)
    app.add_directive("assistant-rest-api", RestApiDirective)
    app.add_directive("assistant-decorator", DecoratorDirective)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
