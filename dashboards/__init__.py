"""The example project's "dashboards across environments" domain: BI dashboards promoted from dev to
staging to production, versioned in git, operated through the assistant's tools."""
