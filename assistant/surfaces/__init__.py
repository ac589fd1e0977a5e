"""The transports, one thin sibling each (REST, websocket, AG-UI, MCP, pages); they never import each other."""
