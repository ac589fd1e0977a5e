"""The tools a caller may use, and one call to one of them through dispatch."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter
from rest_framework import exceptions
from rest_framework.request import Request
from rest_framework.response import Response

from ...dispatch.catalog import get_catalog, visible_tools
from ...dispatch.door import dispatch
from ...turns.conversations import conversation_for
from ..drf.base import OUTCOME_RESPONSES, AssistantAPIView, extend_schema
from ..drf.parsers import JSON_ONLY
from ..drf.serializers import (
    DispatchInput,
    OutcomeSerializer,
    ToolCatalogSerializer,
    ToolSerializer,
)


class ToolsView(AssistantAPIView):
    @extend_schema(
        summary="The tools you may use",
        parameters=[
            OpenApiParameter(
                "style",
                str,
                enum=["inventory", "openai", "anthropic"],
                description="inventory (default), or an LLM tool format",
            )
        ],
        responses=ToolCatalogSerializer,
    )
    def get(self, request: Request) -> Response:
        """Lists only the tools this caller may call (the catalog the planner sees), in the
        requested style."""
        style = request.query_params.get("style", "inventory")
        ceiling = self.call_context().ceiling
        if style == "openai" or style == "anthropic":
            return Response({"tools": get_catalog(request.user, style=style, ceiling=ceiling)})  # type: ignore[arg-type]
        if style != "inventory":
            raise exceptions.ValidationError({"style": "choose inventory, openai or anthropic"})
        tools = visible_tools(request.user, ceiling=ceiling)
        return Response({"tools": ToolSerializer(tools, many=True).data})


class DispatchView(AssistantAPIView):
    applies_ceiling = True
    parser_classes = JSON_ONLY  # entities are typed JSON values

    @extend_schema(
        summary="Call one tool",
        request=DispatchInput,
        responses={**OUTCOME_RESPONSES, 202: OutcomeSerializer},
    )
    def post(self, request: Request) -> Response:
        """Calls one tool by operation name through dispatch, audited; a tool that needs
        confirmation answers with a pending action instead."""
        data = DispatchInput(data=request.data)
        data.is_valid(raise_exception=True)
        conversation = None
        if data.validated_data.get("conversation"):
            conversation = conversation_for(request.user, data.validated_data["conversation"])
        outcome = dispatch(
            data.validated_data["operation"],
            data.validated_data["entities"],
            context=self.call_context(conversation=conversation),
        )
        return self.outcome_response(outcome)
