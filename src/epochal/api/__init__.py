"""The user-facing API: environments, streams, functions, source and sink contracts."""
