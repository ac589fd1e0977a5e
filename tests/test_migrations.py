"""The app's migrations describe its models exactly: nothing left for makemigrations to write."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command


@pytest.mark.django_db
def test_the_models_need_no_migration_the_app_does_not_ship() -> None:
    out = StringIO()
    try:
        call_command("makemigrations", "assistant", "--check", "--dry-run", stdout=out)
    except SystemExit as exc:  # --check exits 1 when a migration is missing
        pytest.fail(f"assistant's models changed without a migration:\n{out.getvalue()}")
        raise AssertionError from exc
    assert "No changes detected" in out.getvalue()
