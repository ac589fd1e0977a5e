"""Turns a dead server process left running: each process beats, a reaper closes what it left.

A user message's INSERT carries the name of the process that runs its turn (``Message.process``);
that process beats every ``TURN_HEARTBEAT`` seconds from a thread of its own, one row per
process (``ServerProcess``), never a write per turn. A process silent for ``TURN_STALE_AFTER``
seconds is dead: each message it left without a reply gets one, ``interrupted``, listing the
turn's calls as the audit holds them, and the conversation's sockets are told (``RUN_ERROR``
``turn_interrupted``). A reply's id is derived from its message's (``reply_id``): a turn is
answered once however many reapers race, and a late reply of a process taken for dead is refused.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django import db
from django.db import IntegrityError, connections, transaction
from django.utils import timezone

from . import events
from .broadcast import Publisher
from .conf import assistant_settings
from .eventlog import event_log
from .exceptions import TurnInterrupted
from .models import AuditEntry, Conversation, Message, ServerProcess

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
    """This process's heartbeat thread, and the turns it runs (message id → when stored)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.name = uuid.uuid4().hex
        self.host = socket.gethostname()
        self.started_at = timezone.now()
        self.turns: dict[Any, datetime] = {}
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
        try:
            ServerProcess.beat(
                self.name,
                host=self.host,
                pid=self.pid,
                started_at=self.started_at,
                oldest_turn_at=oldest,
            )
        except db.Error:  # (the database is away a moment): a process is dead only when silent long
            logger.warning("A heartbeat of process %s failed; beating on", self.name)
        finally:
            connections.close_all()


_beater: _Beater | None = None
_starting = threading.Lock()


def tracking() -> str:
    """This process's name for a turn it is about to store ("" when turns are not tracked).

    The first turn of a process starts its heartbeat and waits for the first beat, so a turn's
    process always has a row; later turns only read an attribute.
    """
    global _beater
    if assistant_settings.TURN_HEARTBEAT is None:
        return ""
    beater = _beater
    if beater is None or beater.pid != os.getpid() or not beater.thread.is_alive():
        with _starting:
            beater = _beater
            if beater is None or beater.pid != os.getpid() or not beater.thread.is_alive():
                beater = _Beater()
                if _beater is not None and _beater.pid == beater.pid:
                    beater.name, beater.turns = _beater.name, _beater.turns  # (a thread restarted)
                beater.thread.start()
                beater.first.wait(FIRST_BEAT_WAIT)
                _beater = beater
    return beater.name


def running(message: Message) -> None:
    """Note that this process runs the turn of a message stored with its name."""
    beater = _beater
    if beater is not None and message.process == beater.name:
        with beater.lock:
            beater.turns[message.pk] = message.created_at


def finished(message: Message | None) -> None:
    """The turn of this message ended here (its reply stored or not)."""
    beater = _beater
    if beater is not None and message is not None and message.process == beater.name:
        with beater.lock:
            beater.turns.pop(message.pk, None)


# -- the reaper ------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class Interrupted:
    """A turn a dead process left unanswered: the user's message, its process, the reply stored."""

    message: Message
    process: ServerProcess
    reply: Message | None = None  # None on a dry run (or when another reaper answered first)


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


def audited_calls(message: Message) -> list[dict[str, Any]]:
    """The calls of a message's turn as the audit holds them (stored as a reply remembers them)."""
    conversation = message.conversation_id
    entries = AuditEntry.objects.filter(
        conversation_id=conversation, created_at__gte=message.created_at
    )
    later = (
        Message.objects.filter(
            conversation_id=conversation, role=Message.Role.USER, created_at__gt=message.created_at
        )
        .order_by("created_at")
        .values_list("created_at", flat=True)
        .first()
    )
    if later is not None:
        entries = entries.filter(created_at__lt=later)
    replies = Message.objects.filter(
        conversation_id=conversation,
        role=Message.Role.ASSISTANT,
        created_at__gte=message.created_at,
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
        tool_calls=audited_calls(message),
        idempotency_key=message.idempotency_key,
        # right after the message it answers, in the conversation's order
        created_at=message.created_at + timedelta(microseconds=1),
    )
    try:
        with transaction.atomic():
            reply.save(force_insert=True)
            Conversation.objects.filter(pk=message.conversation_id).update(
                updated_at=timezone.now()
            )
    except IntegrityError:  # another reaper (or the turn itself) answered; or it was deleted
        return None
    return reply


def close_interrupted_turns(
    *, stale_after: float | None = None, dry_run: bool = False
) -> list[Interrupted]:
    """Close the turns dead processes left unanswered, and forget those processes."""
    seconds = assistant_settings.TURN_STALE_AFTER if stale_after is None else stale_after
    closed = []
    for process in dead_processes(seconds):
        left = unanswered(process, seconds)
        if dry_run:
            closed += [Interrupted(message=message, process=process) for message in left]
            continue
        for message in left:
            reply = close_turn(message)
            if reply is not None:
                closed.append(Interrupted(message=message, process=process, reply=reply))
                logger.warning(
                    "Closed the turn of message %s as interrupted (process %s died)",
                    message.pk,
                    process,
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
            await announce(interrupted.message, interrupted.reply)
    return closed


def reap_interrupted_turns(
    *, stale_after: float | None = None, dry_run: bool = False
) -> list[Interrupted]:
    """The sync twin of ``areap_interrupted_turns`` (the management command)."""
    return async_to_sync(areap_interrupted_turns)(stale_after=stale_after, dry_run=dry_run)


async def announce(message: Message, reply: Message) -> None:
    """Tell the conversation's sockets: the reply as stored, and the run's end."""
    thread_id = str(message.conversation_id)
    run_id = await run_of(thread_id, message)
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
