"""The demo's set_password, the case an outside review found: the new password waits sealed."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.db import connection

from assistant.dispatch.confirmation import confirm_action
from assistant.dispatch.door import dispatch
from tests.example.dashboards_world import World
from tests.example.demo_site import DEMO

NEW_PASSWORD = "Fresh-Pass-4917"


def raw_pending_actions() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM assistant_pendingaction")
        return repr(cursor.fetchall())


@pytest.mark.django_db
def test_a_new_password_waits_sealed_and_is_set_when_confirmed(world: World) -> None:
    entities = {"user_id": world.viewer.pk, "new_password": NEW_PASSWORD}

    asked = dispatch("set_password", entities, user=world.admin, site=DEMO)

    assert asked.decision == "confirmation_requested"
    assert NEW_PASSWORD not in raw_pending_actions()

    confirmed = confirm_action(asked.pending_action.pk, user=world.admin, site=DEMO)

    assert confirmed.decision == "confirmed", confirmed.text
    assert get_user_model().objects.get(pk=world.viewer.pk).check_password(NEW_PASSWORD)
    assert NEW_PASSWORD not in raw_pending_actions()
