"""Shared fixtures: users with known permissions, service requirements, connection hygiene."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from asgiref.sync import SyncToAsync
from django.contrib.auth.models import Group, Permission
from django.db import connection, connections
from django.utils import translation

from assistant.access.permissions import access_changed
from assistant.core.lifecycle import ToolSession
from assistant.turns.lanes import RUNNING
from assistant.turns.threads import close_turn_connections
from tests import agui_clients, sockets
from tests.channel_layers import REDIS_CHANNEL_LAYERS
from tests.channel_layers import redis_channel_layer as redis_channel_layer_config
from tests.testapp.models import Order

REQUIRE_SERVICES = os.environ.get("ASSISTANT_REQUIRE_SERVICES") == "1"


@pytest.fixture(autouse=True)
def _requires_postgres(request: pytest.FixtureRequest) -> None:
    """``@pytest.mark.postgres`` tests skip on SQLite, or fail when services are required."""
    if request.node.get_closest_marker("postgres") and connection.vendor != "postgresql":
        reason = "needs PostgreSQL (set DATABASE_URL=postgres://...)"
        if REQUIRE_SERVICES:
            pytest.fail(f"ASSISTANT_REQUIRE_SERVICES=1: {reason}")
        pytest.skip(reason)


@pytest.fixture(autouse=True)
def _settings_language_again() -> Iterator[None]:
    """A test client request in another language leaves it active in the thread (Django's
    LocaleMiddleware does not deactivate it): each test starts in the settings' language."""
    yield
    translation.deactivate()


@pytest.fixture(autouse=True)
def _forget_shared_access() -> Iterator[None]:
    """A test's database is rolled back without a signal: no reading of a user it made is shared
    with the next test's user of the same id."""
    yield
    access_changed()


@pytest.fixture(autouse=True)
def _close_executor_connections() -> Any:
    """Close connections opened in asgiref's executor thread and the turn threads (PostgreSQL
    teardown warnings)."""
    yield
    SyncToAsync.single_thread_executor.submit(connections.close_all).result()
    close_turn_connections()


@pytest.fixture(scope="session", autouse=True)
def _sql_inspector_role(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """On PostgreSQL the suite connects as a superuser; the SQL inspector refuses to, so it reads
    as a login role of this run's own (``pg_read_all_data``), dropped at the end."""
    from django.conf import settings

    from tests.testapp.assistant_tools import TestDatabase

    database = settings.DATABASES["default"]
    if not database["ENGINE"].endswith("postgresql"):
        yield None
        return
    request.getfixturevalue("django_db_setup")
    blocker = request.getfixturevalue("django_db_blocker")
    role = f"{database['TEST']['NAME']}_reader"
    with blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(f'DROP ROLE IF EXISTS "{role}"')
        cursor.execute(f'CREATE ROLE "{role}" LOGIN')
        cursor.execute(f'GRANT pg_read_all_data TO "{role}"')
    os.environ["ASSISTANT_TEST_SQL_ROLE"] = TestDatabase.role = role  # and server subprocesses'
    yield role
    with blocker.unblock(), connection.cursor() as cursor:
        drop_role(cursor, role)


def drop_role(cursor: Any, role: str) -> None:
    """Drop a test's cluster-wide role, ending its connections first."""
    cursor.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", [role]
    )
    cursor.execute(f'DROP ROLE IF EXISTS "{role}"')


def perm(label: str) -> Permission:
    app_label, codename = label.split(".")
    return Permission.objects.get(content_type__app_label=app_label, codename=codename)


@pytest.fixture
def make_user(django_user_model: Any) -> Callable[..., Any]:
    """A user with the given permissions (``"app.codename"``), groups and flags."""

    def make(
        username: str,
        *perms: str,
        groups: tuple[str, ...] = (),
        **flags: Any,
    ) -> Any:
        user = django_user_model.objects.create_user(username=username, password="pw", **flags)
        if perms:
            user.user_permissions.set([perm(label) for label in perms])
        for name in groups:
            user.groups.add(Group.objects.get_or_create(name=name)[0])
        return django_user_model.objects.get(pk=user.pk)

    return make


@pytest.fixture
def superuser(django_user_model: Any) -> Any:
    return django_user_model.objects.create_superuser("root", "root@example.com", "pw")


@pytest.fixture
def plain_user(make_user: Callable[..., Any]) -> Any:
    return make_user("plain")


@pytest.fixture
def reader(make_user: Callable[..., Any]) -> Any:
    """May read orders and reports."""
    return make_user("reader", "testapp.view_order", "assistant.reports_read")


@pytest.fixture
def clerk(make_user: Callable[..., Any]) -> Any:
    """May read, change and approve orders globally."""
    return make_user("clerk", "testapp.view_order", "testapp.change_order", "testapp.approve_order")


