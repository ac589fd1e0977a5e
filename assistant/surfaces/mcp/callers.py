"""Who an MCP request acts for: the caller the HTTP view (or stdio) authenticated, and its client's name."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mcp.server.context import ServerRequestContext

from ...access.caches import reread_access
from ...access.tokens import Bearer

SCOPE_KEY = "assistant.caller"  # where the HTTP view leaves the authenticated caller


@dataclass(frozen=True, kw_only=True, slots=True)
class Caller:
    """Who an MCP request acts for, through which credential, and where its links point."""

    bearer: Bearer
    request_ip: str | None = None
    base_url: str = ""  # scheme and host of the request ("" for stdio: relative links)

    @property
    def user(self) -> Any:
        return self.bearer.user


def caller_of(ctx: ServerRequestContext[Any, Any]) -> Caller:
    """The caller the HTTP view authenticated (or stdio's ``--user``)."""
    scope = getattr(ctx.request, "scope", None)
    caller = scope.get(SCOPE_KEY) if isinstance(scope, dict) else None
    if caller is None and isinstance(ctx.lifespan_context, dict):
        caller = ctx.lifespan_context.get(SCOPE_KEY)
        if isinstance(caller, Caller):
            # stdio's one user object outlives every request: each reads the user's flags and
            # permissions afresh, as a request over HTTP or a CLI call does
            reread_access(caller.user)
    if not isinstance(caller, Caller):  # the view refuses such requests before the SDK sees them
        raise RuntimeError("an MCP request reached the server without an authenticated caller")
    return caller


def client_label(ctx: ServerRequestContext[Any, Any], caller: Caller) -> str:
    """The audit's client column: the MCP client's name and version, and the token's name."""
    params = ctx.session.client_params
    info = params.client_info if params is not None else None
    name = f"{info.name} {info.version}".strip() if info is not None else "MCP client"
    return f"{name} ({caller.bearer.name})"[:200]
