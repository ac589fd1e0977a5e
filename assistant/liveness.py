"""Turns a dead server process left running: each process beats, a reaper closes what it left.

A user message's INSERT carries the name of the process that runs its turn (``Message.process``);
that process beats every ``TURN_HEARTBEAT`` seconds from a thread of its own, one row per
process (``ServerProcess``), never a write per turn. A process silent for ``TURN_STALE_AFTER``
seconds is dead: each message it left without a reply gets one, ``interrupted``, listing the
turn's calls as the audit holds them, and the conversation's sockets are told (``RUN_ERROR``
``turn_interrupted``). A reply's id is derived from its message's (``reply_id``): a turn is
answered once however many reapers race, and a late reply of a process taken for dead is refused.
A run with no message of its own (answering an action, an AG-UI client's tool results) is only
in the beats: one that dies before the next beat names it is not found.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django import db
from django.db import IntegrityError, connections, transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from . import signals
from .conf import assistant_settings
from .exceptions import TurnInterrupted
from .models import AuditEntry, Conversation, Message, ServerProcess
from .stream import events
from .stream.broadcast import Publisher
from .stream.eventlog import event_log

logger = logging.getLogger("assistant.liveness")
REPLIES = uuid.UUID("0c7f6a4e-2b8d-4f1e-9d3a-5e6b7c8d9f01")  # the namespace of derived reply ids
CALLS_LISTED = 1000  # the most audited calls an interrupted reply lists
FIRST_BEAT_WAIT = 5.0  # seconds a process's first turn waits for its first heartbeat, at most
ENDS_RUN = ("RUN_FINISHED", "RUN_ERROR")


def reply_id(message_id: Any) -> str:
    """The id the reply to this user message has, whoever stores it."""
    return str(uuid.uuid5(REPLIES, str(message_id)))


# -- the heartbeat: one thread and one row per server process ------------------------------------


class _Beater:
    """This process's heartbeat thread, and the turns it runs: by message (id → when stored),
    and the runs with no message of their own (run id → what its interrupted reply needs)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.name = uuid.uuid4().hex
        self.host = socket.gethostname()
        self.started_at = timezone.now()
        self.turns: dict[Any, datetime] = {}
        self.runs: dict[str, dict[str, Any]] = {}
        # turns that ended here with no reply stored (the database away): each beat tries to
        # close them as interrupted, as the reaper closes a dead process's
        self.owed: dict[str, Owed] = {}
        self.lock = threading.Lock()
        self.first = threading.Event()
        self.thread = threading.Thread(target=self._run, name="assistant-heartbeat", daemon=True)

    def _run(self) -> None:
        while True:
            self.beat()
            self.first.set()
            interval = assistant_settings.TURN_HEARTBEAT
            if interval is None:
                return
            time.sleep(interval)

    def beat(self) -> None:
        """Store the heartbeat (a failed one is logged: the next may do), holding no connection."""
        with self.lock:
            oldest = min(self.turns.values(), default=None)
            runs = list(self.runs.values())
        try:
            ServerProcess.beat(
                self.name,
                host=self.host,
                pid=self.pid,
                started_at=self.started_at,
                oldest_turn_at=oldest,
                runs=runs,
            )
        except db.Error:  # (the database is away a moment): a process is dead only when silent long
            logger.warning("A heartbeat of process %s failed; beating on", self.name)
        except Exception:  # the thread must outlive any one beat: a silent process is reaped
            logger.exception("A heartbeat of process %s failed; beating on", self.name)
        else:
            self.settle()
        finally:
            connections.close_all()

    def settle(self) -> None:
        """Close the turns that ended here without their reply, now the database answers again."""
        with self.lock:
            owed = list(self.owed.items())
        for key, turn in owed:
            try:
                reply = close_turn(turn.message) if turn.message else close_run(turn.run or {})
            except db.Error:  # (away again): the next beat tries
                logger.warning("Closing %s as interrupted failed; the next beat tries", key)
                return
            with self.lock:
                self.owed.pop(key, None)
            if reply is None:  # answered meanwhile (the turn's own retry), or deleted
                continue
            logger.warning("Closed %s as interrupted (its reply could not be stored)", key)
            closed = Interrupted(
                conversation_id=reply.conversation_id,
                message=turn.message,
                process=ServerProcess(name=self.name),
                run_id=turn.run_id,
                reply=reply,
            )
            try:
                async_to_sync(announce)(closed)
            except Exception:
                logger.exception("Telling the sockets that %s was interrupted failed", key)


