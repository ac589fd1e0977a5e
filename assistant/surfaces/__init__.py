"""The transports, one thin sibling each (``rest``, ``websocket``, ``agui``, ``mcp``, ``pages``), which never import each other; ``drf`` and ``throttling`` are what they share."""
