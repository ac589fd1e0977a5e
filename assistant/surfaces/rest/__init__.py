"""The REST API: mount ``assistant.urls`` in the project; one module of views per resource family."""
