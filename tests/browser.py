"""A real headless Chromium for the status page's tests: what it drew, and a screenshot kept under
tests/artifacts/ (gitignored) as evidence. Skips with the reason when no Chromium is installed."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shutil
import subprocess
import time
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


# The same count, for a page held open (LiveBrowser.evaluate): painted pixels per chart in page order.
PAINTED = """Array.from(document.querySelectorAll('.chart')).map(function (box) {
  var canvas = box.querySelector('.uplot canvas');
  if (!canvas) { return -1; }
  var pixels = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data, painted = 0;
  for (var i = 3; i < pixels.length; i += 4) { if (pixels[i] > 0) { painted++; } }
  return painted;
})"""


# Per live chart (page.js): [its key, the samples it was given, their largest value].
SAMPLES = """Array.from(document.querySelectorAll('.chart.live')).map(function (box) {
  return [box.dataset.chart, Number(box.dataset.samples || 0), Number(box.dataset.max || 0)];
})"""


class LiveBrowser:
    """A headless Chromium held open on a page, driven over the DevTools protocol on a pipe
    (--remote-debugging-pipe: NUL-terminated JSON on fds 3 and 4,
    https://chromedevtools.github.io/devtools-protocol/): the live page is watched in real time,
    where --dump-dom's virtual time would skip the polls."""

    def __init__(self, folder: Path, width: int, height: int) -> None:
        to_browser, self._in = os.pipe()
        self._out, from_browser = os.pipe()

        def fds() -> None:  # in the child: the protocol's fds 3 (commands) and 4 (answers)
            reading, writing = os.dup(to_browser), os.dup(from_browser)
            os.dup2(reading, 3)
            os.dup2(writing, 4)

        self.process = subprocess.Popen(
            [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--remote-debugging-pipe",
             f"--window-size={width},{height}", f"--user-data-dir={folder / 'chromium-profile'}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=fds, pass_fds=(3, 4))
        os.close(to_browser)
        os.close(from_browser)
        self._buffer, self._next, self.session = b"", 0, ""

    def send(self, method: str, session: str = "", **params: object) -> dict:
        self._next += 1
        message = {"id": self._next, "method": method, "params": params, **({"sessionId": session} if session else {})}
        os.write(self._in, json.dumps(message).encode() + b"\0")
        while True:
            while b"\0" not in self._buffer:
                chunk = os.read(self._out, 1 << 20)
                assert chunk, "chromium closed its DevTools pipe"
                self._buffer += chunk
            line, self._buffer = self._buffer.split(b"\0", 1)
            answer = json.loads(line)
            if answer.get("id") == self._next:
                assert "error" not in answer, answer
                return answer["result"]

    def open(self, url: str) -> None:
        target = self.send("Target.createTarget", url=url)["targetId"]
        self.session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]

    def evaluate(self, expression: str) -> object:
        answer = self.send("Runtime.evaluate", self.session, expression=expression, returnByValue=True)
        return answer["result"].get("value")

    def wait_for(self, expression: str, timeout: float, every: float = 0.02) -> float:
        """Seconds until `expression` is true in the page (polled every `every` s)."""
        started = time.monotonic()
        while not self.evaluate(expression):
            assert time.monotonic() - started < timeout, f"not true after {timeout} s: {expression}"
            time.sleep(every)
        return time.monotonic() - started

    def screenshot(self, name: str) -> Path:
        ARTIFACTS.mkdir(exist_ok=True)
        shot = ARTIFACTS / name
        shot.write_bytes(base64.b64decode(self.send("Page.captureScreenshot", self.session, format="png")["data"]))
        return shot

    def close(self) -> None:
        with contextlib.suppress(AssertionError, OSError):
            self.send("Browser.close")
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._in)
        os.close(self._out)
