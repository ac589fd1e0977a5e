"""``manage.py assistant_mcp --user NAME``: the tools over MCP's stdio transport, for local clients.

The same server as ``assistant/surfaces/mcp/`` (its stdio entry, ``stdio.serve``): that user's permissions, calls audited as source ``mcp``,
confirmations approved on the approvals page (set ``ASSISTANT["PUBLIC_URL"]`` for full links).
stdout carries the protocol only; Django's and our logs go to stderr.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser


class Command(BaseCommand):
    help = "Serve the assistant's tools over MCP stdio as a user (for Claude Desktop, Cursor, …)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--user", required=True, help="act as this user (username)")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            from ...surfaces.mcp import stdio
        except ImportError as exc:
            raise CommandError(
                "MCP needs the official SDK: pip install 'django-ops-assistant[mcp]'"
            ) from exc
        User = get_user_model()
        user = User._default_manager.filter(**{User.USERNAME_FIELD: options["user"]}).first()
        if user is None:
            raise CommandError(f"No user named {options['user']!r}.")
        if not user.is_active:
            raise CommandError(f"{options['user']!r} is deactivated.")
        logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
        stdio.serve(user)
