"""The one door: call values, the decision steps, execution, the audit writer, confirmation, the catalog."""

from .door import CallContext, Outcome, adispatch, dispatch

__all__ = ["CallContext", "Outcome", "adispatch", "dispatch"]
