"""A user's background jobs: listed, read, cancelled."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter
from rest_framework import exceptions
from rest_framework.request import Request
from rest_framework.response import Response

from ...dispatch.confirmation import stop_job
from ...jobs import job_for
from ...models import Job
from ..drf.base import AssistantAPIView, extend_schema
from ..drf.serializers import JobSerializer
from .shared import PagePagination


class JobListView(AssistantAPIView):
    pagination_class = PagePagination

    @extend_schema(
        summary="Your background jobs (staff with assistant.view_job: everyone's with ?all=1)",
        parameters=[
            OpenApiParameter("status", str, enum=list(Job.Status.values)),
            OpenApiParameter("all", bool),
        ],
        responses=JobSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        """Lists the caller's background jobs, or everyone's with all=1 for holders of
        assistant.view_job."""
        jobs = Job.objects.select_related("user")
        if request.query_params.get("all") in ("1", "true"):
            jobs = jobs.visible_to(request.user)
        else:
            jobs = jobs.owned_by(request.user)
        wanted = request.query_params.get("status")
        if wanted:
            if wanted not in Job.Status.values:
                raise exceptions.ValidationError({"status": "unknown status"})
            jobs = jobs.filter(status=wanted)
        return self.paginated(jobs.order_by("-created_at"), JobSerializer)


class JobDetailView(AssistantAPIView):
    @extend_schema(summary="One job: status, progress, result", responses=JobSerializer)
    def get(self, request: Request, job_id: str) -> Response:
        """Returns one background job with its status, progress and result."""
        return Response(JobSerializer(job_for(request.user, job_id)).data)


class JobCancelView(AssistantAPIView):
    @extend_schema(
        summary="Ask a job to stop (a running one stops at its next check)",
        request=None,
        responses=JobSerializer,
    )
    def post(self, request: Request, job_id: str) -> Response:
        """Asks a background job to stop, audited as cancel_job; a running job stops at its next
        cancellation check."""
        job = stop_job(job_id, context=self.call_context())
        return Response(JobSerializer(job).data)
