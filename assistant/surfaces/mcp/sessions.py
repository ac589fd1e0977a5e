"""The SDK's Streamable HTTP session manager, holding at most a set number of sessions per credential."""

from __future__ import annotations

import logging
import time
from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthorizationContext
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER, StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from ...conf import assistant_settings

logger = logging.getLogger("assistant.mcp")

SESSION_HEADER = MCP_SESSION_ID_HEADER.lower().encode("latin-1")


class CappedSessionManager(StreamableHTTPSessionManager):
    """A credential opening one session more than ``MCP_MAX_SESSIONS_PER_CREDENTIAL`` closes its
    least recently used one (an idle one first), whose id then answers the SDK's 404.

    It extends the SDK's private admission and discard steps (mcp 2.3): the suite's
    ``tests/surfaces/mcp/test_sessions.py`` says when an SDK upgrade moves them.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._last_used: dict[str, float] = {}

    async def _handle_stateful_request(self, scope: Any, receive: Any, send: Any) -> None:
        session_id = next(
            (value.decode("latin-1") for name, value in scope["headers"] if name == SESSION_HEADER),
            None,
        )
        if session_id is not None and session_id in self._last_used:
            self._last_used[session_id] = time.monotonic()
        await super()._handle_stateful_request(scope, receive, send)

    def _admit_session(
        self, requestor: AuthorizationContext | None
    ) -> StreamableHTTPServerTransport | None:
        transport = super()._admit_session(requestor)
        if transport is not None and transport.mcp_session_id is not None:
            self._last_used[transport.mcp_session_id] = time.monotonic()
            if requestor is not None:
                self._close_beyond_cap(requestor, opened=transport.mcp_session_id)
        return transport

    def _close_beyond_cap(self, requestor: AuthorizationContext, *, opened: str) -> None:
        cap = assistant_settings.MCP_MAX_SESSIONS_PER_CREDENTIAL
        if cap is None:
            return
        others = [
            session_id
            for session_id, owner in self._session_owners.items()
            if owner == requestor and session_id != opened and session_id in self._server_instances
        ]
        while len(others) >= cap:
            victim = min(others, key=self._closing_order)
            others.remove(victim)
            # forgotten at once (its id answers 404 from now on); its transport ends in the
            # manager's task group, as the SDK's own discard does
            transport = self._server_instances.pop(victim)
            self._session_owners.pop(victim, None)
            self._last_used.pop(victim, None)
            assert self._task_group is not None
            self._task_group.start_soon(self._discard_session, victim, transport)
            logger.info(
                "Closed MCP session %s: its credential (%s) opened more than %s",
                victim,
                requestor.get("client_id"),
                cap,
            )

    def _closing_order(self, session_id: str) -> tuple[bool, float]:
        """Idle sessions first (no request in flight, no open stream), then the least recently used."""
        busy = getattr(self._server_instances[session_id], "_requests_in_flight", 0) > 0
        return busy, self._last_used.get(session_id, 0.0)

    async def _discard_session(
        self, session_id: str, transport: StreamableHTTPServerTransport
    ) -> None:
        self._last_used.pop(session_id, None)
        await super()._discard_session(session_id, transport)
