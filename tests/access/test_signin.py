"""The app's sign-in page locks out guessing: per account and per client address, alike for
usernames that exist and those that do not, answered 429 with when to try again."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.cache import cache
from django.test import Client

LOGIN = "/assistant/login/"
PASSWORD = "the right one"
LOCKED = "Too many failed sign-in attempts. Try again in 15 minutes."


@pytest.fixture(autouse=True)
def _fresh_counts() -> Iterator[None]:
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def admin(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user("admin", password=PASSWORD)


def sign_in(username: str, password: str, address: str = "10.0.0.1") -> Any:
    return Client().post(LOGIN, {"username": username, "password": password}, REMOTE_ADDR=address)


def statuses(username: str, count: int, address: str = "10.0.0.1") -> list[int]:
    return [sign_in(username, "wrong", address).status_code for _ in range(count)]


@pytest.mark.django_db
def test_thirty_wrong_passwords_are_locked_out_from_the_fifth_with_when_to_try_again(admin):
    answers = [sign_in("admin", f"guess {n}") for n in range(30)]

    assert [answer.status_code for answer in answers] == [200] * 4 + [429] * 26
    assert answers[4].headers["Retry-After"] == "900"
    assert LOCKED in answers[4].content.decode()
    assert "Wrong username or password." in answers[3].content.decode()


@pytest.mark.django_db
def test_the_right_password_during_the_lock_does_not_sign_in(admin):
    statuses("admin", 5)

    answer = sign_in("admin", PASSWORD)

    assert answer.status_code == 429
    assert LOCKED in answer.content.decode()
    assert "_auth_user_id" not in answer.wsgi_request.session


@pytest.mark.django_db
def test_an_unknown_username_is_answered_exactly_like_a_known_one(admin):
    known = [sign_in("admin", "wrong") for _ in range(6)]
    unknown = [sign_in("nobody", "wrong", address="10.0.0.2") for _ in range(6)]

    def seen(answer: Any) -> tuple[int, str | None, list[str]]:
        notices = re.findall(r'<p class="notice"[^>]*>(.*?)</p>', answer.content.decode())
        return answer.status_code, answer.headers.get("Retry-After"), notices

    assert [seen(answer) for answer in known] == [seen(answer) for answer in unknown]
    assert [answer.status_code for answer in unknown] == [200] * 4 + [429] * 2
    assert LOCKED in unknown[5].content.decode()


@pytest.mark.django_db
def test_a_locked_account_leaves_other_accounts_at_that_address_alone(admin, django_user_model):
    django_user_model.objects.create_user("alice", password=PASSWORD)
    statuses("admin", 5)

    answer = sign_in("alice", PASSWORD)

    assert (answer.status_code, answer.headers["Location"]) == (302, "/assistant/")


@pytest.mark.django_db
def test_a_locked_account_stays_locked_from_any_address(admin):
    statuses("admin", 5, address="10.0.0.1")

    assert sign_in("Admin", PASSWORD, address="10.9.9.9").status_code == 429


@pytest.mark.django_db
def test_one_address_guessing_many_accounts_is_locked_out_other_addresses_are_not(admin, settings):
    settings.ASSISTANT = {**settings.ASSISTANT, "LOGIN_FAILURES_PER_ADDRESS": 6}
    for name in ("bob", "carol", "dave"):
        statuses(name, 2, address="10.0.0.66")

    assert sign_in("admin", PASSWORD, address="10.0.0.66").status_code == 429
    assert sign_in("admin", PASSWORD, address="10.0.0.7").status_code == 302


@pytest.mark.django_db
def test_the_lock_ends_after_login_lockout_and_counting_starts_again(admin, settings):
    settings.ASSISTANT = {**settings.ASSISTANT, "LOGIN_LOCKOUT": 0.5}
    assert statuses("admin", 5)[-1] == 429

    time.sleep(0.6)

    assert sign_in("admin", PASSWORD).status_code == 302
    assert statuses("admin", 4) == [200] * 4


@pytest.mark.django_db
def test_signing_in_forgets_the_accounts_failures(admin):
    statuses("admin", 4)
    assert sign_in("admin", PASSWORD).status_code == 302

    assert statuses("admin", 4) == [200] * 4


@pytest.mark.django_db
def test_none_turns_the_counting_off(admin, settings):
    settings.ASSISTANT = {
        **settings.ASSISTANT,
        "LOGIN_FAILURES_PER_ACCOUNT": None,
        "LOGIN_FAILURES_PER_ADDRESS": None,
    }

    assert set(statuses("admin", 25)) == {200}
    assert sign_in("admin", PASSWORD).status_code == 302


@pytest.mark.django_db
def test_the_admins_sign_in_page_routed_to_admin_login_view_is_locked_out_alike(admin):
    """The admin's own page counts nothing: a project routes ``admin/login/`` to ours."""
    admin.is_staff = True
    admin.save()

    def admin_sign_in(password: str) -> Any:
        return Client().post(
            "/admin/login/?next=/admin/",
            {"username": "admin", "password": password},
            REMOTE_ADDR="10.0.0.9",
        )

    answers = [admin_sign_in("wrong") for _ in range(6)]
    right = admin_sign_in(PASSWORD)

    assert [a.status_code for a in answers] == [200] * 4 + [429] * 2
    assert LOCKED in answers[-1].content.decode()  # in the admin's own template
    assert "Django administration" in answers[-1].content.decode()
    assert (right.status_code, right.headers["Retry-After"]) == (429, "900")
    cache.clear()
    signed_in = admin_sign_in(PASSWORD)
    assert (signed_in.status_code, signed_in.headers["Location"]) == (302, "/admin/")
