"""Jobs in the chat: progress events and the completion message on the conversation's sockets."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from assistant.models import AuditEntry, Conversation, Job, Message
from tests.clients import API, client_for
from tests.race_jobs import WORKER_STARTS
from tests.race_jobs import workers as workers  # a fixture
from tests.sockets import WAIT, Socket


@pytest.fixture
def fast_relay(settings: Any) -> None:
    """Web processes poll for job changes every 50 ms; jobs run here beat every 50 ms."""
    settings.ASSISTANT = {**settings.ASSISTANT, "JOB_RELAY_INTERVAL": 0.05, "JOB_HEARTBEAT": 0.05}


def kind(frame: dict[str, Any]) -> str:
    detail = frame.get("name") if frame["type"] == "CUSTOM" else None
    return f"{frame['type']} {detail}" if detail else frame["type"]


def job_events(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [frame["value"] for frame in frames if kind(frame) == "CUSTOM assistant.job"]


async def receive_until(
    socket: Socket, done: Callable[[list[dict[str, Any]]], bool], within: float = 15
) -> list[dict[str, Any]]:
    """Frames until ``done(frames)``; fails if that takes longer than ``within`` seconds."""
    frames: list[dict[str, Any]] = []
    deadline = time.monotonic() + within
    while not done(frames):
        assert time.monotonic() < deadline, (
            f"not done within {within:g} s: {[kind(f) for f in frames]}"
        )
        frames.append(await socket.receive_json_from(timeout=WAIT))
    return frames


def announced(frames: list[dict[str, Any]]) -> bool:
    """A job's completion message has been sent whole."""
    ends = {frame["messageId"] for frame in frames if frame["type"] == "TEXT_MESSAGE_END"}
    return any(event["completion_message"] in ends for event in job_events(frames))


def run_finished_and_announced(frames: list[dict[str, Any]]) -> bool:
    return "RUN_FINISHED" in kinds(frames) and announced(frames)


def kinds(frames: list[dict[str, Any]]) -> list[str]:
    return [kind(frame) for frame in frames]


def completion_frames(frames: list[dict[str, Any]], message_id: str) -> list[dict[str, Any]]:
    return [frame for frame in frames if frame.get("messageId") == message_id]


def the_job(user: Any) -> Job:
    return Job.objects.select_related("completion_message").get(user=user)


def assert_progress_then_completion(
    frames: list[dict[str, Any]], job: Job, final: str, text: str
) -> None:
    """Once running, job events with growing progress, ending ``final``; then its message, once."""
    events = [event for event in job_events(frames) if event["status"] != "queued"]
    assert {event["id"] for event in events} == {str(job.pk)}
    assert {event["conversation"] for event in events} == {str(job.conversation_id)}
    progress = [event["progress"] for event in events]
    assert progress == sorted(progress), f"progress only grows: {progress}"
    running = [event["progress"] for event in events if event["status"] == "running"]
    assert any(0 < progress < 100 for progress in running), f"shown while it ran: {running}"
    last = events[-1]
    assert (last["status"], last["completion_message"]) == (final, str(job.completion_message_id))
    message = job.completion_message
    assert message.text == text
    shown = completion_frames(frames, str(message.pk))
    assert kinds(shown) == ["TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END"]
    assert shown[0]["role"] == "assistant"
    assert shown[1]["delta"] == text
    assert {frame["threadId"] for frame in shown} == {str(job.conversation_id)}
    start = frames.index(shown[0])
    assert frames[start : start + 3] == shown
    assert kind(frames[start - 1]) == "CUSTOM assistant.job", "the job's event comes first"
    assert frames[start - 1]["value"]["completion_message"] == str(message.pk)


@pytest.mark.django_db(transaction=True)
async def test_a_jobs_progress_and_completion_message_reach_the_conversations_socket(
    open_socket, diagnostician, fast_relay
):
    socket = await open_socket(diagnostician)

    await socket.send_json_to({"type": "message", "text": "start job kind=wait seconds=1"})
    frames = await receive_until(socket, run_finished_and_announced)

    job = await sync_to_async(the_job)(diagnostician)
    assert (job.status, job.progress, job.result) == ("succeeded", 100, "waited")
    assert_progress_then_completion(frames, job, "succeeded", "Start job finished: waited")
    (started,) = [frame for frame in frames if frame["type"] == "RUN_STARTED"]
    assert started["threadId"] == str(job.conversation_id)


