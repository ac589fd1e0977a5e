"""The dashboard tools, one module each; ``dashboards.assistant_tools`` imports them."""
