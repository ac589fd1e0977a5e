"""Validation tasks and their runs."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.utils.translation import gettext
from drf_spectacular.utils import OpenApiParameter
from rest_framework import exceptions, status
from rest_framework.request import Request
from rest_framework.response import Response

from ...dispatch.confirmation import record_action
from ...models import ValidationRun, ValidationTask
from ...validation import ValidationTaskService
from ..drf.base import AssistantAPIView, extend_schema
from ..drf.parsers import JSON_ONLY
from ..drf.serializers import ValidationRunSerializer, ValidationTaskInput, ValidationTaskSerializer
from .shared import PagePagination, parse_id, query_id


def _tasks_for(user: Any, perm: str = "view") -> QuerySet[ValidationTask]:
    """Validation tasks this user holds ``perm`` on, globally or on the task (guardian)."""
    from guardian.shortcuts import get_objects_for_user

    return get_objects_for_user(
        user, f"assistant.{perm}_validationtask", klass=ValidationTask, accept_global_perms=True
    )


def _task_for(user: Any, task_id: Any) -> ValidationTask:
    """The validation task with this path id that the user may view, or a 404."""
    pk = parse_id(str(task_id))
    task = _tasks_for(user).filter(pk=pk).first() if pk is not None else None
    if task is None:
        raise exceptions.NotFound(gettext("No such validation task."))
    return task


class ValidationTaskListView(AssistantAPIView):
    pagination_class = PagePagination
    parser_classes = JSON_ONLY  # rules, target_filter and schedule are nested JSON

    @extend_schema(
        summary="Validation tasks you may see", responses=ValidationTaskSerializer(many=True)
    )
    def get(self, request: Request) -> Response:
        """Lists the validation tasks the caller may view, globally or per task."""
        tasks = _tasks_for(request.user).select_related("owner", "target_type").order_by("name")
        return self.paginated(tasks, ValidationTaskSerializer)

    @extend_schema(
        summary="Create a validation task (you become its owner: view, change, run)",
        request=ValidationTaskInput,
        responses={201: ValidationTaskSerializer},
    )
    def post(self, request: Request) -> Response:
        """Creates a validation task owned by the caller, who may then view, change and run it."""
        if not request.user.has_perm("assistant.add_validationtask"):
            raise exceptions.PermissionDenied(gettext("You may not create validation tasks."))
        data = ValidationTaskInput(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        task = ValidationTaskService.create_task(
            name=values.get("name") or "",
            target=values["target"],
            owner=request.user,
            rules=values.get("rules"),
            target_filter=values.get("target_filter"),
            schedule=values.get("schedule"),
            enabled=values.get("enabled", True),
        )
        return Response(ValidationTaskSerializer(task).data, status=status.HTTP_201_CREATED)


class ValidationTaskDetailView(AssistantAPIView):
    @extend_schema(summary="One validation task", responses=ValidationTaskSerializer)
    def get(self, request: Request, task_id: int) -> Response:
        """Returns one validation task the caller may view."""
        task = _task_for(request.user, task_id)
        return Response(ValidationTaskSerializer(task).data)


class ValidationTaskRunView(AssistantAPIView):
    @extend_schema(
        summary="Run a validation task now (a job)",
        request=None,
        responses={202: ValidationRunSerializer},
    )
    def post(self, request: Request, task_id: int) -> Response:
        """Starts a run of a validation task as a background job and answers with the job."""
        task = _task_for(request.user, task_id)
        if not _tasks_for(request.user, "run").filter(pk=task.pk).exists():
            raise exceptions.PermissionDenied(gettext("You may not run this validation task."))
        run = ValidationTaskService.trigger_run(task, ValidationRun.Trigger.USER, user=request.user)
        record_action(  # audited as the admin's Run now is
            request,
            "validation_run",
            {"task": task.pk, "run": run.pk},
            domain="validation",
            source="rest",
        )
        run.refresh_from_db()
        return Response(ValidationRunSerializer(run).data, status=status.HTTP_202_ACCEPTED)


class ValidationRunListView(AssistantAPIView):
    pagination_class = PagePagination

    @extend_schema(
        summary="Runs of the validation tasks you may see, newest first",
        parameters=[OpenApiParameter("task", int)],
        responses=ValidationRunSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        """Lists runs of the validation tasks the caller may view, newest first, optionally for one
        task."""
        runs = ValidationRun.objects.filter(task__in=_tasks_for(request.user)).prefetch_related(
            "findings"
        )
        wanted = request.query_params.get("task")
        if wanted:
            runs = runs.filter(task_id=query_id("task", wanted))
        return self.paginated(runs.order_by("-created_at", "-id"), ValidationRunSerializer)
