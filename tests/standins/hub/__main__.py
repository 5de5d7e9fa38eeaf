"""`python -m tests.standins.hub --port P --repo ORG/NAME --file-size-mib 8 --throttle-kib 0`."""

import sys

from .cli import main

sys.exit(main())
