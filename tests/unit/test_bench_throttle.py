"""benchmarks/throttle.py's per-connection limit: the nginx configuration it writes is one nginx accepts,
with a server per route at the asked rate (the benchmarks' figures rest on it)."""

from __future__ import annotations

import shutil
import subprocess
from functools import partial
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


@pytest.mark.skipif(shutil.which("nginx") is None, reason="nginx is not installed (apt-get install nginx-light)")
def test_served_reads_nginx_access_log_and_refetched_counts_a_download_begun_again(tmp_path: Path) -> None:
    """The log nginx itself writes (not a sample): a file fetched whole twice counts once as sent
    again; a resumed part (another Range) does not; a client that goes away logs the bytes it got."""
    import http.server
    import threading
    import time
    import urllib.request

    from benchmarks.throttle import PerConnection, refetched, served
    from tests.lab.net import free_port

    (tmp_path / "www").mkdir()
    (tmp_path / "www/blob").write_bytes(b"x" * 300_000)
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path / "www"))
    upstream = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    upstream.handle_error = lambda *_: None  # type: ignore[method-assign]  # the client that goes away
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    port = free_port(20480, set())
    nginx = PerConnection(tmp_path / "nginx", {port: upstream.server_address[1]}, 40)
    try:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        url = f"http://127.0.0.1:{port}/blob"
        for _ in range(50):  # nginx listening
            try:
                opener.open(url, timeout=5).read()
                break
            except OSError:
                time.sleep(0.1)
        opener.open(url, timeout=5).read()
        opener.open(urllib.request.Request(url, headers={"Range": "bytes=100000-"}), timeout=5).read()
        with opener.open(url, timeout=5) as cut:
            cut.read(1000)  # goes away after a few bytes
    finally:
        nginx.stop()
        upstream.shutdown()
    entries = served(nginx.log)
    whole = [e for e in entries if e.range == "-"]
    assert [e.request for e in entries] == ["GET /blob HTTP/1.1"] * len(entries) and len(whole) >= 3
    assert whole[-3].body_bytes == whole[-2].body_bytes == 300_000 and whole[-3].status == 200
    assert 0 < whole[-1].body_bytes < 300_000  # what the client that went away got
    assert [e.range for e in entries if e.range != "-"] == ["bytes=100000-"]  # its own request, not again
    assert refetched(entries) == {"GET /blob HTTP/1.1": sum(e.body_bytes for e in whole) - 300_000}
    assert served(nginx.log, nginx.log.stat().st_size) == []
