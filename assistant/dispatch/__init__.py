"""The one door: call values, the decision steps, execution, the audit writer, confirmation, the catalog."""

from .calls import CallContext, Outcome
from .door import adispatch, dispatch

__all__ = ["CallContext", "Outcome", "adispatch", "dispatch"]
