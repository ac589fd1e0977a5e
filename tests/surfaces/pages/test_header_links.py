"""The chat page's header: home, the admin for staff (where the project has one), and sign-out."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client, override_settings

pytestmark = pytest.mark.django_db


def page_for(user: Any) -> str:
    client = Client()
    client.force_login(user)
    response = client.get("/assistant/")
    assert response.status_code == 200
    return response.content.decode()


def test_staff_see_a_link_to_the_admin_others_do_not(
    plain_user: Any, make_user: Callable[..., Any]
) -> None:
    assert '<a href="/admin/">Admin</a>' in page_for(make_user("operator", is_staff=True))
    assert ">Admin</a>" not in page_for(plain_user)


def test_without_home_url_there_is_no_home_link(plain_user: Any) -> None:
    assert ">Home</a>" not in page_for(plain_user)  # a hard-coded "/" 404s in a fresh project


@pytest.mark.parametrize(
    ("home_url", "href"),
    [
        ("/", "/"),
        ("https://ops.example.com/", "https://ops.example.com/"),
        ("admin:index", "/admin/"),
    ],
)
def test_home_url_is_the_home_links_path_url_or_url_name(
    plain_user: Any, home_url: str, href: str
) -> None:
    with override_settings(ASSISTANT={"HOME_URL": home_url}):
        assert f'<a href="{href}">Home</a>' in page_for(plain_user)


@override_settings(ROOT_URLCONF="tests.urls_without_admin")
def test_without_the_admin_mounted_staff_get_no_admin_link(make_user: Callable[..., Any]) -> None:
    assert ">Admin</a>" not in page_for(make_user("operator", is_staff=True))


def test_signing_out_takes_a_post_with_its_csrf_token(plain_user: Any) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(plain_user)
    page = client.get("/assistant/").content.decode()
    token = page.split('name="csrfmiddlewaretoken" value="', 1)[1].split('"', 1)[0]

    assert client.get("/assistant/logout/").status_code == 405  # a link cannot sign you out
    assert client.post("/assistant/logout/").status_code == 403  # nor a forged form
    response = client.post("/assistant/logout/", {"csrfmiddlewaretoken": token})

    assert (response.status_code, response["Location"]) == (302, "/assistant/login/")
    assert client.get("/assistant/").status_code == 302  # signed out


def test_the_sign_in_page_is_titled_with_the_distribution_name() -> None:
    page = Client().get("/assistant/login/").content.decode()

    assert "<title>Sign in · django-ops-assistant</title>" in page
