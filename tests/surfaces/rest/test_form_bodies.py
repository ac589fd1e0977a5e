"""A browser form is as welcome as JSON where its flat fields say everything (confirm, cancel, a
message, a token, a job's cancel); every body that cannot be read is refused as JSON with a stable
code, never an empty 400, a 500 or a value silently repaired."""

from __future__ import annotations

import secrets
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from assistant.models import AccessToken, Conversation, Job, Message, PendingAction
from tests.approving import approvals, ask, audit, policies, status_of
from tests.clients import API, client_for
from tests.testapp.models import Order

FORM = "application/x-www-form-urlencoded"


@pytest.fixture
def asked(settings: Any, clerk: Any, order: Order) -> PendingAction:
    """The clerk's approve_order, waiting under confirm_with_reason."""
    policies(settings, guarded="confirm_with_reason")
    return ask(clerk, order)


def url(action: PendingAction, verb: str) -> str:
    return f"{API}/actions/{action.pk}/{verb}/"


def browser(user: Any) -> tuple[Client, str]:
    """A signed-in browser that checks CSRF, and the token its pages would embed."""
    client = client_for(user, Client, enforce_csrf_checks=True)
    token = secrets.token_hex(16)  # a 32-character secret is a valid unmasked token
    client.cookies["csrftoken"] = token
    return client, token


# -- forms that work -------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_form_post_from_the_test_client_confirms_with_its_reason(asked, clerk, order):
    response = client_for(clerk, Client).post(url(asked, "confirm"), {"reason": "month end"})

    assert response.status_code == 200, response.content
    assert response.json()["decision"] == "confirmed"
    assert approvals(order) == 1
    assert audit("approve_order") == [
        ("confirmation_requested", "clerk", ""),
        ("confirmed", "clerk", "month end"),
    ]


@pytest.mark.django_db
def test_an_urlencoded_form_cancels_with_its_reason(asked, clerk, order):
    response = client_for(clerk, Client).post(
        url(asked, "cancel"), "reason=not+today%21", content_type=FORM
    )

    assert response.status_code == 200, response.content
    assert response.json()["decision"] == "cancelled"
    assert status_of(asked) == "cancelled"
    assert approvals(order) == 0
    assert audit("approve_order")[-1] == ("cancelled", "clerk", "not today!")


@pytest.mark.django_db
@pytest.mark.parametrize("encoding", ["urlencoded", "multipart"])
def test_an_html_form_with_its_csrf_field_confirms_from_a_browser_session(
    asked, clerk, order, encoding
):
    client, token = browser(clerk)
    fields = {"csrfmiddlewaretoken": token, "reason": "customer called"}
    if encoding == "urlencoded":
        response = client.post(
            url(asked, "confirm"),
            f"csrfmiddlewaretoken={token}&reason=customer+called",
            content_type=FORM,
        )
    else:
        response = client.post(url(asked, "confirm"), fields)

    assert response.status_code == 200, response.content
    assert response.json()["decision"] == "confirmed"
    assert approvals(order) == 1


@pytest.mark.django_db
def test_a_form_without_the_csrf_field_is_refused_from_a_browser_session(asked, clerk, order):
    client, _ = browser(clerk)

    response = client.post(url(asked, "confirm"), {"reason": "customer called"})

    assert response.status_code == 403
    assert response.json()["code"] == "permission_denied"
    assert "CSRF" in response.json()["detail"]
    assert status_of(asked) == "pending"


@pytest.mark.django_db
def test_a_message_sent_as_a_form_runs_one_turn(plain_user):
    response = client_for(plain_user, Client).post(f"{API}/messages/", {"message": "ping"})

    assert response.status_code == 201, response.content
    assert sorted(Message.objects.values_list("role", flat=True)) == ["assistant", "user"]


@pytest.mark.django_db
def test_a_token_form_may_repeat_its_list_field(reader):
    response = client_for(reader, Client).post(
        f"{API}/tokens/",
        "name=ci&max_risk=safe&operations=list_orders&operations=show_report",
        content_type=FORM,
    )

    assert response.status_code == 201, response.content
    assert sorted(AccessToken.objects.get().operations) == ["list_orders", "show_report"]


@pytest.mark.django_db
def test_an_html_form_holding_only_its_csrf_field_cancels_a_job(plain_user):
    job = Job.objects.create(operation="start_job", function="f.g", user=plain_user)
    client, token = browser(plain_user)

    response = client.post(
        f"{API}/jobs/{job.pk}/cancel/", f"csrfmiddlewaretoken={token}", content_type=FORM
    )

    assert response.status_code == 200, response.content
    assert Job.objects.get(pk=job.pk).status == "cancelled"


@pytest.mark.django_db
def test_htmx_renames_a_conversation_with_a_form_encoded_patch(plain_user):
    conversation = Conversation.objects.create(user=plain_user, title="Old")
    client, token = browser(plain_user)

    response = client.patch(
        f"{API}/conversations/{conversation.pk}/",
        "title=Month+end",
        content_type=FORM,
        headers={"X-CSRFToken": token, "HX-Request": "true"},
    )

    assert response.status_code == 200, response.content
    assert Conversation.objects.get(pk=conversation.pk).title == "Month end"


