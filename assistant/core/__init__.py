"""What a tool is: the registry and ``@assistant_tool``, entities, toolsets and lifecycle, cancellation, redaction, storable values; no models, no web framework."""
