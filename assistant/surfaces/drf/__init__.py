"""The DRF plumbing the HTTP transports (REST, AG-UI) share: authentication, request bodies,
response shapes, errors, the schema and the base view; it is not a transport itself.
"""