@pytest.mark.django_db(transaction=True)
async def test_a_failing_job_shows_as_failed_then_its_message(
    open_socket, diagnostician, fast_relay
):
    socket = await open_socket(diagnostician)

    await socket.send_json_to({"type": "message", "text": "start job kind=explode"})
    frames = await receive_until(socket, run_finished_and_announced)

    job = await sync_to_async(the_job)(diagnostician)
    assert job.status == "failed"
    assert job_events(frames)[-1]["error"] == "RuntimeError: the job blew up"
    text = "Start job failed: RuntimeError: the job blew up"
    assert completion_frames(frames, str(job.completion_message_id))[1]["delta"] == text


@pytest.mark.django_db(transaction=True)
async def test_a_cancel_job_frame_stops_your_running_job(open_socket, diagnostician, fast_relay):
    socket = await open_socket(diagnostician)
    await socket.send_json_to({"type": "message", "text": "start job kind=wait seconds=30"})
    before = await receive_until(socket, lambda frames: bool(job_events(frames)))
    job_id = job_events(before)[0]["id"]

    asked = time.monotonic()
    await socket.send_json_to({"type": "cancel_job", "job": job_id})
    frames = await receive_until(socket, run_finished_and_announced)

    assert time.monotonic() - asked < 3
    job = await sync_to_async(the_job)(diagnostician)
    assert (job.status, job.cancel_requested) == ("cancelled", True)
    assert job_events(frames)[-1]["status"] == "cancelled"
    text = "Start job was cancelled."
    assert completion_frames(frames, str(job.completion_message_id))[1]["delta"] == text
    assert "CUSTOM assistant.error" not in kinds(before + frames)


@pytest.mark.parametrize(
    ("job", "code"),
    [
        ("theirs", "not_found"),
        ("not-a-uuid", "not_found"),
        ("00000000-0000-0000-0000-000000000000", "not_found"),
        ("", "missing_field"),
    ],
    ids=["someone else's job", "malformed id", "no such job", "no job named"],
)
@pytest.mark.django_db(transaction=True)
async def test_a_cancel_job_frame_for_a_job_that_is_not_yours_is_refused(
    open_socket, diagnostician, make_user, job, code
):
    other = await sync_to_async(make_user)("other", "assistant.diagnostics_run")
    theirs = await Job.objects.acreate(operation="start_job", function="f.g", user=other)
    socket = await open_socket(diagnostician)

    await socket.send_json_to(
        {"type": "cancel_job", "job": str(theirs.pk) if job == "theirs" else job}
    )

    error = await socket.receive_json_from(timeout=WAIT)
    assert kind(error) == "CUSTOM assistant.error"
    assert error["value"]["code"] == code
    assert await socket.receive_nothing(timeout=0.1)
    theirs = await Job.objects.aget(pk=theirs.pk)
    assert (theirs.status, theirs.cancel_requested) == ("queued", False)


# -- a cancel is audited alike over the websocket and REST ------------------------------------

AUDITED = ("operation", "domain", "decision", "source", "username", "entities", "error")


def cancels() -> list[dict[str, Any]]:
    return list(AuditEntry.objects.filter(operation="cancel_job").order_by("id").values(*AUDITED))


def cancel_over_rest(user: Any, job: Job) -> Any:
    return client_for(user).post(f"{API}/jobs/{job.pk}/cancel/")


async def audited_cancels(count: int) -> list[dict[str, Any]]:
    """The cancel_job audit entries once there are ``count`` (fails after WAIT seconds)."""
    deadline = time.monotonic() + WAIT
    while await AuditEntry.objects.filter(operation="cancel_job").acount() < count:
        assert time.monotonic() < deadline, "no audit entry for the cancel"
        await asyncio.sleep(0.02)
    return await sync_to_async(cancels)()


