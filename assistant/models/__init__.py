"""The app's models, one module per concept; every model is importable from here."""

# In the order the models were declared when they were one module (the app registry's order:
# a fresh database gets the same content type and permission rows as before).
from .tools import Tool  # noqa: I001
from .conversations import Conversation, Message
from .processes import ServerProcess
from .actions import CLOCK_MARGIN, PendingAction, PendingActionQuerySet, entities_digest
from .audit import AuditEntry, AuditQuerySet
from .jobs import Job, JobQuerySet
from .validation import ValidationFinding, ValidationRun, ValidationTask
from .tokens import AccessToken, AccessTokenQuerySet
from .budgets import BudgetReservation, BudgetUsage

__all__ = [
    "CLOCK_MARGIN",
    "AccessToken",
    "AccessTokenQuerySet",
    "AuditEntry",
    "AuditQuerySet",
    "BudgetReservation",
    "BudgetUsage",
    "Conversation",
    "Job",
    "JobQuerySet",
    "Message",
    "PendingAction",
    "PendingActionQuerySet",
    "ServerProcess",
    "Tool",
    "ValidationFinding",
    "ValidationRun",
    "ValidationTask",
    "entities_digest",
]
