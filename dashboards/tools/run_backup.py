"""``run_backup``: archive an environment's dashboards to a file in Django storage, as a job."""

from __future__ import annotations

from typing import Annotated

from assistant import ToolCall, ToolResult, assistant_tool

from ..jobs import back_up_environment
from ..references import EnvironmentName, require, resolve_environment


@assistant_tool(
    operation="run_backup",
    domain="dashboards",
    description=(
        "Back up an environment's dashboards to an archive file in the background "
        "(restore with manage.py restore_dashboards BACKUP_ID)"
    ),
    risk_level="guarded",
    permission_checks=[("dashboards", "BACKUP")],
    keywords=["run backup", "back up", "backup"],
    background=True,
)
def run_backup(
    call: ToolCall,
    environment: Annotated[EnvironmentName, "the environment to back up (slug or name)"],
) -> ToolResult:
    env = resolve_environment(environment)
    require(call.user, "change", env)
    count = env.dashboards.count()
    job = call.jobs.enqueue(back_up_environment, env.pk, call.user.pk)
    return ToolResult(
        text=f"Backing up {env.name}'s {count} dashboards.",
        task_id=str(job.pk),
        data={"environment": env.slug, "job": str(job.pk)},
    )