@pytest.mark.django_db(transaction=True)
async def test_a_cancel_job_frame_is_audited_as_a_rest_cancel_is(open_socket, diagnostician):
    over_rest = await Job.objects.acreate(operation="start_job", function="f.g", user=diagnostician)
    over_socket = await Job.objects.acreate(
        operation="start_job", function="f.g", user=diagnostician
    )
    response = await sync_to_async(cancel_over_rest)(diagnostician, over_rest)
    assert response.status_code == 200
    socket = await open_socket(diagnostician)

    await socket.send_json_to({"type": "cancel_job", "job": str(over_socket.pk)})

    rest, websocket = await audited_cancels(2)
    alike = {"operation": "cancel_job", "domain": "jobs", "decision": "executed", "error": ""}
    alike["username"] = "diagnostician"
    assert rest == {**alike, "source": "rest", "entities": {"job": str(over_rest.pk)}}
    assert websocket == {**alike, "source": "websocket", "entities": {"job": str(over_socket.pk)}}
    over_socket = await Job.objects.aget(pk=over_socket.pk)
    assert (over_socket.status, over_socket.cancel_requested) == ("cancelled", True)


@pytest.mark.django_db(transaction=True)
async def test_a_refused_cancel_is_audited_as_denied_and_changes_nothing(
    open_socket, diagnostician, make_user
):
    other = await sync_to_async(make_user)("other", "assistant.diagnostics_run")
    theirs = await Job.objects.acreate(operation="start_job", function="f.g", user=other)
    response = await sync_to_async(cancel_over_rest)(diagnostician, theirs)
    assert (response.status_code, response.json()["code"]) == (404, "not_found")
    socket = await open_socket(diagnostician)

    await socket.send_json_to({"type": "cancel_job", "job": str(theirs.pk)})

    error = await socket.receive_json_from(timeout=WAIT)
    assert (kind(error), error["value"]["code"]) == ("CUSTOM assistant.error", "not_found")
    rest, websocket = await audited_cancels(2)
    refused = {"operation": "cancel_job", "domain": "jobs", "decision": "denied"}
    refused |= {"username": "diagnostician", "entities": {"job": str(theirs.pk)}}
    assert {**rest, "error": ""} == {**refused, "source": "rest", "error": ""}
    assert {**websocket, "error": ""} == {**refused, "source": "websocket", "error": ""}
    assert rest["error"] == websocket["error"] != ""
    theirs = await Job.objects.aget(pk=theirs.pk)
    assert (theirs.status, theirs.cancel_requested) == ("queued", False)


@pytest.mark.django_db(transaction=True)
async def test_a_web_process_reaps_a_silent_job_and_shows_it_failed(
    open_socket, diagnostician, settings, fast_relay
):
    settings.ASSISTANT = {**settings.ASSISTANT, "JOB_STALE_AFTER": 1}
    conversation = await Conversation.objects.acreate(user=diagnostician, title="jobs")
    socket = await open_socket(diagnostician)
    await socket.send_json_to({"type": "resume", "conversation": str(conversation.pk)})
    await receive_until(socket, lambda frames: "CUSTOM assistant.resumed" in kinds(frames))
    long_ago = timezone.now() - dt.timedelta(seconds=120)

    job = await Job.objects.acreate(
        operation="start_job",
        function="tests.testapp.jobs.wait_for_cancel",
        user=diagnostician,
        conversation=conversation,
        status="running",
        worker="gone:1:MainThread",
        started_at=long_ago,
        heartbeat_at=long_ago,
    )
    frames = await receive_until(socket, announced)

    job = await sync_to_async(the_job)(diagnostician)
    assert job.status == "failed"
    assert job.error == "The worker stopped responding (no heartbeat for 1 s)."
    assert job_events(frames)[-1]["status"] == "failed"
    message = await Message.objects.aget(conversation=conversation)
    assert completion_frames(frames, str(message.pk))[1]["delta"] == (
        "Start job failed: The worker stopped responding (no heartbeat for 1 s)."
    )


# -- with a real worker (PostgreSQL) ---------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
async def test_a_job_run_by_a_worker_process_shows_its_progress_and_result_in_the_chat(
    open_socket, diagnostician, fast_relay, workers
):
    socket = await open_socket(diagnostician)
    await socket.send_json_to({"type": "message", "text": "start job kind=wait seconds=1"})
    before = await receive_until(socket, lambda frames: "RUN_FINISHED" in kinds(frames))
    job = await sync_to_async(the_job)(diagnostician)
    assert job.status == "queued", "the turn ends before any worker runs the job"
    assert {event["status"] for event in job_events(before)} <= {"queued"}

    workers.start("--interval", "0.1")
    frames = await receive_until(socket, announced, within=WORKER_STARTS)

    job = await sync_to_async(the_job)(diagnostician)
    assert (job.status, job.result) == ("succeeded", "waited")
    assert_progress_then_completion(frames, job, "succeeded", "Start job finished: waited")
