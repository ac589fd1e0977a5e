"""Persistent validation policies and their tracked runs (ADR-0008 step 8, v2).

A ``ValidationTask`` names a target (one instance, or a model and a filter), the rules to run
and a schedule; ``ValidationTaskService.trigger_run`` runs it as a job, and every run stores its
findings with pass/fail/warn counts. Rules are declared once with ``@validation_rule``.
"""

from .builtin_rules import DEFAULT_PROMPT, llm_review, llm_review_options, tool_access_matrix
from .registry import (
    MAX_RULES,
    Outcome,
    RuleRegistry,
    TargetModel,
    ValidationRule,
    Verdict,
    normalise_rules,
    rules,
    validation_rule,
)
from .runs import ValidationTaskService, execute_run, record_run, run_due_validations, settle_run
from .schedules import MAX_CRON, MAX_INTERVAL, next_run, parse_schedule
from .targets import (
    FILTER_LOOKUPS,
    MAX_FILTER_KEYS,
    MAX_FILTER_TEXT,
    MAX_FILTER_VALUES,
    check_target_filter,
    filterable_fields,
    parse_target,
    viewable,
)

__all__ = [
    "DEFAULT_PROMPT",
    "FILTER_LOOKUPS",
    "MAX_CRON",
    "MAX_FILTER_KEYS",
    "MAX_FILTER_TEXT",
    "MAX_FILTER_VALUES",
    "MAX_INTERVAL",
    "MAX_RULES",
    "Outcome",
    "RuleRegistry",
    "TargetModel",
    "ValidationRule",
    "ValidationTaskService",
    "Verdict",
    "check_target_filter",
    "execute_run",
    "filterable_fields",
    "llm_review",
    "llm_review_options",
    "next_run",
    "normalise_rules",
    "parse_schedule",
    "parse_target",
    "record_run",
    "rules",
    "run_due_validations",
    "settle_run",
    "tool_access_matrix",
    "validation_rule",
    "viewable",
]
