"""How deep each door goes before a tool's handler runs: frames of the ``assistant`` package, and
thread switches, from the entry (a REST request, a websocket frame, the CLI, an MCP ``tools/call``,
an AG-UI run) down to the handler, and which handler ran.

Run: ``.venv/bin/python tests/benchmarks/hops.py`` (SQLite in a scratch file, the in-memory
channel layer; no services). A profile hook follows every call in every thread; a context
variable carries the chain of ``assistant`` frames across tasks and thread hops (both copy the
context), so the chain at the handler is the whole way down from the entry. It also reports any
call back up into a transport (``surfaces.``) from a layer below it (a turn, dispatch, the
stream, access, core), for every door.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import os
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from asgiref.sync import async_to_sync

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = str(ROOT / "assistant") + os.sep
ASGIREF = os.path.join("asgiref", "sync.py")
DOORS = ("dispatch:", "confirmation:")  # where every path meets the one door
BELOW = ("turns.", "dispatch.", "stream.", "access.", "core.", "jobs:")  # the layers under surfaces
Link = tuple[str, int]  # (module:function, thread ident)

# (thread, outermost frame, chain below it, chain now, the segment it was spawned from): asgiref
# copies a thread's context changes back to its caller, so a segment finds its own state again
State = tuple[int, int, tuple[Link, ...], tuple[Link, ...], Any]
_state: contextvars.ContextVar[State | None] = contextvars.ContextVar("state", default=None)
probes: dict[Any, str] = {}  # handler code → its operation
seen: list[tuple[str, tuple[Link, ...]]] = []
climbs: set[str] = set()


def label(frame: Any) -> str:
    module = frame.f_code.co_filename[len(PACKAGE) :].removesuffix(".py").replace(os.sep, ".")
    return f"{module}:{frame.f_code.co_qualname}"


def local_chain(frame: Any) -> tuple[list[Any], Any]:
    """This hop's assistant frames from ``frame`` down, innermost first; and the outermost.

    A hop ends at asgiref's frames: below them, a thread blocked in ``async_to_sync`` runs the
    work its loop sends back (thread-sensitive), and that work is a hop of its own.
    """
    chain = []
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename.startswith(PACKAGE):
            chain.append(frame)
        elif chain and filename.endswith(ASGIREF):
            break
        frame = frame.f_back
    return chain, (chain[-1] if chain else None)


def segment(root: Any) -> State:
    """The state of the task or thread hop ``root`` runs in (a new one if it was just spawned)."""
    key = (threading.get_ident(), id(root))
    state = _state.get()
    found = state
    while found is not None:
        if found[:2] == key:
            return found
        found = found[4]
    return (*key, state[3] if state else (), state[3] if state else (), state)


def trail_at(frame: Any, *, leaving: bool = False) -> tuple[Link, ...]:
    chain, root = local_chain(frame)
    if root is None:
        state = _state.get()
        return state[3] if state else ()
    state = segment(root)
    ident = threading.get_ident()
    links = tuple((label(f), ident) for f in reversed(chain[1:] if leaving else chain))
    trail = state[2] + links
    _state.set((state[0], state[1], state[2], trail, state[4]))
    return trail


def profile(frame: Any, event: str, arg: Any) -> None:
    if event == "call":
        if frame.f_code in probes:
            seen.append((probes[frame.f_code], trail_at(frame)))
            return
        if not frame.f_code.co_filename.startswith(PACKAGE):
            return
        trail = trail_at(frame)
        if label(frame).startswith("surfaces.") and any(
            name.startswith(BELOW) for name, _ in trail[:-1]
        ):
            climbs.add(f"{trail[-2][0]} -> {trail[-1][0]}")
    elif event == "return" and frame.f_code.co_filename.startswith(PACKAGE):
        trail_at(frame, leaving=True)


def hops(trail: tuple[Link, ...]) -> tuple[int, int]:
    switches = sum(1 for a, b in itertools.pairwise(trail) if a[1] != b[1])
    return len(trail), switches


def setup() -> Any:
    scratch = Path(tempfile.mkdtemp()) / "hops.sqlite3"
    os.environ.update(DJANGO_SETTINGS_MODULE="tests.settings", DATABASE_URL=f"sqlite:///{scratch}")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, run_syncdb=True)
    from assistant.core.registry import registry

    for operation in ("ping", "cancel_order"):
        probes[registry.get(operation).handler.__code__] = operation
    from django.contrib.auth import get_user_model

    return get_user_model().objects.create_superuser("hops", "hops@example.com", "x")


def pending_cancel(user: Any) -> str:
    from assistant.dispatch.door import dispatch
    from tests.testapp.models import Order

    order = Order.objects.create(reference=f"H-{Order.objects.count()}")
    outcome = dispatch("cancel_order", {"order_id": order.pk}, user=user, source="rest")
    assert outcome.pending_action is not None, outcome
    return str(outcome.pending_action.pk)


async def asgi_post(path: str, body: dict[str, Any], headers: dict[str, str]) -> None:
    """POST to the test project's ASGI application in process, as a remote client would."""
    import httpx2

    from tests.asgi import application

    transport = httpx2.ASGITransport(app=application)
    async with httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        response = await http.post(path, json=body, headers=headers, timeout=30)
    assert response.status_code == 200, response.text


