"""The chat socket's consumer: its frames (message, confirm, reject, cancel, resume), the
conversations it watches, and what it replays; turns run on their own, every socket on a
conversation sees them."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

from asgiref.sync import sync_to_async
from channels.db import aclose_old_connections
from channels.exceptions import StopConsumer
from channels.layers import get_channel_layer
from channels.utils import await_many_dispatch
from django.http import HttpRequest
from django.utils import translation
from django.utils.functional import LazyObject, empty
from django.utils.translation import gettext

from ... import telemetry
from ...access.caches import access_for, refresh_access, reread_access
from ...access.credentials import Credential, of_session
from ...access.permissions import session_user_is_inactive
from ...access.rates import TurnRate
from ...conf import assistant_settings
from ...core.lifecycle import ToolSession, bind_process_session, new_session
from ...dispatch.calls import CallContext
from ...dispatch.confirmation import stop_job, waiting_actions
from ...exceptions import (
    AccountInactive,
    AssistantError,
    ConversationNotFound,
    CredentialLapsed,
    FrameError,
    FrameNotJSON,
    FrameTooLarge,
    MissingField,
    NothingToCancel,
    UnknownFrameType,
    outage,
)
from ...jobs import job_relay
from ...models import Conversation, Message
from ...stream import events
from ...stream.broadcast import group_name
from ...stream.eventlog import event_log
from ...turns.chat import ActionAnswer, Launch, NewMessage, Run, launch, still_signed_in
from ...turns.control import request_stop
from ...turns.conversations import conversation_for
from ...turns.lanes import keep, loop_state
from ...turns.messages import check_message
from .output import BURSTS, SNAPSHOT_MAX_BYTES, SocketOutput

logger = logging.getLogger("assistant.consumers")
UNAUTHENTICATED = 4401
ACCOUNT_INACTIVE = 4403  # a deactivated user: told so, then closed (the client does not retry)
LAYER_UNAVAILABLE = 1013  # "try again later": the channel layer (Redis) cannot be reached
SERVER_ERROR = 1011  # the server cannot serve chats (e.g. no channel layer); said before closing
NORMAL_CLOSE = (1000, 1001)  # anything else is an abnormal drop: toolsets are cancelled
MAX_SEQ = 2**63 - 1
# Turns started here (message, confirm, reject) count apart from REST requests, at their rate.
TURN_RATE = TurnRate(scope="assistant_websocket")


class AssistantConsumer(SocketOutput):
    """Client frames: message, confirm, reject, cancel, resume. Server frames: AG-UI events."""

    layer_lost = False  # the channel layer failed: this socket cannot see runs
    layer_told = False
    connected = False
    credential: Credential | None = None  # the session that signed the socket in, if one did
    signed_out = False  # that session ended: told so, closing; no frame is served any more

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """As channels' own, but a channel layer that cannot be reached closes the socket cleanly.

        Channels would let the layer's error escape: a 500 for the handshake, or a dead socket.
        """
        self.scope = scope
        self.base_send = send
        # (this connection's task only: what it says, and the turns it starts, in the client's language)
        translation.activate(language_of(scope))
        self.channel_layer = get_channel_layer(self.channel_layer_alias)
        self.undelivered: asyncio.Queue[list[str]] = asyncio.Queue()
        sources = [receive, self.undelivered_receive]
        if self.channel_layer is not None:
            try:
                self.channel_name = await self.channel_layer.new_channel()
            except Exception:
                logger.exception("The channel layer cannot be reached; the socket will close")
                self.layer_lost = True
            else:
                sources.append(self.channel_receive)
        with contextlib.suppress(StopConsumer):
            await await_many_dispatch(sources, self.dispatch)

    async def channel_receive(self) -> dict[str, Any]:
        assert self.channel_layer is not None
        if not self.layer_lost:
            try:
                message: dict[str, Any] = await self.channel_layer.receive(self.channel_name)
                return message
            except Exception:
                logger.exception("Receiving from the channel layer failed; the socket will close")
                self.layer_lost = True
                return {"type": "assistant.layer_lost"}
        await asyncio.Future()  # nothing more comes from there; cancelled when the socket ends
        raise AssertionError("unreachable")

    async def undelivered_receive(self) -> dict[str, Any]:
        """The next burst of a run this socket started that the channel layer could not carry."""
        return {"type": "assistant.undelivered", "texts": await self.undelivered.get()}

    async def assistant_layer_lost(self, message: dict[str, Any]) -> None:
        await self.close_for_lost_layer()

    async def close_for_lost_layer(self) -> None:
        """Tell the client (``channel_layer_unavailable``) and close with ``LAYER_UNAVAILABLE``."""
        if not self.connected or self.layer_told:
            return  # connect() tells it, or it was told
        self.layer_told = True
        await self.send_error(
            "channel_layer_unavailable", "The chat is unavailable; please try again later."
        )
        await self.close(code=LAYER_UNAVAILABLE)

    async def connect(self) -> None:
        user = self.scope.get("user")
        # AuthMiddleware resolved the lazy user already; every turn reads it many times.
        if isinstance(user, LazyObject) and user._wrapped is not empty:
            user = user._wrapped
        self.user = user
        self.watching: dict[str, Conversation] = {}
        self.current: str | None = None
        self.tools: ToolSession | None = None
        self.relaying = False
        self.in_flight = 0  # bytes handed to the server whose send has not returned yet
        self.too_slow = False
        self.bursts = BURSTS in self.scope.get("subprotocols", ())
        # the handshake's traceparent: every turn this socket starts continues that trace
        self.trace_carrier = telemetry.carrier_of(self.scope.get("headers"))
        await self.accept(subprotocol=BURSTS if self.bursts else None)
        self.connected = True
        if await self.deactivated():
            refused = AccountInactive()
            await self.send_error(refused.code, refused.message)
            await self.close(code=ACCOUNT_INACTIVE)
            return
        if self.user is None or not self.user.is_authenticated:
            await self.close(code=UNAUTHENTICATED)
            return
        if self.channel_layer is None:
            await self.refuse_without_layer()
            return
        if self.layer_lost:
            await self.close_for_lost_layer()
            return
        try:
            # Listen for stop requests and permission news before reading anything.
            await loop_state().control.start()
        except Exception:
            logger.exception("Joining the control group failed; permission news will wait")
        # The first turn reads the user again (they were read before we listened), and later
        # turns again once permissions change or the reading grows old.
        reread_access(self.user, shared=True)
        session = self.scope.get("session")
        if getattr(session, "session_key", None):  # (read already: the user came from it)
            self.credential = await sync_to_async(of_session)(session, self.user)
        # A chat session begins: its toolsets start in the background (not_ready meanwhile).
        bind_process_session()
        self.tools = new_session()
        self.tools.begin()
        job_relay().acquire()
        self.relaying = True
        try:
            await self.send_pending_actions()
        except Exception:
            logger.exception("Reading the pending actions of a new socket failed")
            await self.send_error("internal_error", "Your pending approvals could not be loaded.")

    async def deactivated(self) -> bool:
        """Whether the socket's user (or, signed out by it, its session's) was deactivated."""
        user = self.user
        if user is not None and user.is_authenticated:
            return not getattr(user, "is_active", True)
        return await sync_to_async(session_user_is_inactive)(self.scope.get("session"))

    async def disconnect(self, code: int) -> None:
        if self.relaying:
            job_relay().release()
        for thread_id in getattr(self, "watching", {}):
            try:
                await self.channel_layer.group_discard(group_name(thread_id), self.channel_name)
            except Exception:
                logger.exception("Leaving a conversation's group failed")  # it expires anyway
        if self.tools is not None:
            self.tools.closed = True
            if code in NORMAL_CLOSE:
                await self.tools.stop()
            else:
                await self.tools.cancel()

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self.too_slow or self.signed_out:
            return  # closing: whatever it asks for now would only be buffered, or refused
        try:
            content = self.parse(text_data, bytes_data)
            handler = getattr(self, f"on_{content['type']}", None)
            if handler is None:
                raise UnknownFrameType(
                    gettext("Unknown frame type %(type)s.") % {"type": repr(content["type"])}
                )
            if content["type"] != "message":
                await aclose_old_connections()
                refresh_access(self.user)  # e.g. cancel_job checks permissions here
            await handler(content)
        except FrameError as exc:
            logger.info("Refused a websocket frame (%s): %s", exc.code, exc.message)
            await self.send_error(exc.code, exc.message)
        except CredentialLapsed as exc:
            await self.sign_out(exc)
        except AssistantError as exc:
            await self.send_refusal(exc)
        except Exception as exc:
            # One bad moment must not cost the user the connection (and its other tabs' view).
            unavailable = outage(exc)
            if unavailable is not None:
                logger.warning("A websocket frame found the database unavailable: %s", exc)
                await self.send_refusal(unavailable)
                return
            logger.exception("Handling a websocket frame failed")
            await self.send_error(
                "internal_error", gettext("Something went wrong; please try again.")
            )

    def parse(self, text_data: str | None, bytes_data: bytes | None) -> dict[str, Any]:
        if text_data is None:
            raise FrameError(gettext("Frames are JSON text."))
        if len(text_data) > assistant_settings.MAX_MESSAGE_LENGTH * 2 + 1024:
            raise FrameTooLarge()
        try:
            content = json.loads(text_data, parse_constant=_not_json)
        except ValueError:
            raise FrameNotJSON() from None
        if not isinstance(content, dict) or not isinstance(content.get("type"), str):
            raise FrameError('A frame is a JSON object with a "type".')
        return content

    @staticmethod
    def text(content: dict[str, Any], key: str) -> str:
        """An optional text field of the frame ("" when absent)."""
        value = content.get(key)
        if value is None:
            return ""
        if not isinstance(value, str):
            raise FrameError(f'"{key}" must be text.')
        return value

    @staticmethod
    def required(content: dict[str, Any], key: str) -> Any:
        value = content.get(key)
        if value in (None, ""):
            raise MissingField(f'The frame needs "{key}".')
        return value

    async def refuse_without_layer(self) -> None:
        logger.error("The chat websocket needs CHANNEL_LAYERS; none is configured: socket closed")
        await self.send_error(
            "channel_layer_missing",
            "The chat is not available: the server has no channel layer configured.",
        )
        await self.close(code=SERVER_ERROR)

    async def watch(self, conversation: Conversation) -> None:
        """Join a conversation (already checked to be this user's) and make it the current one."""
        thread_id = str(conversation.pk)
        self.current = thread_id
        if thread_id not in self.watching:
            try:
                await self.channel_layer.group_add(group_name(thread_id), self.channel_name)
            except Exception:
                # The turn goes on and is stored; this socket will not hear it live: say so.
                await self.send_error(
                    "not_subscribed",
                    "Live updates for this conversation could not be set up; your message is "
                    "saved and will be answered — reload to see the answer.",
                    conversation=thread_id,
                )
                raise
            self.watching[thread_id] = conversation  # (a failed join is tried again next time)

    async def own(self, conversation_id: Any) -> Conversation:
        """One of this user's conversations, checked once per connection (a Stop's)."""
        known = self.watching.get(str(conversation_id))
        if known is not None:
            return known
        return await sync_to_async(conversation_for)(self.user, conversation_id)

    def cancel_job_afresh(self, job_id: Any) -> None:
        """Stop one of the user's jobs, while the socket's session holds."""
        self.signed_in("cancel_job", {"job": str(job_id)[:100]})
        access_for(self.user)  # a stale user is read again before the permission check
        context = CallContext(user=self.user, source="websocket", request_ip=self.client_ip())
        stop_job(job_id, context=context)

    def own_afresh(self, conversation_id: str) -> Conversation:
        """One of the user's conversations read afresh, while the socket's session holds."""
        self.signed_in("resume", {"conversation": conversation_id[:100]})
        return conversation_for(self.user, conversation_id)

    async def unwatch(self, thread_id: str) -> None:
        """Leave a conversation found gone (deleted from another tab)."""
        if self.watching.pop(thread_id, None) is None:
            return
        if self.current == thread_id:
            self.current = None
        with contextlib.suppress(Exception):  # (the group expires anyway)
            await self.channel_layer.group_discard(group_name(thread_id), self.channel_name)

    # -- client frames ----------------------------------------------------------------------

    async def on_message(self, content: dict[str, Any]) -> None:
        text = check_message(content.get("text"))
        target = content.get("conversation")
        conversation = self.watching.get(str(target), target) if target else None
        self.start(NewMessage(text=text, conversation=conversation))

    async def on_confirm(self, content: dict[str, Any]) -> None:
        self.start(
            ActionAnswer(
                action=self.required(content, "action"),
                confirm=True,
                reason=self.text(content, "reason"),
                phrase=self.text(content, "phrase"),
            )
        )

    async def on_reject(self, content: dict[str, Any]) -> None:
        self.start(
            ActionAnswer(
                action=self.required(content, "action"),
                confirm=False,
                reason=self.text(content, "reason"),
            )
        )

    def start(self, request: NewMessage | ActionAnswer) -> None:
        """Launch the turn; this socket joins its conversation before the run sends anything.

        Every turn a frame starts (message, confirm, reject) is throttled like REST requests,
        inside the turn's first hop: a refused one stores nothing.
        """
        run = Run(throttle=TURN_RATE, credential=self.credential, undelivered=self.undelivered)
        with telemetry.incoming(self.trace_carrier):
            launched = launch(
                self.user,
                request,
                source="websocket",
                request_ip=self.client_ip(),
                session=self.tools,
                run=run,
            )
        keep(asyncio.ensure_future(self.join(launched)))

    async def join(self, launched: Launch) -> None:
        """Watch the launched turn's conversation, or tell the client why it was refused."""
        try:
            async with launched.start() as conversation:
                try:
                    await self.watch(conversation)
                except Exception:  # (the client was told: not_subscribed)
                    logger.exception("Joining a turn's conversation failed; the turn goes on")
        except CredentialLapsed as refused:
            await self.sign_out(refused)
        except AssistantError as refused:
            await self.send_refusal(refused)

    async def sign_out(self, lapse: CredentialLapsed) -> None:
        """The socket's session ended: say so (its code), then close as unauthenticated."""
        if self.signed_out:
            return
        self.signed_out = True
        await self.send_error(lapse.code, lapse.message)
        await self.close(code=UNAUTHENTICATED)

    def signed_in(self, operation: str, requested: dict[str, Any]) -> None:
        """In a frame's sync step: raise ``CredentialLapsed`` (audited as ``operation``) if the
        socket's session ended."""
        if self.credential is not None:
            still_signed_in(
                self.credential,
                self.user,
                requested,
                source="websocket",
                request_ip=self.client_ip(),
                operation=operation,
            )

    async def on_cancel(self, content: dict[str, Any]) -> None:
        thread_id = content.get("conversation") or self.current
        if not thread_id:
            raise NothingToCancel()
        conversation = await self.own(thread_id)
        await request_stop(str(conversation.pk), content.get("run"))
        if self.tools is not None:
            await self.tools.cancel()  # in-flight work of this session's toolsets stops too

    async def on_cancel_job(self, content: dict[str, Any]) -> None:
        """Stop one of the user's background jobs (a running one stops at its next check)."""
        await sync_to_async(self.cancel_job_afresh)(self.required(content, "job"))

    async def on_resume(self, content: dict[str, Any]) -> None:
        # Read afresh, not taken from what this socket watches: it may have been deleted since.
        target = str(self.required(content, "conversation"))
        try:
            conversation = await sync_to_async(self.own_afresh)(target)
        except ConversationNotFound:
            await self.unwatch(target)
            raise
        thread_id = str(conversation.pk)
        after = content.get("after")
        after = 0 if after is None else after
        if isinstance(after, bool) or not isinstance(after, int) or not 0 <= after <= MAX_SEQ:
            raise FrameError('"after" must be a whole number, 0 or more.')
        await self.watch(conversation)
        replay = await event_log().since(thread_id, after)
        frames = replay.frames
        if replay.gap or after <= 0:
            # The stored messages stand for finished runs; only a run still going is replayed.
            messages, more = await sync_to_async(_stored_messages)(conversation)
            await self.send_frame(
                events.frame(events.messages_snapshot(messages), thread_id=thread_id, run_id=None)
            )
            if more:  # the snapshot holds only the newest messages
                cut = events.custom("assistant.snapshot", {"messages": len(messages), "more": True})
                await self.send_frame(events.frame(cut, thread_id=thread_id, run_id=None))
            finished = {f["runId"] for f in frames if f["type"] in ("RUN_FINISHED", "RUN_ERROR")}
            frames = [frame for frame in frames if frame["runId"] not in finished]
        for frame in frames:
            await self.send_frame(frame)
        await self.send_pending_actions(conversation)
        marker = events.custom("assistant.resumed", {"last": replay.last})
        await self.send_frame(events.frame(marker, thread_id=thread_id, run_id=None))

    # -- channel-layer messages ----------------------------------------------------------------

    async def dispatch(self, message: dict[str, Any]) -> None:
        # Channels hops to a thread to close stale database connections before every message,
        # as a request would. Bursts of events only send, and frames close them only when they
        # touch the database here (a turn's lane does its own): one hop less per message.
        if message["type"] == "assistant.events":
            await self.assistant_events(message)
        elif message["type"] == "assistant.undelivered":
            await self.assistant_undelivered(message)
        elif message["type"] == "websocket.receive":
            await self.websocket_receive(message)
        else:
            await super().dispatch(message)

    async def assistant_undelivered(self, message: dict[str, Any]) -> None:
        """A run this socket started whose frames the channel layer could not carry (Redis
        down): they come straight to this socket, unnumbered, rather than not at all."""
        if not self.signed_out:
            await self.assistant_events(message)

    # -- helpers ----------------------------------------------------------------------------

    async def send_pending_actions(self, conversation: Conversation | None = None) -> None:
        """The conversation's waiting actions in full, and how many wait where (counts only).

        Sent on connect (no conversation yet) and on every resume, before its marker; nothing
        when nothing waits anywhere.
        """
        actions, waiting = await sync_to_async(waiting_actions)(self.user, conversation)
        if actions or waiting:
            frame = events.frame(
                events.custom(
                    "assistant.pending_actions", {"actions": actions, "waiting": waiting}
                ),
                thread_id=str(conversation.pk) if conversation is not None else "",
                run_id=None,
            )
            await self.send_frame(frame)

    def client_ip(self) -> str | None:
        client = self.scope.get("client")
        return client[0] if client else None


def _stored_messages(conversation: Any) -> tuple[list[Message], bool]:
    """The conversation's newest messages, oldest first, within the snapshot's bounds; and if
    older ones were left out."""
    limit = assistant_settings.SNAPSHOT_MAX_MESSAGES
    newest = Message.objects.filter(conversation=conversation).order_by("-created_at", "-id")
    candidates = list(newest[: limit + 1])
    kept: list[Message] = []
    size = 0
    for message in candidates[:limit]:
        size += len(json.dumps(message.text)) + len(json.dumps(message.tool_calls or []))
        if kept and size > SNAPSHOT_MAX_BYTES:
            break
        kept.append(message)
    return kept[::-1], len(kept) < len(candidates)


def language_of(scope: dict[str, Any]) -> str:
    """The language a websocket client asked for, as ``LocaleMiddleware`` reads a request's."""
    request = HttpRequest()
    request.COOKIES = dict(scope.get("cookies") or {})
    for name, value in scope.get("headers") or ():
        if name == b"accept-language":
            request.META["HTTP_ACCEPT_LANGUAGE"] = value.decode("latin-1")
    return translation.get_language_from_request(request)


def _not_json(constant: str) -> Any:
    raise FrameError(gettext("%(constant)s is not a number JSON allows.") % {"constant": constant})
