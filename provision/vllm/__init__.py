"""The served model's side: unit and argv rendering, readiness, smoke checks, the release record.

Nothing here imports the runner, the CLI or the operations; operations (`vllm_release`,
`vllm_smoke`, `vllm_rollback`) and CLI commands call in.
"""
