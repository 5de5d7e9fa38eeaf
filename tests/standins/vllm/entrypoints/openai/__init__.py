"""Mirror of vLLM's module path (see api_server)."""
