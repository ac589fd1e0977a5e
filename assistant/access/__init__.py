"""Who may do what: the permission predicate and its caches, approval policies, bearer tokens, OAuth scopes, credentials."""
