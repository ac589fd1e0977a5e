"""The dashboards domain's tools over the websocket: each tool as the right user, approvals and
rejections, refusals by the tool and by dispatch, bad entities and ambiguous references."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings

from assistant.models import AuditEntry, PendingAction
from assistant.turns.lanes import RUNNING
from dashboards.models import Dashboard
from tests.asgi import application
from tests.example.dashboard_calls import state
from tests.example.dashboards_world import World
from tests.openai_peer import call as llm_call
from tests.openai_peer import openai_peer as openai_peer  # the fixture
from tests.openai_peer import text as llm_text
from tests.openai_peer import tool_calls as llm_tool_calls

pytestmark = pytest.mark.django_db


# -- the websocket --------------------------------------------------------------------------

WAIT = 10  # seconds any one frame may take
ORIGIN = (b"origin", b"http://127.0.0.1")


async def turns_ended() -> None:
    import asyncio

    if RUNNING:
        await asyncio.wait(set(RUNNING), timeout=WAIT)


@pytest.fixture
async def open_socket() -> AsyncIterator[Callable[[Any], Awaitable[WebsocketCommunicator]]]:
    opened: list[WebsocketCommunicator] = []

    async def open_(user: Any) -> WebsocketCommunicator:
        socket = WebsocketCommunicator(application, "/ws/assistant/", headers=[ORIGIN])
        socket.scope["user"] = user
        connected, _ = await socket.connect(timeout=WAIT)
        assert connected
        opened.append(socket)
        return socket

    yield open_
    for socket in opened:
        with contextlib.suppress(Exception):
            await socket.disconnect(timeout=WAIT)
    await turns_ended()


async def receive(socket: WebsocketCommunicator) -> dict[str, Any]:
    """The next frame; every frame is also kept on the socket for ``job_finished``."""
    frame = await socket.receive_json_from(timeout=WAIT)
    socket.__dict__.setdefault("seen", []).append(frame)
    return frame


async def run(socket: WebsocketCommunicator, **frame: Any) -> list[dict[str, Any]]:
    """Send a frame; the frames of the run it starts, up to RUN_FINISHED or RUN_ERROR."""
    await socket.send_json_to(frame)
    frames = [await receive(socket)]
    while frames[-1]["type"] not in ("RUN_FINISHED", "RUN_ERROR"):
        frames.append(await receive(socket))
    await turns_ended()
    return frames


def outcomes(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        frame["value"]
        for frame in frames
        if frame["type"] == "CUSTOM" and frame["name"] == "assistant.outcome"
    ]


async def job_finished(socket: WebsocketCommunicator, job_id: str) -> dict[str, Any]:
    """The ``assistant.job`` event that reports this job finished (relayed from the database)."""

    def finished(frame: dict[str, Any]) -> bool:
        return (
            frame["type"] == "CUSTOM"
            and frame["name"] == "assistant.job"
            and frame["value"]["id"] == job_id
            and frame["value"]["status"] in ("succeeded", "failed", "cancelled")
        )

    for frame in socket.__dict__.get("seen", []):
        if finished(frame):
            return frame["value"]
    while True:
        frame = await receive(socket)
        if finished(frame):
            return frame["value"]


ws_db = pytest.mark.django_db(transaction=True)


async def say(socket: WebsocketCommunicator, text: str) -> dict[str, Any]:
    (outcome,) = outcomes(await run(socket, type="message", text=text))
    return outcome


async def approve(socket: WebsocketCommunicator, asked: dict[str, Any]) -> dict[str, Any]:
    assert asked["decision"] == "confirmation_requested", asked
    # as the approval card does: a dangerous action's approver types what prepare named
    action = await PendingAction.objects.aget(pk=asked["pending_action"])
    answer = {"type": "confirm", "action": asked["pending_action"]}
    if action.confirm_phrase:
        answer["phrase"] = action.confirm_phrase
    (outcome,) = outcomes(await run(socket, **answer))
    return outcome


# Per tool over the websocket, as the right user: (user, message, answer starts with, approve?).
WEBSOCKET_WORKS = [
    ("viewer", 'search dashboards "overview"', "3 dashboards matching “overview”:", False),
    ("operator", "create branch name=feature-x", "Created branch feature-x from main at ", False),
    ("operator", 'commit "staging"', "Nothing to commit: main already holds Staging's", True),
    ("operator", "deploy dashboard=support-tickets source=dev target=staging", "Deploying #", True),
    (
        "operator",
        "migrate source=dev target=staging dashboards=support-tickets dry_run=true",
        "Dry run — migrating 1 dashboards from Development to Staging",
        True,
    ),
    ("operator", 'back up "staging"', "Backing up Staging's 11 dashboards.", False),
    (
        "operator",
        'document dashboard "hiring" environment=dev',
        "Writing the documentation of #",
        False,
    ),
    ("operator", "health summary", "All healthy.", False),
    ("operator", "validate 'dashboards.Dashboard'", "Validation task ", False),
]


@ws_db
@pytest.mark.parametrize(
    ("who", "message", "answer", "needs_approval"),
    WEBSOCKET_WORKS,
    ids=[
        "search_dashboards",
        "create_branch",
        "commit_changes",
        "deploy_dashboard",
        "execute_migration",
        "run_backup",
        "run_llm_documentation",
        "get_health_summary",
        "run_llm_validation",
    ],
)
async def test_each_tool_works_over_the_websocket(
    world: World, open_socket: Any, who: str, message: str, answer: str, needs_approval: bool
) -> None:
    socket = await open_socket(getattr(world, who))

    outcome = await say(socket, message)
    if needs_approval:
        outcome = await approve(socket, outcome)

    assert outcome["decision"] == ("confirmed" if needs_approval else "executed"), outcome
    assert outcome["text"].startswith(answer), outcome["text"]
    if outcome["task_id"]:
        finished = await job_finished(socket, outcome["task_id"])
        assert (finished["status"], finished["progress"]) == ("succeeded", 100), finished


@ws_db
async def test_a_deployment_over_the_websocket_runs_its_job_to_completion(
    world: World, open_socket: Any
) -> None:
    target = await sync_to_async(world.dashboard)("sales-overview", "prod")
    socket = await open_socket(world.admin)

    asked = await say(socket, "deploy dashboard=sales-overview source=staging target=prod")
    assert await sync_to_async(lambda: Dashboard.objects.get(pk=target.pk).version)() == 1
    done = await approve(socket, asked)
    finished = await job_finished(socket, done["task_id"])

    assert finished["result"].startswith("Deployed Sales overview v2 from Staging to Production")
    assert await sync_to_async(lambda: Dashboard.objects.get(pk=target.pk).version)() == 2


@ws_db
async def test_a_rejected_deployment_over_the_websocket_changes_nothing(
    world: World, open_socket: Any
) -> None:
    before = await sync_to_async(state)()
    socket = await open_socket(world.admin)

    asked = await say(socket, "deploy dashboard=web-traffic source=dev target=prod")
    (refused,) = outcomes(await run(socket, type="reject", action=asked["pending_action"]))

    assert refused["decision"] == "cancelled"
    assert await sync_to_async(state)() == before


# The operator is refused by the tool itself (audited "denied"), before anyone is asked:
# production is the admin's.
WEBSOCKET_OPERATOR_REFUSED = [
    "deploy dashboard=web-traffic source=staging target=prod",
    "migrate source=staging target=prod",
    'back up "prod"',
]


@ws_db
@pytest.mark.parametrize("message", WEBSOCKET_OPERATOR_REFUSED)
async def test_the_operator_is_refused_production_over_the_websocket(
    world: World, open_socket: Any, message: str
) -> None:
    before = await sync_to_async(state)()
    socket = await open_socket(world.operator)

    outcome = await say(socket, message)

    assert (outcome["decision"], outcome["code"]) == ("denied", "permission_denied")
    entry = await AuditEntry.objects.filter(decision="denied").alast()
    assert (entry.operation, entry.source, entry.username) == (
        outcome["operation"],
        "websocket",
        "operator",
    )
    assert not await PendingAction.objects.aexists()
    assert await sync_to_async(state)() == before


@ws_db
async def test_an_ambiguous_deploy_is_asked_about_before_anyone_approves_a_guess(
    world: World, open_socket: Any
) -> None:
    socket = await open_socket(world.admin)

    outcome = await say(socket, "deploy dashboard=sales target=prod")

    assert (outcome["decision"], outcome["pending_action"]) == ("clarify", None)
    assert outcome["text"].startswith("“sales” matches several dashboards you may view")
    assert not await PendingAction.objects.aexists()


@pytest.fixture
def use_llm(settings: Any, openai_peer: Any) -> Any:
    settings.ASSISTANT = {
        **django_settings.ASSISTANT,
        "PLANNER": "llm",
        "LLM": {"BASE_URL": openai_peer.url, "MODEL": "test-model", "TIMEOUT": 5},
    }
    return openai_peer


# Tools a user may not see: a model that proposes one anyway is refused by dispatch.
FORBIDDEN_CALLS = [
    ("viewer", "create_branch", {"name": "feature-x"}),
    ("viewer", "commit_changes", {"environment": "dev"}),
    ("viewer", "deploy_dashboard", {"dashboard": "1", "target": "dev"}),
    ("viewer", "execute_migration", {"source": "dev", "target": "staging"}),
    ("viewer", "run_backup", {"environment": "dev"}),
    ("viewer", "run_llm_documentation", {"dashboard": "web-traffic"}),
    ("viewer", "get_health_summary", {}),
    ("outsider", "search_dashboards", {"search": "sales"}),
]


# The viewer searches dashboards: the dashboards domain is no secret to them.
DISCLOSED = {
    ("viewer", operation)
    for operation in ("create_branch", "commit_changes", "deploy_dashboard", "execute_migration")
} | {("viewer", "run_backup"), ("viewer", "run_llm_documentation")}


@ws_db
@pytest.mark.parametrize(("who", "operation", "entities"), FORBIDDEN_CALLS)
async def test_a_tool_the_user_may_not_use_is_refused_and_audited_over_the_websocket(
    world: World, open_socket: Any, use_llm: Any, who: str, operation: str, entities: dict[str, Any]
) -> None:
    use_llm.script(llm_tool_calls(llm_call(operation, entities)), llm_text("I cannot do that."))
    before = await sync_to_async(state)()
    socket = await open_socket(getattr(world, who))

    outcome = await say(socket, f"please {operation}")

    # told what it needs where the user works with the tool's domain, else as if it did not exist
    told = "denied" if (who, operation) in DISCLOSED else "unknown"
    assert (outcome["operation"], outcome["decision"]) == (operation, told)
    entry = await AuditEntry.objects.aget(operation=operation)
    assert (entry.decision, entry.source, entry.username) == ("denied", "websocket", who)
    assert not await PendingAction.objects.aexists()
    assert await sync_to_async(state)() == before


# Bad entities proposed for each tool: refused with the entity named, nothing changed.
BAD_CALLS = [
    ("search_dashboards", {"environment": "qa"}, "environment"),
    ("create_branch", {"name": "two words"}, "name"),
    ("commit_changes", {"environment": 7}, "environment"),
    ("deploy_dashboard", {"dashboard": "web-traffic"}, "target"),
    ("execute_migration", {"source": "dev", "target": "staging", "dry_run": "maybe"}, "dry_run"),
    ("run_backup", {"environment": "qa"}, "environment"),
    ("run_llm_documentation", {"dashboard": "nothing like it"}, "dashboard"),
    ("get_health_summary", {"verbose": True}, "verbose"),
]


@ws_db
@pytest.mark.parametrize(("operation", "entities", "entity"), BAD_CALLS)
async def test_bad_entities_are_refused_over_the_websocket(
    world: World,
    open_socket: Any,
    use_llm: Any,
    operation: str,
    entities: dict[str, Any],
    entity: str,
) -> None:
    use_llm.script(llm_tool_calls(llm_call(operation, entities)), llm_text("Sorry."))
    before = await sync_to_async(state)()
    socket = await open_socket(world.admin)

    outcome = await say(socket, f"please {operation}")

    assert (outcome["decision"], outcome["code"]) == ("invalid", "invalid_entities"), outcome
    assert entity in outcome["text"]
    assert await AuditEntry.objects.filter(operation=operation, decision="invalid").aexists()
    assert await sync_to_async(state)() == before


@ws_db
async def test_an_ambiguous_reference_over_the_websocket_lists_the_candidates(
    world: World, open_socket: Any
) -> None:
    socket = await open_socket(world.operator)

    outcome = await say(socket, 'document dashboard "sales"')

    assert outcome["decision"] == "executed"
    assert outcome["task_id"] is None
    assert outcome["text"].startswith(
        "“sales” matches several dashboards you may view — which one?"
    )
