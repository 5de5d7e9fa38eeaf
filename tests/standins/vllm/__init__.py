"""Stand-in for the vLLM OpenAI-compatible server (installed as the package `vllm` in the stand-in image)."""
