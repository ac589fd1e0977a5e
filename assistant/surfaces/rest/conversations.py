"""Conversations: a message's turn, the user's own conversations, and staff's view of everyone's."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, QuerySet
from django.utils.translation import gettext_lazy
from drf_spectacular.utils import OpenApiParameter
from rest_framework import exceptions, status
from rest_framework.permissions import BasePermission, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ...exceptions import CredentialLapsed
from ...models import Conversation
from ...turns.conversations import (
    conversation_for,
    delete_conversations,
    rename_conversation,
    search_conversations,
)
from ...turns.runs import run_turn
from ..drf.base import AssistantAPIView, WithinTokenScope, error_body, extend_schema
from ..drf.serializers import (
    ConversationDetailSerializer,
    ConversationInput,
    ConversationSerializer,
    DeletedSerializer,
    ErrorSerializer,
    MessageInput,
    MessageSerializer,
    StaffConversationHistorySerializer,
    StaffConversationSerializer,
    TurnSerializer,
)
from .shared import PagePagination, StaffView, _user_filter

MAX_SEARCH_LENGTH = 200


def owner_id(request: Request) -> Any:
    return request.user.pk


class MessagesView(AssistantAPIView):
    applies_ceiling = True

    @extend_schema(
        summary="Send a message: one turn",
        request=MessageInput,
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                str,
                OpenApiParameter.HEADER,
                description="A retry with the same key returns the first turn, not a second one.",
            )
        ],
        responses={
            201: TurnSerializer,
            400: ErrorSerializer,
            409: ErrorSerializer,
            503: ErrorSerializer,
        },
    )
    def post(self, request: Request) -> Response:
        """Stores the message, runs one turn through the planner and dispatch, and answers with the
        stored reply."""
        data = MessageInput(data=request.data)
        data.is_valid(raise_exception=True)
        context = self.call_context()
        turn = run_turn(
            request.user,
            data.validated_data["message"],
            conversation_id=data.validated_data.get("conversation"),
            source=context.source,
            request_ip=context.request_ip,
            idempotency_key=request.headers.get("Idempotency-Key"),
            ceiling=context.ceiling,
            client=context.client,
            credential=self.credential(),
        )
        if isinstance(turn.error, CredentialLapsed):
            # it lapsed while the turn ran: the turn stopped there, and is stored as failed
            body = {**error_body(turn.error.code, turn.error.message)}
            body["conversation"] = str(turn.conversation.pk)
            header = self.get_authenticate_header(request)
            return Response(body, status=turn.error.status, headers={"WWW-Authenticate": header})
        return Response(TurnSerializer(turn).data, status=status.HTTP_201_CREATED)


def _with_counts(conversations: QuerySet[Conversation]) -> QuerySet[Conversation]:
    # GROUP BY drops Meta.ordering: restate it, newest activity first.
    return conversations.annotate(message_count=Count("messages")).order_by("-updated_at", "-id")


class ConversationListView(AssistantAPIView):
    pagination_class = PagePagination

    @extend_schema(
        summary="Your conversations, most recently used first",
        parameters=[
            OpenApiParameter(
                "search",
                str,
                description="only those whose title or messages hold every word (any case)",
            )
        ],
        responses=ConversationSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        """Lists the caller's conversations, filterable by a search over titles and message text."""
        conversations = Conversation.objects.filter(user_id=owner_id(request))
        wanted = request.query_params.get("search", "")
        if len(wanted) > MAX_SEARCH_LENGTH:
            raise exceptions.ValidationError({"search": f"at most {MAX_SEARCH_LENGTH} characters"})
        if wanted.strip():
            conversations = search_conversations(conversations, wanted)
        return self.paginated(_with_counts(conversations), ConversationSerializer)

    @extend_schema(
        summary="Delete all your conversations (their waiting actions are cancelled)",
        operation_id="conversations_destroy_all",
        responses={200: DeletedSerializer},
    )
    def delete(self, request: Request) -> Response:
        """Deletes every conversation of the caller, cancelling their waiting actions; the audit
        trail keeps its entries."""
        deleted = delete_conversations(
            request.user,
            Conversation.objects.filter(user_id=owner_id(request)),
            source="rest",
            request_ip=self.client_ip(),
        )
        return Response({"deleted": deleted})