_beater: _Beater | None = None
_starting = threading.Lock()


def tracking() -> str:
    """This process's name for a turn it is about to store ("" when turns are not tracked).

    The first turn of a process starts its heartbeat and waits for the first beat, so a turn's
    process always has a row; later turns only read an attribute.
    """
    if assistant_settings.TURN_HEARTBEAT is None:
        return ""
    return _beating(wait=True).name


def _beating(*, wait: bool) -> _Beater:
    """This process's beater, started if it is not (``wait``: until its first beat is stored)."""
    global _beater
    beater = _beater
    if beater is None or beater.pid != os.getpid() or not beater.thread.is_alive():
        with _starting:
            beater = _beater
            if beater is None or beater.pid != os.getpid() or not beater.thread.is_alive():
                beater = _Beater()
                if _beater is not None and _beater.pid == beater.pid:  # (its thread restarted)
                    beater.name, beater.turns, beater.runs = (
                        _beater.name,
                        _beater.turns,
                        _beater.runs,
                    )
                beater.thread.start()
                _beater = beater
    if wait:
        beater.first.wait(FIRST_BEAT_WAIT)
    return beater


def running(message: Message) -> None:
    """Note that this process runs the turn of a message stored with its name."""
    beater = _beater
    if beater is not None and message.process == beater.name:
        with beater.lock:
            beater.turns[message.pk] = message.created_at


def running_run(conversation_id: str, run_id: str, reply: str) -> None:
    """Note that this process runs a run with no message of its own (named in the next beat)."""
    if assistant_settings.TURN_HEARTBEAT is None:
        return
    beater = _beating(wait=False)  # (on the event loop: its first beat names this run)
    entry = {"conversation": conversation_id, "run": run_id, "reply": reply}
    with beater.lock:
        beater.runs[run_id] = {**entry, "started_at": timezone.now().isoformat()}


@dataclass(frozen=True, kw_only=True, slots=True)
class Owed:
    """A turn that ended here with no reply stored: its message, or its run's beat entry."""

    run_id: str
    message: Message | None = None
    run: dict[str, Any] | None = None


def finished(message: Message | None, run_id: str, *, answered: bool = True) -> None:
    """A turn ended here: of this message, or this run. One not ``answered`` (its reply could
    not be stored) is closed as interrupted by a later beat, once the database answers."""
    beater = _beater
    if beater is None:
        return
    with beater.lock:
        run = beater.runs.pop(run_id, None)
        if message is not None and message.process == beater.name:
            beater.turns.pop(message.pk, None)
            if not answered:
                beater.owed[f"message {message.pk}"] = Owed(run_id=run_id, message=message)
        elif run is not None and not answered:
            beater.owed[f"run {run_id}"] = Owed(run_id=run_id, run=run)


# -- the reaper ------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class Interrupted:
    """A turn a dead process left unanswered: its conversation, the user's message (None for a
    run with none of its own), its run when known, its process, and the reply stored."""

    conversation_id: Any
    message: Message | None
    process: ServerProcess
    run_id: str | None = None
    reply: Message | None = None  # None on a dry run

    @property
    def named(self) -> str:
        """How a person is told which turn it was."""
        if self.message is not None:
            return f"message {self.message.pk}"
        return f"run {self.run_id}"


def dead_processes(stale_after: float) -> list[ServerProcess]:
    """The processes not heard from for ``stale_after`` seconds."""
    cutoff = timezone.now() - timedelta(seconds=stale_after)
    return list(ServerProcess.objects.filter(beat_at__lt=cutoff).order_by("beat_at"))