def mcp_call(secret: str) -> None:
    """A stateless (2026-07-28) MCP ``tools/call`` of ``ping``."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "ping",
            "arguments": {},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    }
    headers = {
        "Accept": "application/json, text/event-stream",
        "Authorization": f"Bearer {secret}",
        "MCP-Protocol-Version": "2026-07-28",
        "MCP-Method": "tools/call",
        "MCP-Name": "ping",
    }
    async_to_sync(asgi_post)("/assistant/mcp/", body, headers)


def agui_run(secret: str) -> None:
    """An AG-UI ``RunAgentInput`` saying "ping", as ``@ag-ui/client``'s HttpAgent posts it."""
    import uuid

    body = {
        "threadId": str(uuid.uuid4()),
        "runId": str(uuid.uuid4()),
        "state": {},
        "messages": [{"id": str(uuid.uuid4()), "role": "user", "content": "ping"}],
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }
    headers = {"Accept": "text/event-stream", "Authorization": f"Bearer {secret}"}
    async_to_sync(asgi_post)("/assistant/agui/", body, headers)


async def websocket(user: Any, frame: dict[str, Any]) -> None:
    from channels.testing import WebsocketCommunicator

    from tests.asgi import application

    socket = WebsocketCommunicator(
        application, "/ws/assistant/", headers=[(b"origin", b"http://127.0.0.1")]
    )
    socket.scope["user"] = user
    connected, _ = await socket.connect()
    assert connected
    await socket.send_json_to(frame)
    while (await socket.receive_json_from(timeout=10))["type"] not in ("RUN_FINISHED", "RUN_ERROR"):
        pass
    await socket.disconnect()


def run(name: str, entry: Any) -> None:
    seen.clear()
    climbs.clear()
    sys.setprofile(profile)
    threading.setprofile_all_threads(profile)
    try:
        entry()
    finally:
        threading.setprofile_all_threads(None)
        sys.setprofile(None)
    if not seen:
        print(f"{name:<24} no handler ran")
        return
    operation, trail = seen[0]
    frames, switches = hops(trail)
    door = next((i for i, (link, _) in enumerate(trail) if link.startswith(DOORS)), len(trail))
    print(
        f"{name:<24} {frames + switches:>3} hops ({frames} frames, {switches} thread switches;"
        f" {door} frames to the door) -> handler {operation}"
    )
    for link, ident in trail:
        print(f"    {link}  [thread {ident % 10000}]")
    for climb in sorted(climbs):
        print(f"    climbs back into the transport: {climb}")


def main() -> None:
    user = setup()
    from django.core.management import call_command
    from django.test import Client
    from rest_framework.authtoken.models import Token

    from assistant.access import tokens

    client = Client()
    client.force_login(user)
    post = client.post
    run(
        "websocket message",
        lambda: async_to_sync(websocket)(user, {"type": "message", "text": "ping"}),
    )
    action = pending_cancel(user)
    run(
        "websocket confirm",
        lambda: async_to_sync(websocket)(user, {"type": "confirm", "action": action}),
    )
    run(
        "REST messages/",
        lambda: post(
            "/assistant/api/messages/", {"message": "ping"}, content_type="application/json"
        ),
    )
    run(
        "REST dispatch/",
        lambda: post(
            "/assistant/api/dispatch/",
            {"operation": "ping", "entities": {}},
            content_type="application/json",
        ),
    )
    action = pending_cancel(user)
    run("REST confirm", lambda: post(f"/assistant/api/actions/{action}/confirm/"))
    run(
        "CLI --message",
        lambda: call_command("assistant_call", "--message", "ping", "--user", "hops"),
    )
    run("CLI dispatch", lambda: call_command("assistant_call", "ping", "--user", "hops"))
    action = pending_cancel(user)
    run(
        "CLI --confirm",
        lambda: call_command("assistant_call", "--confirm", action, "--user", "hops"),
    )
    _, secret = tokens.issue(user, name="hops")
    run("MCP tools/call", lambda: mcp_call(secret))
    run("AG-UI run", lambda: agui_run(Token.objects.create(user=user).key))


if __name__ == "__main__":
    asyncio.set_event_loop_policy(None)
    main()
