"""A user's conversations: found (never someone else's), titled, searched, deleted, and what waits in them."""

from __future__ import annotations

import contextlib
import logging
import uuid
from typing import Any

from asgiref.sync import async_to_sync
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils.translation import gettext

from ..core.storable import storable_text
from ..dispatch.calls import CallContext
from ..dispatch.confirmation import recorded, withdraw_action
from ..exceptions import AssistantError, ConversationNotFound, InvalidRunInput, InvalidTitle
from ..models import Conversation, Job, Message, PendingAction
from .control import request_stop
from .turn import CLIENT_TOOL

logger = logging.getLogger("assistant.chat")
# The conversation a client's own thread id names for one user (AG-UI clients choose the ids).
THREADS = uuid.UUID("6f1d3a52-6c1b-4f5e-9a59-2d5bfe0c6a11")


def conversation_for(user: Any, conversation_id: Any) -> Conversation:
    """The user's own conversation with this id, or ``ConversationNotFound`` (never someone else's)."""
    try:
        pk = uuid.UUID(str(conversation_id))
    except ValueError:
        raise ConversationNotFound() from None
    conversation = Conversation.objects.filter(pk=pk, user_id=user.pk).first()
    if conversation is None:
        raise ConversationNotFound()
    return conversation


def thread_conversation(user: Any, thread_id: str) -> Conversation:
    """The conversation an AG-UI thread id names for this user: their own with that id, else the
    one the id names for them alone (not saved until a message is), so another user's id, a
    missing one and a malformed one all answer alike: a new thread."""
    with contextlib.suppress(ConversationNotFound):
        return conversation_for(user, thread_id)
    pk = uuid.uuid5(THREADS, f"{user.pk}:{thread_id}")
    conversation = Conversation.objects.filter(pk=pk).first()
    if conversation is None:
        return Conversation(pk=pk, user=user)
    if conversation.user_id != user.pk:  # (a uuid5 collision): never someone else's
        raise ConversationNotFound()
    return conversation


def waiting_actions(user: Any, conversation: Conversation) -> list[PendingAction]:
    """The user's actions waiting for an answer in this conversation, oldest first."""
    if conversation._state.adding:
        return []
    waiting = PendingAction.objects.owned_by(user).waiting().filter(conversation=conversation)
    return list(waiting.select_related("user").order_by("created_at"))


def running_jobs(user: Any, conversation: Conversation) -> list[Job]:
    """The user's jobs of this conversation that are queued or running, oldest first."""
    if conversation._state.adding:
        return []
    jobs = Job.objects.owned_by(user).active().filter(conversation=conversation)
    return list(jobs.order_by("created_at"))


def pending_client_calls(conversation: Conversation) -> list[str]:
    """The calls of the client's own tools that the conversation's last reply made and no run
    has answered yet (AG-UI client tools), in order."""
    last = _waiting_reply(conversation)
    if last is None:
        return []
    return [r["tool_call_id"] for r in last.tool_calls or [] if r.get("decision") == CLIENT_TOOL]


def _waiting_reply(conversation: Conversation) -> Message | None:
    """The conversation's last message, if it is a reply no run has taken client results for."""
    if conversation._state.adding:
        return None
    last = Message.objects.filter(conversation=conversation).order_by("-created_at", "-id").first()
    if last is None or last.role != Message.Role.ASSISTANT or last.answered_at is not None:
        return None
    return last


def take_client_results(conversation: Conversation) -> None:
    """Claim the last reply's client tool calls for this run; ``InvalidRunInput`` if another
    run took them first (the same results sent twice at once)."""
    reply = _waiting_reply(conversation)
    if reply is None or not reply.take_client_results():
        raise InvalidRunInput(
            gettext(
                "The tool messages must answer the calls of your tools the last run made, each once."
            ),
            code="unknown_tool_call",
        )


def check_title(title: Any) -> str:
    """A conversation title as it will be stored, or ``InvalidTitle``."""
    if not isinstance(title, str) or not title.strip():
        raise InvalidTitle(gettext("The title is empty."))
    limit = Conversation._meta.get_field("title").max_length or 0
    title = " ".join(title.split())
    if len(title) > limit:
        raise InvalidTitle(
            gettext("The title is longer than %(limit)s characters.") % {"limit": limit}
        )
    if storable_text(title) != title:
        raise InvalidTitle(gettext("The title contains a NUL character or an unpaired surrogate."))
    return title


def rename_conversation(user: Any, conversation_id: Any, title: Any) -> Conversation:
    """Give one of the user's conversations the title they chose (its place in the list stays)."""
    conversation = conversation_for(user, conversation_id)
    conversation.title = check_title(title)
    Conversation.objects.filter(pk=conversation.pk).update(title=conversation.title)
    return conversation


def search_conversations(
    conversations: QuerySet[Conversation], text: str
) -> QuerySet[Conversation]:
    """The conversations holding every word of ``text`` (any case) in their title or a message."""
    words = text.split()
    for word in words:
        found = Message.objects.filter(conversation=OuterRef("pk"), text__icontains=word)
        conversations = conversations.filter(Q(title__icontains=word) | Exists(found))
    return conversations


def delete_conversations(
    user: Any,
    conversations: QuerySet[Conversation],
    *,
    source: str,
    request_ip: str | None = None,
    as_staff: bool = False,
) -> int:
    """Delete these conversations of the user's (any of them ``as_staff``, the caller having
    checked the permission), hard: their messages go, the audit stays.

    Actions still waiting in them are refused first (audited ``cancelled``, naming who deleted
    them when not their requester: nobody can approve what its user no longer sees), and turns
    running in them are asked to stop. Audit entries, jobs and decided actions keep their rows,
    with the conversation unset. Staff deleting someone's conversations is audited too.
    """
    if not as_staff:
        conversations = conversations.filter(user_id=user.pk)
    owners = dict(conversations.values_list("pk", "user_id"))
    ids = list(owners)
    context = CallContext(user=user, source=source, request_ip=request_ip)
    waiting = PendingAction.objects.waiting().filter(conversation_id__in=ids)
    for action_id in waiting.values_list("pk", flat=True):
        with contextlib.suppress(AssistantError):  # decided meanwhile elsewhere: not waiting either
            withdraw_action(action_id, reason="conversation deleted", context=context)
    try:
        for pk in ids:
            async_to_sync(request_stop)(str(pk))
    except Exception:  # (the channel layer is down): a turn still running ends unstored
        logger.exception("Asking the turns of deleted conversations to stop failed")
    deleted = Conversation.objects.filter(pk__in=ids).delete()[1]
    if as_staff:
        for pk, owner in owners.items():
            entities = {"conversation": str(pk), "user": owner}
            recorded(context, "delete_conversation", entities, domain="conversations")
    return deleted.get(Conversation._meta.label, 0)
