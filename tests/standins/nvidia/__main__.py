"""`python -m tests.standins.nvidia build OUT_DIR --base-url URL` / `serve OUT_DIR --port PORT`."""

from .repo import main

main()
