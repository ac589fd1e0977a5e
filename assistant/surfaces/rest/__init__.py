"""The REST API: mount ``assistant.urls`` in the project."""
