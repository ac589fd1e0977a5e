"""System checks with ids, one module per area; importing this package registers them all."""

from .approvals import check_approval_policies, policy_errors
from .oauth import check_oauth, oauth_problems
from .permissions import check_tool_permissions, tool_errors
from .services import (
    IN_MEMORY_LAYER,
    INLINE_TASK_BACKENDS,
    REDIS_LAYER_PREFIX,
    check_event_log,
    check_services,
    event_log_problems,
    service_problems,
)
from .settings import check_planner, check_settings, check_turn_liveness
from .sql import check_sql_inspector_roles, sql_role_warnings
from .telemetry import check_telemetry
from .validation import check_validation_rules
from .websocket import ASGI_SERVER_APPS, check_websocket_served, websocket_problems

__all__ = [
    "ASGI_SERVER_APPS",
    "INLINE_TASK_BACKENDS",
    "IN_MEMORY_LAYER",
    "REDIS_LAYER_PREFIX",
    "check_approval_policies",
    "check_event_log",
    "check_oauth",
    "check_planner",
    "check_services",
    "check_settings",
    "check_sql_inspector_roles",
    "check_telemetry",
    "check_tool_permissions",
    "check_turn_liveness",
    "check_validation_rules",
    "check_websocket_served",
    "event_log_problems",
    "oauth_problems",
    "policy_errors",
    "service_problems",
    "sql_role_warnings",
    "tool_errors",
    "websocket_problems",
]
