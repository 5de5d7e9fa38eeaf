"""A real headless Chromium for the status page's tests: what it drew, and a screenshot kept under
tests/artifacts/ (gitignored) as evidence. Skips with the reason when no Chromium is installed."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ARTIFACTS = Path(__file__).resolve().parent / "artifacts"

# Appended to a copy of the page for the tests only: counts each chart canvas's painted pixels (what
# the chart library drew, not what the page says it did) into the title, which --dump-dom shows.
PROBE = """<script>
setTimeout(function () {
  var report = Array.from(document.querySelectorAll('.chart')).map(function (box) {
    var canvas = box.querySelector('.uplot canvas');
    if (!canvas) { return box.getAttribute('data-host-index') + ':none'; }
    var pixels = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data, painted = 0;
    for (var i = 3; i < pixels.length; i += 4) { if (pixels[i] > 0) { painted++; } }
    return box.getAttribute('data-host-index') + ':' + painted;
  });
  document.title = 'probe ' + report.join(' ');
}, 500);
</script>"""


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if found := shutil.which(name):
            return found
    why = "no headless Chromium on this machine: `apt-get install -y chromium` (Debian) to run this test"
    if os.environ.get("CI"):  # the test command installs it (tests/lab/install-host-packages.sh): never a silent skip
        pytest.fail(why)
    pytest.skip(why)


def headless(browser: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--virtual-time-budget=3000", *args], capture_output=True, text=True, timeout=120)


def load(html: str, folder: Path, width: int, height: int, screenshot: str) -> tuple[str, list[str]]:
    """Open the page in Chromium at width x height: (the DOM after its scripts ran, painted pixels per
    chart in page order: a count or 'none'); the screenshot is kept as tests/artifacts/<screenshot>."""
    browser = chromium()
    page = folder / "status.html"
    page.write_text(html.replace("</body>", PROBE + "</body>"))
    dom = headless(browser, f"--window-size={width},{height}", "--dump-dom", page.as_uri())
    title = re.search(r"<title>probe ([^<]*)</title>", dom.stdout)
    assert title, dom.stdout[-2000:] + dom.stderr[-2000:]
    painted = [entry.split(":")[1] for entry in title[1].split()]
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / screenshot
    shot.unlink(missing_ok=True)
    done = headless(browser, f"--window-size={width},{height}", f"--screenshot={shot}", page.as_uri())
    assert shot.exists() and shot.stat().st_size > 10_000, done.stderr[-2000:]
    return dom.stdout, painted
