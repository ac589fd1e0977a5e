"""The audit trail for staff, filtered and paged by cursor."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime
from drf_spectacular.utils import OpenApiParameter
from rest_framework import exceptions
from rest_framework.pagination import CursorPagination
from rest_framework.request import Request
from rest_framework.response import Response

from ...models import AuditEntry
from ..drf.base import extend_schema
from ..drf.serializers import AuditEntrySerializer
from .shared import StaffView, _user_filter


class AuditCursorPagination(CursorPagination):
    ordering = "-id"
    page_size = 100
    page_size_query_param = "page_size"
    max_page_size = 1000


def _bound(name: str, value: str) -> dict[str, Any]:
    """A ``since``/``until`` filter: a whole day for a date, an instant for a date-time."""
    end = name == "until"
    try:
        if len(value) == 10:
            day = parse_date(value)
            if day is not None:
                return {"created_at__date__lte" if end else "created_at__date__gte": day}
        moment = parse_datetime(value)
    except ValueError:
        moment = None
    if moment is None:
        raise exceptions.ValidationError({name: f"{value!r} is not a date or an ISO date-time"})
    try:
        if timezone.is_naive(moment):
            moment = timezone.make_aware(moment)
        moment.astimezone(dt.UTC)  # (as the database stores it: year 1 to 9999 in UTC)
    except OverflowError:
        raise exceptions.ValidationError({name: f"{value!r} is out of range"}) from None
    return {"created_at__lte" if end else "created_at__gte": moment}


class AuditListView(StaffView):
    pagination_class = AuditCursorPagination

    @extend_schema(
        summary="The audit trail (staff), newest first, cursor-paginated",
        parameters=[
            OpenApiParameter("user", str, description="user id or username"),
            OpenApiParameter("operation", str),
            OpenApiParameter("decision", str, enum=list(AuditEntry.Decision.values)),
            OpenApiParameter("since", str, description="date or ISO date-time (inclusive)"),
            OpenApiParameter("until", str, description="date or ISO date-time (inclusive)"),
        ],
        responses=AuditEntrySerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        """Pages through the append-only audit trail, newest first, filtered by user, operation,
        decision and time."""
        entries = AuditEntry.objects.all()
        params = request.query_params
        if params.get("user"):
            entries = entries.filter(**_user_filter("user", params["user"]))
        if params.get("operation"):
            entries = entries.filter(operation=params["operation"])
        if params.get("decision"):
            if params["decision"] not in AuditEntry.Decision.values:
                raise exceptions.ValidationError({"decision": "unknown decision"})
            entries = entries.filter(decision=params["decision"])
        for name in ("since", "until"):
            if params.get(name):
                entries = entries.filter(**_bound(name, params[name]))
        return self.paginated(entries, AuditEntrySerializer)
