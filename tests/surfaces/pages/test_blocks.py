"""A project extends the chat page through its blocks instead of copying the template."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.test import Client, override_settings

pytestmark = pytest.mark.django_db

EXTENDED = Path(__file__).parents[2] / "extended_templates"


def extended_templates() -> list[dict[str, Any]]:
    """The test project's templates, with a project-level assistant/chat.html that extends ours."""
    (engine,) = settings.TEMPLATES
    return [{**engine, "DIRS": [EXTENDED, *engine["DIRS"]]}]


def test_a_project_template_extends_each_block_and_keeps_the_page(plain_user: Any) -> None:
    client = Client()
    client.force_login(plain_user)

    with override_settings(TEMPLATES=extended_templates()):
        page = client.get("/assistant/").content.decode()

    head, body = page.split("</head>", 1)
    assert '<meta name="project-head" content="added">' in head
    assert "chat.css" in head  # {{ block.super }} kept ours
    assert body.index('class="project-banner"') < body.index('<header class="chat-head">')
    assert body.index('id="conversations"') < body.index('class="project-sidebar"')
    assert body.index('class="project-composer"') < body.index('<form id="composer"')
