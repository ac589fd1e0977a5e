"""The listing an MCP registry reads (server.json), checked against the registry's own schema.

``tests/schemas/mcp-server-2025-12-11.schema.json`` is the registry's published schema
(https://static.modelcontextprotocol.io/schemas/2025-12-11/server.schema.json), kept here so
the check needs no network.
"""

from __future__ import annotations

import json
import tomllib
from typing import Any

import jsonschema
from django.core.management import get_commands

import assistant
from tests.processes import ROOT

SCHEMA = ROOT / "tests" / "schemas" / "mcp-server-2025-12-11.schema.json"


def listing() -> dict[str, Any]:
    return json.loads((ROOT / "server.json").read_text())


def test_the_listing_is_valid_under_the_schema_it_names() -> None:
    schema = json.loads(SCHEMA.read_text())
    server = listing()
    assert server["$schema"] == schema["$id"]
    validator = jsonschema.Draft7Validator(schema, format_checker=jsonschema.FormatChecker())
    assert [error.message for error in validator.iter_errors(server)] == []


def test_the_listing_names_the_package_at_its_version() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    server = listing()
    [package] = server["packages"]
    assert server["version"] == package["version"] == assistant.__version__
    assert (package["registryType"], package["identifier"]) == ("pypi", project["name"])
    assert package["packageArguments"][0]["value"] in get_commands()  # what stdio runs


def test_the_readme_proves_the_package_is_this_servers() -> None:
    """The registry accepts a PyPI package whose description (the README) names the server."""
    readme = (ROOT / "README.md").read_text()
    assert f"mcp-name: {listing()['name']}" in readme
