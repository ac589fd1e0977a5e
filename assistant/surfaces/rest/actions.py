"""Pending actions: the ones a user may answer, confirmed or cancelled."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter
from rest_framework import exceptions
from rest_framework.request import Request
from rest_framework.response import Response

from ...dispatch.confirmation import cancel_action, confirm_action
from ...models import PendingAction
from ..drf.base import OUTCOME_RESPONSES, AssistantAPIView, extend_schema
from ..drf.serializers import CancelInput, ConfirmInput, PendingActionSerializer
from .shared import PagePagination


class ActionListView(AssistantAPIView):
    pagination_class = PagePagination

    @extend_schema(
        summary="Your pending actions (or, ?awaiting=approval, others' you may approve)",
        parameters=[
            OpenApiParameter("status", str, enum=list(PendingAction.Status.values)),
            OpenApiParameter(
                "awaiting",
                str,
                enum=["approval"],
                description="other people's waiting two_person actions you may approve",
            ),
        ],
        responses=PendingActionSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        """Lists the caller's waiting actions, or with awaiting=approval those of others the caller
        may approve."""
        awaiting = request.query_params.get("awaiting")
        if awaiting is not None:
            if awaiting != "approval":
                raise exceptions.ValidationError({"awaiting": "only 'approval'"})
            return self.paginated(
                PendingAction.objects.awaiting_approval_by(request.user), PendingActionSerializer
            )
        actions = PendingAction.objects.owned_by(request.user).select_related("user")
        wanted = request.query_params.get("status")
        if wanted == PendingAction.Status.PENDING:
            actions = actions.waiting()
        elif wanted:
            if wanted not in PendingAction.Status.values:
                raise exceptions.ValidationError({"status": "unknown status"})
            actions = actions.filter(status=wanted)
        return self.paginated(actions, PendingActionSerializer)


class ActionConfirmView(AssistantAPIView):
    applies_ceiling = True

    @extend_schema(
        summary="Confirm a pending action (runs it once, as its requester)",
        request=ConfirmInput,
        responses=OUTCOME_RESPONSES,
    )
    def post(self, request: Request, action_id: str) -> Response:
        """Confirms a pending action once, re-checking its requester's permissions; a second
        confirmation gets 409 and an expired one 410."""
        data = ConfirmInput(data=request.data)
        data.is_valid(raise_exception=True)
        return self.outcome_response(
            confirm_action(
                action_id,
                reason=data.validated_data["reason"],
                phrase=data.validated_data["phrase"],
                context=self.call_context(),
            )
        )


class ActionCancelView(AssistantAPIView):
    applies_ceiling = True

    @extend_schema(
        summary="Refuse a pending action", request=CancelInput, responses=OUTCOME_RESPONSES
    )
    def post(self, request: Request, action_id: str) -> Response:
        """Refuses a pending action so it never runs; the refusal is audited as cancelled."""
        data = CancelInput(data=request.data)
        data.is_valid(raise_exception=True)
        return self.outcome_response(
            cancel_action(
                action_id, reason=data.validated_data["reason"], context=self.call_context()
            )
        )
