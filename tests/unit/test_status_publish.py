"""`up` publishing the status page on the gateway (provision/office_gateway/publish.sh, run here by bash against
the gateway's rendered config and the real HAProxy 2.6): written once, unchanged after (also when only the
time the office cache's figures were read differs), and a page HAProxy refuses (larger than its buffer) taken
back with HAProxy's reason."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from provision.cli.status_publish import publish_script
from provision.status_page.page import LIVE, render_page
from tests.unit.test_roles_office_gateway import haproxy_config
from tests.unit.test_status_page import CACHE_OUTPUT, cache_rows

pytestmark = pytest.mark.skipif(shutil.which("haproxy") is None, reason="needs haproxy (apt-get install haproxy)")
FIXTURE = Path(__file__).parent / "fixtures/status_page/status.json"


def publish(page: Path, config: Path, content: str) -> subprocess.CompletedProcess[str]:
    # on stdin, as the SSH connection sends a script (connection/ssh.py: never in argv)
    return subprocess.run(["bash", "-s"], input=publish_script(str(page), str(config), content), capture_output=True,
                          text=True, timeout=60, check=False)


def test_the_page_is_written_once_then_unchanged_and_a_page_haproxy_refuses_is_taken_back(tmp_path: Path) -> None:
    page = tmp_path / "status" / "index.html"
    config = tmp_path / "haproxy.cfg"
    text = haproxy_config(tmp_path, office_gateway_status_page=str(page))
    config.write_text(text.replace("chroot /var/lib/haproxy", f"chroot {tmp_path}")
                      .replace("/run/haproxy/admin.sock", str(tmp_path / "admin.sock")))
    html = render_page(json.loads(FIXTURE.read_text()), live=LIVE)
    first = publish(page, config, html)
    assert first.returncode == 0 and first.stdout.strip() == "status page written", first.stderr
    assert page.read_text() == html and oct(page.stat().st_mode)[-3:] == "644"
    again = publish(page, config, html)
    assert again.returncode == 0 and again.stdout.strip() == "status page unchanged", again.stderr
    # what HAProxy answers from one buffer of tune.bufsize 131072: a larger page is refused by it
    refused = publish(page, config, html + "<!--" + "x" * 140_000 + "-->")
    assert refused.returncode == 1 and "exceeds the buffer size" in refused.stderr, refused.stderr
    assert page.read_text() == html and sorted(path.name for path in page.parent.iterdir()) == ["index.html"]
    # a value of the page cannot reach the shell: it travels base64-encoded, as one quoted word
    hostile = "$(touch /tmp/owned)'\"`;\n"
    assert publish(page, config, html.replace("</body>", hostile + "</body>")).returncode == 0
    assert hostile in page.read_text() and not Path("/tmp/owned").exists()


def test_an_up_that_reads_the_same_cache_figures_later_leaves_the_page_and_its_time_unchanged(tmp_path: Path) -> None:
    page = tmp_path / "status" / "index.html"
    config = tmp_path / "haproxy.cfg"
    text = haproxy_config(tmp_path, office_gateway_status_page=str(page))
    config.write_text(text.replace("chroot /var/lib/haproxy", f"chroot {tmp_path}")
                      .replace("/run/haproxy/admin.sock", str(tmp_path / "admin.sock")))
    hosts = json.loads(FIXTURE.read_text())
    hosts.pop("here")  # rows without an uptime: the same facts at any time
    hosts["laptop-2"]["uptime_s"] = None
    first = render_page(hosts, 1796230000.0, live=LIVE, caches=cache_rows())
    assert publish(page, config, first).stdout.strip() == "status page written"
    later = render_page(hosts, 1796230600.0, live=LIVE, caches=cache_rows())
    assert later != first
    assert publish(page, config, later).stdout.strip() == "status page unchanged"
    assert page.read_text() == first  # the figures shown with the time they were first read
    more = CACHE_OUTPUT.read_text().replace("unit.nginx=active", "unit.nginx=failed")
    moved = render_page(hosts, 1796230600.0, live=LIVE, caches=cache_rows(more))
    assert publish(page, config, moved).stdout.strip() == "status page written" and page.read_text() == moved
