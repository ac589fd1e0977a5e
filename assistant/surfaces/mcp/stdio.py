"""MCP over stdio: one local user's tools, for a client that starts ``manage.py assistant_mcp``."""

from __future__ import annotations

from typing import Any

import anyio
from mcp.server.stdio import stdio_server

from ...access.tokens import Bearer
from .callers import Caller
from .server import build_server, stdio_lifespan


def serve(user: Any) -> None:
    """Serve ``user``'s tools over stdin and stdout until the client closes them."""
    caller = Caller(bearer=Bearer(user=user, kind="local", name="stdio"))
    server = build_server(lifespan=stdio_lifespan(caller))

    async def run() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(run)
