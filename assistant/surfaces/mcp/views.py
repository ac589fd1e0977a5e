"""MCP's HTTP views: the Streamable HTTP endpoint and its OAuth protected-resource metadata.

The SDK is imported only when a request comes (the ``[mcp]`` extra is optional).
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from ...access import oauth


@csrf_exempt  # bearer tokens only: the endpoint never reads a cookie, so there is nothing to forge
async def mcp_endpoint(request: HttpRequest) -> HttpResponse | StreamingHttpResponse:
    """MCP over Streamable HTTP (``transport``), when the ``[mcp]`` extra is installed."""
    try:
        from .transport import serve
    except ImportError:
        return JsonResponse(
            {
                "code": "mcp_not_installed",
                "detail": "The MCP endpoint needs the official SDK: pip install "
                "'django-ops-assistant[mcp]'.",
            },
            status=501,
        )
    return await serve(request)


def mcp_resource_metadata(request: HttpRequest) -> HttpResponse:
    """The MCP endpoint's OAuth protected-resource metadata (RFC 9728), with django-oauth-toolkit."""
    if not oauth.enabled():
        return JsonResponse(
            {
                "code": "oauth_not_installed",
                "detail": "OAuth needs django-oauth-toolkit: pip install 'django-ops-assistant[oauth]' "
                "and add oauth2_provider to INSTALLED_APPS.",
            },
            status=404,
        )
    if request.method not in ("GET", "HEAD", "OPTIONS"):
        refusal = JsonResponse(
            {"code": "method_not_allowed", "detail": "Read this document with GET."}, status=405
        )
        refusal.headers["Allow"] = "GET, HEAD, OPTIONS"
        return refusal
    response: HttpResponse
    if request.method == "OPTIONS":  # a browser's preflight: the client sends MCP-Protocol-Version
        response = HttpResponse(status=204)
        response.headers["Access-Control-Allow-Methods"] = "GET, HEAD, OPTIONS"
        response.headers["Access-Control-Allow-Headers"] = "*"
    else:
        response = JsonResponse(oauth.metadata(request))
    # browser-based MCP clients (the Inspector) discover it too
    response.headers["Access-Control-Allow-Origin"] = "*"
    return response
