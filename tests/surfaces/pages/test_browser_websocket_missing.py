"""A chat page whose websocket nobody serves says so plainly, instead of reconnecting for ever."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.browsing import ARTIFACTS, signed_in_context

NOT_SERVED = (
    "The chat's websocket is not served at /ws/assistant/: is an ASGI server (daphne) running "
    "this project?"
)


@pytest.fixture
def http_only_server(transactional_db: None) -> Iterator[str]:
    """The test project as a fresh startproject's asgi.py serves it: Django over HTTP, no
    websocket route (uvicorn in a thread, so it shares the test database)."""
    import uvicorn
    from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
    from django.core.asgi import get_asgi_application

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    application = ASGIStaticFilesHandler(get_asgi_application())
    server = uvicorn.Server(
        uvicorn.Config(application, host="127.0.0.1", port=port, lifespan="off", log_level="error")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "the HTTP-only server did not start"
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


def test_the_page_says_where_it_expected_the_websocket(
    browser: Any, http_only_server: str, plain_user: Any
) -> None:
    from playwright.sync_api import expect

    context = signed_in_context(browser, http_only_server, plain_user)
    page = context.new_page()
    try:
        page.goto(f"{http_only_server}/assistant/")

        expect(page.locator("#notice")).to_have_text(NOT_SERVED)
        expect(page.locator("#status")).to_have_text("not served")
        page.screenshot(path=str(ARTIFACTS / "websocket-not-served.png"))
    finally:
        context.close()