@pytest.mark.django_db
def test_dispatch_still_takes_json_only_its_entities_are_typed(plain_user):
    response = client_for(plain_user, Client).post(f"{API}/dispatch/", {"operation": "ping"})

    assert response.status_code == 415
    assert response.json()["code"] == "unsupported_media_type"


# -- bodies that cannot be read: JSON refusals with a stable code ----------------------------------


def refused(response: Any) -> tuple[int, str, str]:
    return response.status_code, response["Content-Type"], response.json()["code"]


UNREADABLE = {
    "multipart without a boundary": (b"--x\r\nreason\r\n--x--\r\n", "multipart/form-data"),
    "multipart with a malformed boundary": (
        b"--x--\r\n",
        'multipart/form-data; boundary="a b\x7f"',
    ),
    "a broken % escape": (b"reason=100%+sure", FORM),
    "a %-escape that is not UTF-8": (b"reason=caf%E9", FORM),
    "raw bytes that are not ASCII": ("reason=café".encode(), FORM),
    "multipart that is not UTF-8": (
        b'--b\r\nContent-Disposition: form-data; name="reason"\r\n\r\ncaf\xe9\r\n--b--\r\n',
        "multipart/form-data; boundary=b",
    ),
}


@pytest.mark.django_db
@pytest.mark.parametrize("verb", ["confirm", "cancel"])
@pytest.mark.parametrize(("body", "content_type"), UNREADABLE.values(), ids=UNREADABLE.keys())
def test_an_unreadable_form_body_is_a_json_parse_error(asked, clerk, verb, body, content_type):
    response = client_for(clerk, Client).post(url(asked, verb), body, content_type=content_type)

    assert refused(response) == (400, "application/json", "parse_error"), response.content
    assert status_of(asked) == "pending"


@pytest.mark.django_db
@pytest.mark.parametrize(("body", "content_type"), UNREADABLE.values(), ids=UNREADABLE.keys())
def test_an_unreadable_form_body_from_a_browser_session_is_a_json_parse_error(
    asked, clerk, body, content_type
):
    client, token = browser(clerk)

    response = client.post(
        url(asked, "confirm"), body, content_type=content_type, headers={"X-CSRFToken": token}
    )

    assert refused(response) == (400, "application/json", "parse_error"), response.content
    assert status_of(asked) == "pending"


@pytest.mark.django_db
def test_a_file_where_a_field_is_expected_is_refused_naming_the_field(asked, clerk):
    upload = SimpleUploadedFile("why.txt", b"month end", content_type="text/plain")

    response = client_for(clerk, Client).post(url(asked, "confirm"), {"reason": upload})

    assert refused(response) == (400, "application/json", "invalid")
    assert list(response.json()["errors"]) == ["reason"]
    assert status_of(asked) == "pending"


@pytest.mark.django_db
@pytest.mark.parametrize("encoding", ["urlencoded", "multipart"])
def test_a_field_given_twice_is_refused_not_the_last_one_kept(asked, clerk, encoding):
    client = client_for(clerk, Client)
    if encoding == "urlencoded":
        response = client.post(url(asked, "confirm"), "reason=a&reason=b", content_type=FORM)
    else:
        response = client.post(url(asked, "confirm"), {"reason": ["a", "b"]})

    assert refused(response) == (400, "application/json", "invalid")
    assert response.json()["errors"] == {"reason": ["Given more than once: send it once."]}
    assert status_of(asked) == "pending"


@pytest.mark.django_db
@pytest.mark.parametrize("encoding", ["urlencoded", "multipart"])
def test_a_form_over_the_upload_limit_is_refused_as_json_is(asked, clerk, settings, encoding):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    client = client_for(clerk, Client)
    reason = "x" * 20_000
    if encoding == "urlencoded":
        response = client.post(url(asked, "confirm"), f"reason={reason}", content_type=FORM)
    else:
        response = client.post(url(asked, "confirm"), {"reason": reason})

    assert refused(response) == (413, "application/json", "request_too_large")
    assert status_of(asked) == "pending"


@pytest.mark.django_db
@pytest.mark.parametrize("encoding", ["urlencoded", "multipart"])
def test_a_form_with_too_many_fields_is_a_json_bad_request(asked, clerk, settings, encoding):
    settings.DATA_UPLOAD_MAX_NUMBER_FIELDS = 10
    client = client_for(clerk, Client)
    if encoding == "urlencoded":
        body = "&".join(f"f{n}=1" for n in range(20))
        response = client.post(url(asked, "confirm"), body, content_type=FORM)
    else:
        response = client.post(url(asked, "confirm"), {f"f{n}": "1" for n in range(20)})

    assert refused(response) == (400, "application/json", "bad_request")
    assert status_of(asked) == "pending"
