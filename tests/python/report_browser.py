"""Rendering an HTML report in a real headless browser (Chromium) for the report tests: the
page's and each table's and preformatted block's widths as laid out at a given window width, the
section headings, and a screenshot.

The browser is found, not downloaded: $FACT_CHROMIUM, else `chromium`, `chromium-browser`,
`google-chrome` or `chrome` on PATH (scripts/setup.sh installs Debian's `chromium`). Chromium is
driven from its command line: `--dump-dom` returns the page after a measuring script ran in it,
`--screenshot` writes the PNG."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

NAMES = ("chromium", "chromium-browser", "google-chrome", "chrome")

# Runs at the end of the page, after layout: every measure the tests assert on, written into the
# page (a <pre> that --dump-dom returns) after it was taken.
MEASURE = """<script>
(function () {
  const root = document.documentElement;
  const viewport = root.clientWidth;
  const boxes = [];
  for (const e of document.querySelectorAll("table, pre")) {
    const rect = e.getBoundingClientRect();
    boxes.push({tag: e.tagName.toLowerCase(), scrollWidth: e.scrollWidth, clientWidth: e.clientWidth,
                right: rect.right, text: (e.textContent || "").trim().slice(0, 80)});
  }
  const result = {scrollWidth: root.scrollWidth, clientWidth: viewport, boxes: boxes,
                  headings: Array.from(document.querySelectorAll("h2")).map(h => h.textContent)};
  const out = document.createElement("pre");
  out.id = "fact-browser-measure";
  out.style.display = "none";
  out.textContent = JSON.stringify(result);
  document.body.appendChild(out);
})();
</script>"""


def find_browser() -> str | None:
    """The Chromium executable to use, or None."""
    chosen = os.environ.get("FACT_CHROMIUM")
    if chosen:
        return chosen if Path(chosen).is_file() else shutil.which(chosen)
    for name in NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def _run(browser: str, width: int, height: int, extra: list[str], url: str) -> subprocess.CompletedProcess:
    argv = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--hide-scrollbars", f"--window-size={width},{height}", *extra, url]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def measure(browser: str, page: Path, work: Path, width: int = 1280, height: int = 900) -> dict:
    """Lays `page` out at `width` and returns {"scrollWidth", "clientWidth" (the document's),
    "boxes": [{"tag", "scrollWidth", "clientWidth", "right", "text"} per table and pre],
    "headings": [h2 texts]}."""
    html = page.read_text()
    measured = work / f"measure-{page.name}"
    measured.write_text(html.replace("</body>", MEASURE + "</body>") if "</body>" in html else html + MEASURE)
    done = _run(browser, width, height, ["--dump-dom"], measured.resolve().as_uri())
    found = re.search(r'<pre id="fact-browser-measure"[^>]*>(.*?)</pre>', done.stdout, re.S)
    if not found:
        raise RuntimeError(f"{browser} returned no measurement (exit {done.returncode}): {done.stderr[-2000:]}")
    import html as html_module
    return json.loads(html_module.unescape(found.group(1)))


def screenshot(browser: str, page: Path, png: Path, width: int = 1280, height: int = 2400) -> Path:
    """A PNG of the page's top `height` pixels at `width`."""
    done = _run(browser, width, height, [f"--screenshot={png}"], page.resolve().as_uri())
    if not png.is_file():
        raise RuntimeError(f"{browser} wrote no screenshot (exit {done.returncode}): {done.stderr[-2000:]}")
    return png