def unanswered(process: ServerProcess, stale_after: float) -> list[Message]:
    """The messages whose turns ``process`` ran and left without a reply, oldest first."""
    since = process.turns_since(timedelta(seconds=stale_after))
    messages = list(
        Message.objects.filter(
            process=process.name, role=Message.Role.USER, created_at__gte=since
        ).order_by("created_at", "id")
    )
    replies = {uuid.UUID(reply_id(message.pk)): message for message in messages}
    answered = set(Message.objects.filter(pk__in=list(replies)).values_list("pk", flat=True))
    return [message for pk, message in replies.items() if pk not in answered]


def unanswered_runs(process: ServerProcess) -> list[dict[str, Any]]:
    """The runs with no message of their own ``process`` named in its last beat, unanswered."""
    runs = [run for run in process.runs if isinstance(run, dict) and _is_uuid(run.get("reply"))]
    replies = {str(run["reply"]) for run in runs}
    answered = {
        str(pk) for pk in Message.objects.filter(pk__in=replies).values_list("pk", flat=True)
    }
    return [run for run in runs if str(run["reply"]) not in answered]


def _is_uuid(value: Any) -> bool:
    try:
        uuid.UUID(str(value))
    except ValueError:
        return False
    return True


def audited_calls(conversation: Any, since: datetime) -> list[dict[str, Any]]:
    """The calls of a turn that began at ``since`` as the audit holds them (as a reply stores
    them): its conversation's, up to the next message, but those another reply lists."""
    entries = AuditEntry.objects.filter(conversation_id=conversation, created_at__gte=since)
    later = (
        Message.objects.filter(
            conversation_id=conversation, role=Message.Role.USER, created_at__gt=since
        )
        .order_by("created_at")
        .values_list("created_at", flat=True)
        .first()
    )
    if later is not None:
        entries = entries.filter(created_at__lt=later)
    replies = Message.objects.filter(
        conversation_id=conversation, role=Message.Role.ASSISTANT, created_at__gte=since
    ).values_list("tool_calls", flat=True)
    claimed = {record.get("audit_id") for calls in replies for record in calls or []}
    return [
        {
            "tool_call_id": None,
            "operation": entry.operation,
            "entities": entry.entities,
            "decision": entry.decision,
            "text": entry.error,
            "code": None,
            "task_id": None,
            "data": None,
            "audit_id": entry.pk,
            "pending_action": str(entry.pending_action_id) if entry.pending_action_id else None,
        }
        for entry in entries.order_by("id")[:CALLS_LISTED]
        if entry.pk not in claimed
    ]


def close_turn(message: Message) -> Message | None:
    """Store the interrupted reply to a message (None: it has one already, or is gone)."""
    reply = Message(
        id=uuid.UUID(reply_id(message.pk)),
        conversation_id=message.conversation_id,
        role=Message.Role.ASSISTANT,
        status=Message.Status.INTERRUPTED,
        text=TurnInterrupted().message,
        tool_calls=audited_calls(message.conversation_id, message.created_at),
        idempotency_key=message.idempotency_key,
        # right after the message it answers, in the conversation's order
        created_at=message.created_at + timedelta(microseconds=1),
    )
    return _stored(reply)


def close_run(run: dict[str, Any]) -> Message | None:
    """Store the interrupted reply of a run with no message of its own (None: it has one)."""
    started = parse_datetime(str(run.get("started_at") or "")) or timezone.now()
    try:
        reply = Message(
            id=uuid.UUID(str(run["reply"])),
            conversation_id=uuid.UUID(str(run["conversation"])),
            role=Message.Role.ASSISTANT,
            status=Message.Status.INTERRUPTED,
            text=TurnInterrupted().message,
            tool_calls=audited_calls(run["conversation"], started),
        )
    except (KeyError, ValueError):  # (not a row this code wrote)
        return None
    return _stored(reply)


