"""`python -m provision` is the `provision` command."""

import sys

from provision.cli.main import main

sys.exit(main())