@pytest.fixture
async def open_socket() -> AsyncIterator[sockets.OpenSocket]:
    """Connect sockets to the test ASGI app; disconnect them and let their turns end afterwards.

    ``open_socket(user)`` signs in through the scope, ``open_socket(cookie=...)`` through a session.
    """
    opened: list[sockets.Socket] = []

    async def open_(
        user: Any = None, *, cookie: str | None = None, subprotocols: list[str] | None = None
    ) -> sockets.Socket:
        socket = await sockets.connect(user, cookie=cookie, subprotocols=subprotocols)
        opened.append(socket)
        return socket

    yield open_
    for socket in opened:
        with contextlib.suppress(Exception):  # a socket the test saw crash has nothing to close
            await socket.disconnect(timeout=sockets.WAIT)
    if not await sockets.turns_ended(sockets.WAIT):
        for task in RUNNING:
            task.cancel()
        await sockets.turns_ended(sockets.WAIT)


@pytest.fixture
def diagnostician(make_user: Callable[..., Any]) -> Any:
    """May run the diagnostics tools: ``start_job``, the test toolsets' and the timeout tools."""
    return make_user("diagnostician", "assistant.diagnostics_run")


@pytest.fixture
def keeper(make_user: Callable[..., Any]) -> Any:
    """May store secrets."""
    return make_user("keeper", "assistant.vault_write")


@pytest.fixture
def author(make_user: Callable[..., Any]) -> Any:
    """May create validation tasks."""
    return make_user("author", "assistant.add_validationtask")


@pytest.fixture
def order(db: None) -> Order:
    return Order.objects.create(reference="ORD-1")


@pytest.fixture
async def session() -> AsyncIterator[ToolSession]:
    """A chat session's toolsets, stopped after the test (connections closed, tasks ended)."""
    tools = ToolSession()
    yield tools
    await tools.stop()


REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")


def redis_available() -> bool:
    try:
        import redis

        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1).ping()
        return True
    except Exception:
        return False


@pytest.fixture(autouse=True)
def _requires_redis(request: pytest.FixtureRequest) -> None:
    """``@pytest.mark.redis`` tests skip without a Redis server, or fail when services are required."""
    if request.node.get_closest_marker("redis") and not redis_available():
        reason = f"needs Redis at {REDIS_URL}"
        if REQUIRE_SERVICES:
            pytest.fail(f"ASSISTANT_REQUIRE_SERVICES=1: {reason}")
        pytest.skip(reason)


@pytest.fixture(params=sorted(REDIS_CHANNEL_LAYERS))
def redis_channel_layer(request: pytest.FixtureRequest, settings: Any) -> Any:
    """A channels-redis layer ("core", then "pubsub") on the local Redis, with a prefix of its own.

    Yields ``CHANNEL_LAYERS["default"]``; server processes a test starts use the same one.
    """
    import uuid

    from channels.layers import channel_layers

    layer = redis_channel_layer_config(request.param, REDIS_URL, f"test-{uuid.uuid4().hex[:8]}")
    settings.CHANNEL_LAYERS = {"default": layer}
    channel_layers.backends.clear()
    yield layer
    channel_layers.backends.clear()


@pytest.fixture
def asgi_live_server(transactional_db: None) -> Any:
    """The test project's ASGI app served by uvicorn on 127.0.0.1 in a thread; yields its URL.

    In-process, so it shares the test database (in-memory SQLite included).
    """
    import socket
    import threading
    import time

    import uvicorn

    from tests.asgi import application

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(
            application, host="127.0.0.1", port=port, lifespan="off", log_level="warning"
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("the test ASGI server did not start")
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


@pytest.fixture
def agent(asgi_live_server: str) -> Callable[[Any], agui_clients.Agent]:
    """``agent(user)``: that user's AG-UI client against the live server."""
    return lambda user: agui_clients.Agent(asgi_live_server, user)


@pytest.fixture
def browser(asgi_live_server: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Debian's chromium through Playwright; skipped without it unless services are required."""
    from playwright.sync_api import expect, sync_playwright

    from tests.browsing import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, WAIT

    if not CHROMIUM.exists():
        reason = f"needs Debian's chromium at {CHROMIUM} (apt-get install chromium)"
        if REQUIRE_SERVICES:
            pytest.fail(f"ASSISTANT_REQUIRE_SERVICES=1: {reason}")
        pytest.skip(reason)
    # Playwright's sync API keeps an event loop running in this thread; the test's ORM calls are sync.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    expect.set_options(timeout=WAIT)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()
            # With that loop running, Django keeps this thread's ORM calls on connections of their
            # own (asgiref's thread-critical Local); close them while they are still reachable.
            connections.close_all()


@pytest.fixture
def open_chat(
    browser: Any, asgi_live_server: str, request: pytest.FixtureRequest
) -> Iterator[Callable[..., Any]]:
    """The chat page, signed in as ``user`` through a session cookie, once it is connected."""
    from playwright.sync_api import expect

    from tests.browsing import ARTIFACTS, signed_in_context

    contexts: list[Any] = []

    def open_page(user: Any, **context_options: Any) -> Any:
        context = signed_in_context(browser, asgi_live_server, user, **context_options)
        contexts.append(context)
        page = context.new_page()
        page.goto(f"{asgi_live_server}/assistant/")
        expect(page.locator("#status")).to_have_text("connected")
        return page

    yield open_page
    for index, context in enumerate(contexts):
        # The page as the test left it: a failure's evidence.
        context.pages[-1].screenshot(path=str(ARTIFACTS / f"{request.node.name}-{index}.png"))
        context.close()
