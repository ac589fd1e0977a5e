"""A user's bearer tokens: issued, listed, revoked."""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext
from rest_framework import exceptions, status
from rest_framework.request import Request
from rest_framework.response import Response

from ...access.caches import access_for
from ...access.predicate import denials
from ...access.tokens import issue
from ...core.registry import registry
from ...dispatch.confirmation import record_action
from ...exceptions import SessionRequired, UnknownTokenOperations
from ...models import AccessToken
from ..drf.base import AssistantAPIView, BrowserSessionAuthentication, extend_schema
from ..drf.serializers import AccessTokenCreatedSerializer, AccessTokenInput, AccessTokenSerializer
from .shared import PagePagination, parse_id


def _token_for(user: Any, token_id: Any) -> AccessToken:
    """One of the user's tokens by path id; someone else's is as missing as no token at all."""
    pk = parse_id(str(token_id))
    token = AccessToken.objects.owned_by(user).filter(pk=pk).first() if pk is not None else None
    if token is None:
        raise exceptions.NotFound(gettext("No such token of yours."))
    return token


class AccessTokenListView(AssistantAPIView):
    pagination_class = PagePagination

    @extend_schema(
        summary="Your personal access tokens, newest first (their secrets are never shown again)",
        responses=AccessTokenSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        """Lists the caller's personal access tokens without their secrets."""
        tokens = AccessToken.objects.owned_by(request.user).order_by("-created_at", "-id")
        return self.paginated(tokens, AccessTokenSerializer)

    @extend_schema(
        summary="Create a personal access token (from a browser session; the answer holds its "
        "secret, this once)",
        request=AccessTokenInput,
        responses={201: AccessTokenCreatedSerializer},
    )
    def post(self, request: Request) -> Response:
        """Creates a personal access token from a browser session and answers with its secret this
        one time."""
        if not isinstance(request.successful_authenticator, BrowserSessionAuthentication):
            raise SessionRequired()
        data = AccessTokenInput(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        wanted = list(dict.fromkeys(values.get("operations") or []))
        if wanted:
            # the user's tools by permission (a toolset that is down now still counts)
            access = access_for(request.user)
            yours = {tool.operation for tool in registry if not denials(access, tool)}
            unknown = [name for name in wanted if name not in yours]
            if unknown:
                raise UnknownTokenOperations(unknown)
        token, secret = issue(
            request.user,
            name=values["name"],
            expires_at=values.get("expires_at"),
            max_risk=values["max_risk"],
            operations=wanted,
        )
        record_action(
            request,
            "create_access_token",
            {"token": token.pk, "name": token.name},
            domain="tokens",
            source="rest",
        )
        body = {**AccessTokenSerializer(token).data, "token": secret}
        return Response(body, status=status.HTTP_201_CREATED)


class AccessTokenDetailView(AssistantAPIView):
    @extend_schema(
        summary="Revoke one of your tokens (at once, for good)",
        responses={200: AccessTokenSerializer},
    )
    def delete(self, request: Request, token_id: int) -> Response:
        """Revokes one of the caller's tokens at once and for good."""
        token = _token_for(request.user, token_id)
        if token.revoke():
            bearer = self.bearer()
            record_action(
                request,
                "revoke_access_token",
                {"token": token.pk, "name": token.name},
                domain="tokens",
                source="rest",
                client=bearer.name if bearer else "",
            )
        return Response(AccessTokenSerializer(token).data)
