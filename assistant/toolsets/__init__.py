"""Ready-made toolsets; register one (or a subclass) with ``@register_toolset`` to enable it."""
