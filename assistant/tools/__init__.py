"""The built-in tools, one module each; importing this package registers them."""

from . import capabilities, llm_validation, task_status  # noqa: F401
