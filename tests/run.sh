#!/usr/bin/env bash
# The project's test command: installs what the tests need (Debian packages for the lab, the
# project and its test extras in .venv), starts dockerd if needed, runs ruff, the unit tests and
# the end-to-end tests against real lab hosts. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

bash tests/lab/install-host-packages.sh
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/pip install -q --disable-pip-version-check -e '.[test]'
.venv/bin/ruff check .
exec .venv/bin/python -m pytest -ra "$@"
