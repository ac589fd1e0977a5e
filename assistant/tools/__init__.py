"""The built-in tools, one module each; importing this package registers them."""

from . import capabilities  # noqa: F401
