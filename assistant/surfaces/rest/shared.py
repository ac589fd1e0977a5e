"""What the REST views share: paging, the staff views' permission, ids from a query string."""

from __future__ import annotations

import logging
from typing import Any

from django.utils.translation import gettext, gettext_lazy
from rest_framework import exceptions
from rest_framework.pagination import PageNumberPagination
from rest_framework.permissions import BasePermission, IsAuthenticated
from rest_framework.request import Request
from rest_framework.views import APIView

from ...models import Conversation
from ..drf.base import AssistantAPIView, WithinTokenScope

logger = logging.getLogger("assistant.api")


class PagePagination(PageNumberPagination):
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200


class IsAuditViewer(BasePermission):
    """Staff holding ``assistant.view_auditentry``."""

    message = gettext_lazy("Staff with the assistant audit permission only.")

    def has_permission(self, request: Request, view: APIView) -> bool:
        user = request.user
        return bool(
            user
            and user.is_authenticated
            and user.is_staff
            and user.has_perm("assistant.view_auditentry")
        )


class StaffView(AssistantAPIView):
    permission_classes = [IsAuthenticated, WithinTokenScope, IsAuditViewer]

    def staff_conversation(self, conversation_id: str) -> Conversation:
        conversation = Conversation.objects.filter(pk=conversation_id).first()
        if conversation is None:
            raise exceptions.NotFound(gettext("No such conversation."))
        return conversation


MAX_ID = 2**63 - 1  # the largest id any database column here holds


def parse_id(value: str) -> int | None:
    """A positive id written in ASCII digits, or ``None`` (Unicode digits, out of range)."""
    if not (value.isascii() and value.isdigit()) or len(value) > len(str(MAX_ID)):
        return None
    number = int(value)
    return number if 0 < number <= MAX_ID else None


def query_id(name: str, value: str) -> int:
    """An id given as query parameter ``name``; a 400 ``invalid`` naming it otherwise."""
    number = parse_id(value)
    if number is None:
        raise exceptions.ValidationError(
            {name: f"expected an id from 1 to {MAX_ID}, in digits 0-9"}
        )
    return number


def _user_filter(field: str, value: str) -> dict[str, Any]:
    """Digits are a user id (``query_id`` rules apply), anything else a username."""
    if value.isdigit():
        return {f"{field}_id": query_id(field, value)}
    return {f"{field}__username": value}
