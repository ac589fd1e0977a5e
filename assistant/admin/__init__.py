"""Staff views of what the assistant did: audit, conversations, approvals, jobs, validation, tools,
and the users' access tokens.

Audit entries are read-only for everyone; the changelists avoid full-table counts and
per-page DISTINCT scans (filter choices come from the registry and the models' choices), so
they stay fast on a large history.
"""

from . import audit, conversations, jobs, tokens, tools, validation

__all__ = ["audit", "conversations", "jobs", "tokens", "tools", "validation"]
