import pytest

from assistant.dispatch.door import dispatch


@pytest.mark.django_db
def test_ping_runs_and_is_audited(plain_user):
    outcome = dispatch("ping", user=plain_user)
    assert outcome.decision == "executed"
    assert outcome.text == "pong for plain"
    assert outcome.audit_id is not None
