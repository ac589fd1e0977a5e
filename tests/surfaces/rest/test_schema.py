"""The OpenAPI document says what the API really answers (schemathesis holds it to that)."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from tests.clients import API, client_for


@pytest.fixture
def document(db: None) -> dict[str, Any]:
    response = APIClient().get(f"{API}/schema/", {"format": "json"})
    assert response.status_code == 200
    return response.json()


def responses(document: dict[str, Any], path: str, method: str) -> dict[str, Any]:
    return document["paths"][f"{API}{path}"][method]["responses"]


def body_schema(response: dict[str, Any]) -> str:
    return response["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]


def component(document: dict[str, Any], name: str) -> dict[str, Any]:
    return document["components"]["schemas"][name]


@pytest.mark.parametrize(
    ("path", "envelope", "rows"),
    [
        ("/conversations/", "PaginatedConversationList", "Conversation"),
        ("/actions/", "PaginatedPendingActionList", "PendingAction"),
        ("/jobs/", "PaginatedJobList", "Job"),
        ("/admin/audit/", "PaginatedAuditEntryList", "AuditEntry"),
        ("/tokens/", "PaginatedAccessTokenList", "AccessToken"),
    ],
)
def test_lists_are_documented_as_the_page_envelopes_they_answer(
    document: dict[str, Any], path: str, envelope: str, rows: str
) -> None:
    ok = responses(document, path, "get")["200"]

    assert body_schema(ok) == envelope
    page = component(document, envelope)
    assert {"next", "previous", "results"} <= set(page["properties"])
    assert page["properties"]["results"]["items"]["$ref"].endswith(f"/{rows}")


def test_the_tool_catalog_is_an_object_holding_tools_in_any_of_the_three_styles(
    document: dict[str, Any],
) -> None:
    assert body_schema(responses(document, "/tools/", "get")["200"]) == "ToolCatalog"
    tools = component(document, "ToolCatalog")["properties"]["tools"]
    assert tools["type"] == "array"
    styles = component(document, "CatalogTool")["oneOf"]
    assert [style["$ref"].rsplit("/", 1)[1] for style in styles] == [
        "Tool",
        "OpenAITool",
        "AnthropicTool",
    ]


def test_every_operation_documents_the_json_error_bodies(document: dict[str, Any]) -> None:
    missing = [
        f"{method.upper()} {path} {status}"
        for path, operations in document["paths"].items()
        for method, operation in operations.items()
        for status in ("400", "401", "403", "404", "429")
        if status not in operation["responses"]
        or body_schema(operation["responses"][status]) != "Error"
    ]

    assert missing == []
    assert component(document, "Error")["required"] == ["code", "detail"]


def test_every_operation_documents_the_503_of_a_database_outage(document: dict[str, Any]) -> None:
    missing = [
        f"{method.upper()} {path}"
        for path, operations in document["paths"].items()
        for method, operation in operations.items()
        if "503" not in operation["responses"]
        or body_schema(operation["responses"]["503"]) not in ("Error", "OutcomeError")
    ]

    assert missing == []


FORMS = ["application/x-www-form-urlencoded", "multipart/form-data"]


@pytest.mark.parametrize(
    ("path", "method", "kinds"),
    [
        ("/actions/{action_id}/confirm/", "post", ["application/json", *FORMS]),
        ("/actions/{action_id}/cancel/", "post", ["application/json", *FORMS]),
        ("/messages/", "post", ["application/json", *FORMS]),
        ("/tokens/", "post", ["application/json", *FORMS]),
        ("/dispatch/", "post", ["application/json"]),
        ("/validation-tasks/", "post", ["application/json"]),
    ],
)
def test_the_bodies_each_operation_reads_are_documented(
    document: dict[str, Any], path: str, method: str, kinds: list[str]
) -> None:
    body = document["paths"][f"{API}{path}"][method]["requestBody"]

    assert sorted(body["content"]) == sorted(kinds)


@pytest.mark.parametrize("path", ["/tokens/", "/conversations/", "/tools/", "/jobs/"])
def test_a_nul_in_any_query_string_gets_the_documented_400(
    document: dict[str, Any], plain_user: Any, path: str
) -> None:
    # a parameter the view never reads too: the refusal comes before the view looks
    response = client_for(plain_user).get(f"{API}{path}", {"page\x00": "2"})

    assert response.status_code == 400
    assert response.json()["code"] == "invalid"
    assert body_schema(responses(document, path, "get")["400"]) == "Error"


@pytest.mark.parametrize("path", ["/actions/{action_id}/confirm/", "/actions/{action_id}/cancel/"])
def test_deciding_an_action_documents_already_decided_and_expired(
    document: dict[str, Any], path: str
) -> None:
    answers = responses(document, path, "post")

    assert body_schema(answers["409"]) == body_schema(answers["410"]) == "OutcomeError"
    assert {"code", "detail", "decision"} <= set(component(document, "OutcomeError")["required"])


def test_nullable_outcome_fields_say_so(document: dict[str, Any]) -> None:
    fields = component(document, "Outcome")["properties"]

    assert all(fields[name].get("nullable") for name in ("code", "errors", "task_id", "audit_id"))


@pytest.mark.parametrize(
    ("request_component", "field"),
    [
        ("MessageInputRequest", "message"),
        ("DispatchInputRequest", "operation"),
        ("ValidationTaskInputRequest", "target"),
        ("AccessTokenInputRequest", "name"),
    ],
)
def test_strings_the_api_refuses_blank_are_documented_non_blank(
    document: dict[str, Any], request_component: str, field: str
) -> None:
    assert component(document, request_component)["properties"][field]["minLength"] == 1


def test_only_a_created_token_documents_its_secret(document: dict[str, Any]) -> None:
    created = responses(document, "/tokens/", "post")["201"]
    revoked = responses(document, "/tokens/{token_id}/", "delete")["200"]

    assert body_schema(created) == "AccessTokenCreated"
    assert "token" in component(document, "AccessTokenCreated")["required"]
    assert body_schema(revoked) == "AccessToken"
    assert "token" not in component(document, "AccessToken")["properties"]
    assert component(document, "AccessTokenInputRequest")["properties"]["expires_in_days"] == {
        **component(document, "AccessTokenInputRequest")["properties"]["expires_in_days"],
        "minimum": 1,
        "maximum": 366,
    }


def test_the_document_is_titled_with_the_distribution_name(document: dict[str, Any]) -> None:
    assert document["info"]["title"] == "django-ops-assistant API"
    assert "django-ops-assistant" in document["info"]["description"]


def test_every_operation_has_a_description_of_its_own(document: dict[str, Any]) -> None:
    operations = [
        (f"{method.upper()} {path}", operation.get("description", ""))
        for path, methods in document["paths"].items()
        for method, operation in methods.items()
    ]
    descriptions = [description for _, description in operations]

    assert all(descriptions), [name for name, text in operations if not text]
    assert len(set(descriptions)) == len(operations), sorted(
        name for name, text in operations if descriptions.count(text) > 1
    )
