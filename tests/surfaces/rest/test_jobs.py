"""The jobs REST endpoints: your jobs listed, filtered, shown and cancelled; staff see all."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
from django.utils import timezone

from assistant.models import Job
from tests.clients import API, client_for


@pytest.fixture
def some_jobs(plain_user: Any, make_user: Callable[..., Any]) -> dict[str, Job]:
    """Two of plain_user's jobs (one older, succeeded; one queued) and someone else's."""
    earlier = timezone.now() - dt.timedelta(minutes=5)
    other = make_user("other")
    return {
        "done": Job.objects.create(
            operation="start_job",
            function="f.g",
            user=plain_user,
            status="succeeded",
            result="2 orders",
            progress=100,
            created_at=earlier,
        ),
        "queued": Job.objects.create(operation="start_job", function="f.g", user=plain_user),
        "theirs": Job.objects.create(operation="start_job", function="f.g", user=other),
    }


@pytest.mark.django_db
def test_the_job_list_shows_your_own_jobs_newest_first(plain_user, some_jobs):
    response = client_for(plain_user).get(f"{API}/jobs/")

    assert response.status_code == 200
    body = response.json()
    assert body["count"] == 2
    assert [job["id"] for job in body["results"]] == [
        str(some_jobs["queued"].pk),
        str(some_jobs["done"].pk),
    ]
    done = body["results"][1]
    assert (done["status"], done["progress"], done["result"], done["username"]) == (
        "succeeded",
        100,
        "2 orders",
        "plain",
    )


@pytest.mark.django_db
def test_the_job_list_filters_by_status(plain_user, some_jobs):
    response = client_for(plain_user).get(f"{API}/jobs/", {"status": "succeeded"})

    assert response.status_code == 200
    assert [job["id"] for job in response.json()["results"]] == [str(some_jobs["done"].pk)]


@pytest.mark.django_db
def test_the_job_list_refuses_an_unknown_status(plain_user, some_jobs):
    response = client_for(plain_user).get(f"{API}/jobs/", {"status": "exploded"})

    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid"
    assert set(body["errors"]) == {"status"}


@pytest.mark.django_db
def test_staff_with_view_job_list_everyones_jobs_when_they_ask_for_all(make_user, some_jobs):
    staff = make_user("staff", "assistant.view_job", is_staff=True)
    Job.objects.create(operation="start_job", function="f.g", user=staff)

    mine = client_for(staff).get(f"{API}/jobs/").json()
    everyone = client_for(staff).get(f"{API}/jobs/", {"all": "1"}).json()

    assert mine["count"] == 1
    assert everyone["count"] == 4


@pytest.mark.django_db
def test_a_job_detail_shows_your_job(plain_user, some_jobs):
    job = some_jobs["done"]

    response = client_for(plain_user).get(f"{API}/jobs/{job.pk}/")

    assert response.status_code == 200
    body = response.json()
    assert (body["id"], body["operation"], body["status"], body["result"]) == (
        str(job.pk),
        "start_job",
        "succeeded",
        "2 orders",
    )


@pytest.mark.django_db
def test_someone_elses_job_detail_is_not_found(plain_user, some_jobs):
    response = client_for(plain_user).get(f"{API}/jobs/{some_jobs['theirs'].pk}/")

    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


@pytest.mark.django_db
def test_cancel_through_the_api_cancels_your_queued_job(plain_user, some_jobs):
    job = some_jobs["queued"]

    response = client_for(plain_user).post(f"{API}/jobs/{job.pk}/cancel/")

    assert response.status_code == 200
    assert (response.json()["status"], response.json()["cancel_requested"]) == ("cancelled", True)
    assert Job.objects.get(pk=job.pk).status == "cancelled"


@pytest.mark.django_db
def test_cancel_through_the_api_of_someone_elses_job_is_not_found(plain_user, some_jobs):
    job = some_jobs["theirs"]

    response = client_for(plain_user).post(f"{API}/jobs/{job.pk}/cancel/")

    assert response.status_code == 404
    assert response.json()["code"] == "not_found"
    assert Job.objects.get(pk=job.pk).status == "queued"
