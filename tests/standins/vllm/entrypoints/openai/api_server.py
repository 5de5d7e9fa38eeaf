"""`python3 -m vllm.entrypoints.openai.api_server --model M ...`, the older image entrypoint form."""

import sys

from ...server import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], entry="api_server"))
