"""`python -m vllm serve ...`: the `vllm` command of the stand-in image."""

import sys

from .server import main

sys.exit(main(sys.argv[1:], entry="vllm"))
