"""``commit_changes``: an environment's dashboards exported as files and committed on a branch."""

from __future__ import annotations

from typing import Annotated

from assistant import Length, Prepared, ToolCall, ToolResult, assistant_tool
from assistant.exceptions import InvalidEntities

from .. import repository
from ..models import Dashboard, Environment
from ..references import EnvironmentName, require, resolve_environment


def checked(call: ToolCall, environment: str, branch: str) -> tuple[Environment, str]:
    """The environment and the branch, as the commit needs them (refused before anyone is asked)."""
    env = resolve_environment(environment)
    require(call.user, "view", env)
    repository.require_repository()
    branch = branch.strip()
    if repository.branch_commit(branch) is None:
        raise InvalidEntities(
            {"branch": f"no branch {branch!r}; create it first (create_branch name={branch})"}
        )
    return env, branch


def prepare(
    call: ToolCall,
    environment: str,
    branch: str = repository.DEFAULT_BRANCH,
    message: str | None = None,
) -> Prepared:
    env, branch = checked(call, environment, branch)
    count = Dashboard.objects.filter(environment=env).count()
    return Prepared(
        summary=f"Commit {env.name}'s {count} dashboards as files on branch {branch}",
        entities={"environment": env.slug, "branch": branch, "message": message},
    )


@assistant_tool(
    operation="commit_changes",
    domain="dashboards",
    description=(
        "Export an environment's dashboards as files into the dashboards repository and commit "
        "them on a branch; answers with the commit id and the changed files"
    ),
    risk_level="guarded",
    requires_confirmation=True,
    permission_checks=[("dashboards", "COMMIT")],
    keywords=["commit changes", "commit dashboards", "commit"],
    prepare=prepare,
)
def commit_changes(
    call: ToolCall,
    environment: Annotated[EnvironmentName, "the environment to export (slug or name)"],
    branch: Annotated[str, "the branch to commit on", Length(max=200)] = repository.DEFAULT_BRANCH,
    message: Annotated[str | None, "the commit message", Length(max=2000)] = None,
) -> ToolResult:
    env, branch = checked(call, environment, branch)
    dashboards = list(Dashboard.objects.filter(environment=env).select_related("owner"))
    files = {
        f"{dashboard.slug}.json": repository.export_file(dashboard.as_export())
        for dashboard in dashboards
    }
    commit = repository.commit_files(
        branch,
        files,
        prefix=env.slug,
        message=message or f"Export {len(files)} dashboards of {env.name}",
        user=call.user,
    )
    if commit is None:
        return ToolResult(
            text=f"Nothing to commit: {branch} already holds {env.name}'s {len(files)} dashboards.",
            data={"commit": None, "branch": branch, "environment": env.slug, "files": []},
        )
    changed = [{"status": status, "path": path} for status, path in commit.files]
    lines = [f"  {item['status']} {item['path']}" for item in changed]
    return ToolResult(
        text=(
            f"Committed {len(changed)} changed files of {env.name} on {branch}: "
            f"{commit.sha[:12]}\n" + "\n".join(lines)
        ),
        actions=[{"type": "committed", "branch": branch, "commit": commit.sha}],
        data={"commit": commit.sha, "branch": branch, "environment": env.slug, "files": changed},
    )
