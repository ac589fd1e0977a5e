"""``run_llm_validation``: a validation task over a model or one instance, run at once (ADR step 8 v2)."""

from __future__ import annotations

from typing import Annotated

from django.utils.translation import gettext

from ..core.registry import ToolCall, ToolResult, assistant_tool
from ..models import ValidationRun
from ..validation import ValidationTaskService


@assistant_tool(
    operation="run_llm_validation",
    domain="validation",
    description=(
        "Validate a model's records (or one record) with the validation rules, as a tracked "
        "run in the background"
    ),
    risk_level="guarded",
    permission_checks=[("validation", "RUN")],
    keywords=["run validation", "validate"],
)
def run_llm_validation(
    call: ToolCall,
    target: Annotated[str, "'app_label.Model' or 'app_label.Model:<pk>'"],
    rules: Annotated[list[str] | None, "rule names; default: every rule for the model"] = None,
    name: str | None = None,
) -> ToolResult:
    # The task belongs to the user: its runs validate only the records they may view.
    task = ValidationTaskService.create_task(
        name=name or f"Validation of {target}", target=target, owner=call.user, rules=rules
    )
    run = ValidationTaskService.trigger_run(
        task, ValidationRun.Trigger.ASSISTANT, user=call.user, conversation=call.conversation
    )
    assert run.job is not None
    return ToolResult(
        text=gettext("Validation task %(task)s started (run %(run)s).")
        % {"task": task.pk, "run": run.pk},
        task_id=str(run.job.pk),
        data={"validation_task": task.pk, "run": run.pk, "job": str(run.job.pk)},
    )
