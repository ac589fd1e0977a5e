"""The dashboards domain's tools (ADR-0008), one module each under ``dashboards/tools/``."""

from .tools import (  # noqa: F401
    commit_changes,
    create_branch,
    deploy_dashboard,
    execute_migration,
    get_health_summary,
    run_backup,
    run_llm_documentation,
    search_dashboards,
)
