"""MCP: the protocol mapping, its session manager, its HTTP views; the stdio entry is ``manage.py assistant_mcp``."""
