"""MCP sessions per credential are capped: one more closes the token's least recently used
session (its id then answers the SDK's 404), and other tokens' sessions are left alone."""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import Any

import pytest
from mcp.shared.exceptions import MCPError

from tests.mcp_clients import issue, mcp_client

pytestmark = pytest.mark.django_db(transaction=True)

GONE = "Session not found"  # the SDK's answer (404) to an id it no longer knows


@pytest.fixture
def cap_of_two(settings: Any) -> None:
    settings.ASSISTANT = {**settings.ASSISTANT, "MCP_MAX_SESSIONS_PER_CREDENTIAL": 2}


async def opened(stack: AsyncExitStack, base_url: str, secret: str) -> Any:
    client = await stack.enter_async_context(mcp_client(base_url, secret))
    await client.list_tools()
    return client


async def state(client: Any) -> str:
    """ "open", or the error the client's next request met."""
    try:
        await client.list_tools()
    except MCPError as error:
        return str(error)
    return "open"


async def test_one_session_past_the_cap_closes_the_tokens_oldest(
    asgi_live_server: str, reader: Any, cap_of_two: None
) -> None:
    secret = await issue(reader, "laptop")
    async with AsyncExitStack() as stack:
        first, second, third = [await opened(stack, asgi_live_server, secret) for _ in range(3)]

        assert [await state(client) for client in (first, second, third)] == [
            GONE,
            "open",
            "open",
        ]


async def test_the_least_recently_used_session_is_the_one_closed(
    asgi_live_server: str, reader: Any, cap_of_two: None
) -> None:
    secret = await issue(reader, "laptop")
    async with AsyncExitStack() as stack:
        first = await opened(stack, asgi_live_server, secret)
        second = await opened(stack, asgi_live_server, secret)
        await first.list_tools()  # used after the second was opened
        third = await opened(stack, asgi_live_server, secret)

        assert [await state(client) for client in (first, second, third)] == [
            "open",
            GONE,
            "open",
        ]


async def test_other_tokens_sessions_are_not_counted_nor_closed(
    asgi_live_server: str, reader: Any, clerk: Any, cap_of_two: None
) -> None:
    greedy = await issue(reader, "script")
    others = [await issue(reader, "laptop"), await issue(clerk, "laptop")]
    async with AsyncExitStack() as stack:
        theirs = [await opened(stack, asgi_live_server, secret) for secret in others]
        for _ in range(5):
            await opened(stack, asgi_live_server, greedy)

        assert [await state(client) for client in theirs] == ["open", "open"]


async def test_none_leaves_sessions_uncapped(
    asgi_live_server: str, reader: Any, settings: Any
) -> None:
    settings.ASSISTANT = {**settings.ASSISTANT, "MCP_MAX_SESSIONS_PER_CREDENTIAL": None}
    secret = await issue(reader, "laptop")
    async with AsyncExitStack() as stack:
        clients = [await opened(stack, asgi_live_server, secret) for _ in range(20)]

        assert {await state(client) for client in clients} == {"open"}
