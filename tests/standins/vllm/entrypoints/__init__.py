"""Mirror of vLLM's module path so `python3 -m vllm.entrypoints.openai.api_server` works in the image."""
