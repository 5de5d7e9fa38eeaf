"""benchmarks/throttle.py's per-connection limit: the nginx configuration it writes is one nginx accepts,
with a server per route at the asked rate (the benchmarks' figures rest on it)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from benchmarks.throttle import write_conf


@pytest.mark.skipif(shutil.which("nginx") is None, reason="nginx is not installed (apt-get install nginx-light)")
def test_nginx_accepts_the_per_connection_configuration(tmp_path: Path) -> None:
    conf = write_conf(tmp_path / "nginx", {20401: 5000, 20402: 8080}, 40)
    text = conf.read_text()
    assert text.count("limit_rate 5000k;") == 2
    assert "listen 127.0.0.1:20401;" in text and "proxy_pass http://127.0.0.1:8080;" in text
    done = subprocess.run(["nginx", "-t", "-p", str(tmp_path / "nginx"), "-c", str(conf)], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