class ConversationDetailView(AssistantAPIView):
    def conversation(self, request: Request, conversation_id: str) -> Conversation:
        return conversation_for(request.user, conversation_id)

    @extend_schema(
        summary="One of your conversations with its messages",
        responses=ConversationDetailSerializer,
    )
    def get(self, request: Request, conversation_id: str) -> Response:
        """Returns one of the caller's conversations with its messages; someone else's is a 404."""
        conversation = self.conversation(request, conversation_id)
        conversation = (
            _with_counts(Conversation.objects.filter(pk=conversation.pk))
            .prefetch_related("messages")
            .get()
        )
        return Response(ConversationDetailSerializer(conversation).data)

    @extend_schema(
        summary="Rename one of your conversations",
        request=ConversationInput,
        responses={200: ConversationSerializer},
    )
    def patch(self, request: Request, conversation_id: str) -> Response:
        """Renames one of the caller's conversations."""
        data = ConversationInput(data=request.data)
        data.is_valid(raise_exception=True)
        conversation = rename_conversation(
            request.user, conversation_id, data.validated_data["title"]
        )
        row = _with_counts(Conversation.objects.filter(pk=conversation.pk)).get()
        return Response(ConversationSerializer(row).data)

    @extend_schema(
        summary="Delete one of your conversations (its waiting actions are cancelled)",
        responses={204: None},
    )
    def delete(self, request: Request, conversation_id: str) -> Response:
        """Deletes one of the caller's conversations and cancels its waiting actions."""
        conversation = self.conversation(request, conversation_id)
        delete_conversations(
            request.user,
            Conversation.objects.filter(pk=conversation.pk),
            source="rest",
            request_ip=self.client_ip(),
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


class StaffConversationListView(StaffView):
    pagination_class = PagePagination

    @extend_schema(
        summary="Every user's conversations (staff)",
        parameters=[OpenApiParameter("user", str, description="user id or username")],
        responses=StaffConversationSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        """Lists every user's conversations for staff who may read the audit, filterable by user."""
        conversations = _with_counts(Conversation.objects.select_related("user"))
        wanted = request.query_params.get("user")
        if wanted:
            conversations = conversations.filter(**_user_filter("user", wanted))
        return self.paginated(conversations, StaffConversationSerializer)


class IsConversationDeleter(BasePermission):
    """Staff holding ``assistant.delete_conversation``: reading the audit is not leave to erase."""

    message = gettext_lazy("Staff with the permission to delete conversations only.")

    def has_permission(self, request: Request, view: APIView) -> bool:
        user = request.user
        return bool(user.is_staff and user.has_perm("assistant.delete_conversation"))


class StaffConversationDetailView(StaffView):
    permission_classes = [IsAuthenticated, WithinTokenScope, IsConversationDeleter]

    @extend_schema(
        summary="Delete any user's conversation (staff with assistant.delete_conversation)",
        responses={204: None},
    )
    def delete(self, request: Request, conversation_id: str) -> Response:
        """Deletes any user's conversation; needs assistant.delete_conversation, not only audit
        access."""
        conversation = self.staff_conversation(conversation_id)
        delete_conversations(
            request.user,
            Conversation.objects.filter(pk=conversation.pk),
            source="rest",
            request_ip=self.client_ip(),
            as_staff=True,
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


class StaffConversationHistoryView(StaffView):
    @extend_schema(
        summary="A conversation's messages (staff)", responses=StaffConversationHistorySerializer
    )
    def get(self, request: Request, conversation_id: str) -> Response:
        """Returns any user's conversation with its messages for staff who may read the audit."""
        conversation = self.staff_conversation(conversation_id)
        return Response(
            {
                "conversation": StaffConversationSerializer(
                    _with_counts(Conversation.objects.filter(pk=conversation.pk)).get()
                ).data,
                "messages": MessageSerializer(conversation.messages.all(), many=True).data,
            }
        )