def _stored(reply: Message) -> Message | None:
    try:
        with transaction.atomic():
            reply.save(force_insert=True)
            Conversation.objects.filter(pk=reply.conversation_id).update(updated_at=timezone.now())
    except IntegrityError:  # another reaper (or the turn itself) answered; or it was deleted
        return None
    conversation = (
        Conversation.objects.select_related("user").filter(pk=reply.conversation_id).first()
    )
    if conversation is not None:  # (else deleted meanwhile: its reply went with it)
        signals.send(
            signals.turn_finished,
            Message,
            message=reply,
            conversation=conversation,
            status=reply.status,
            user=conversation.user,
        )
    return reply


def close_interrupted_turns(
    *, stale_after: float | None = None, dry_run: bool = False
) -> list[Interrupted]:
    """Close the turns dead processes left unanswered, and forget those processes."""
    seconds = assistant_settings.TURN_STALE_AFTER if stale_after is None else stale_after
    closed = []
    for process in dead_processes(seconds):
        left = [
            Interrupted(conversation_id=message.conversation_id, message=message, process=process)
            for message in unanswered(process, seconds)
        ] + [
            Interrupted(
                conversation_id=run.get("conversation"),
                message=None,
                process=process,
                run_id=run.get("run"),
            )
            for run in unanswered_runs(process)
        ]
        if dry_run:
            closed += left
            continue
        runs = {run.get("run"): run for run in process.runs if isinstance(run, dict)}
        for turn in left:
            if turn.message is not None:
                reply = close_turn(turn.message)
            else:
                reply = close_run(runs[turn.run_id])
            if reply is not None:
                closed.append(replace(turn, reply=reply))
                logger.warning(
                    "Closed %s as interrupted (its process %s died)", turn.named, process
                )
        # (a process that beats again meanwhile keeps its row)
        ServerProcess.objects.filter(name=process.name, beat_at=process.beat_at).delete()
    return closed


async def areap_interrupted_turns(
    *, stale_after: float | None = None, dry_run: bool = False
) -> list[Interrupted]:
    """Close the turns dead processes left and tell their conversations' sockets."""
    closed = await sync_to_async(close_interrupted_turns)(stale_after=stale_after, dry_run=dry_run)
    for interrupted in closed:
        if interrupted.reply is not None:
            await announce(interrupted)
    return closed


def reap_interrupted_turns(
    *, stale_after: float | None = None, dry_run: bool = False
) -> list[Interrupted]:
    """The sync twin of ``areap_interrupted_turns`` (the management command)."""
    return async_to_sync(areap_interrupted_turns)(stale_after=stale_after, dry_run=dry_run)


async def announce(interrupted: Interrupted) -> None:
    """Tell the conversation's sockets: the reply as stored, and the run's end."""
    reply = interrupted.reply
    assert reply is not None
    thread_id = str(interrupted.conversation_id)
    run_id = interrupted.run_id
    if run_id is None and interrupted.message is not None:
        run_id = await run_of(thread_id, interrupted.message)
    error = TurnInterrupted()
    reply_key = str(reply.pk)
    publisher = Publisher(thread_id)
    for event in (
        events.text_start(reply_key),
        events.text_content(reply_key, reply.text),
        events.text_end(reply_key),
        events.run_error(error.message, error.code),
    ):
        publisher.put(events.frame(event, thread_id=thread_id, run_id=run_id))
    await publisher.close()


async def run_of(thread_id: str, message: Message) -> str | None:
    """The run of a message's turn, as the replay log kept it (None when it kept nothing)."""
    try:
        frames = (await event_log().since(thread_id, 0)).frames
    except Exception:
        logger.exception("Reading the replay log of %s failed", thread_id)
        return None
    ours = {str(message.pk), reply_id(message.pk)}
    for frame in frames:
        if frame.get("messageId") in ours:
            return frame.get("runId")
    ended = {frame.get("runId") for frame in frames if frame.get("type") in ENDS_RUN}
    started = [
        frame.get("runId")
        for frame in frames
        if frame.get("type") == "RUN_STARTED" and frame.get("runId") not in ended
    ]
    return started[-1] if started else None
