"""The `fact optimize` report on a model with work no pattern covers (a LayerNorm, a cumsum) and a
declined match (an RMSNorm before a projection: the opt-in fold), run on the CPU with
--no-compile: the "Left to PyTorch" table in report.md, report.html and report.json (reasons in
full, estimated shares), one REUSE / ADAPT / NEW definition shared by the terminal and the
report, kernel rows in label order, a roofline plot that says it shows bounds only, and
report.html laid out by a real headless browser at 1280 px without horizontal overflow (a
screenshot is kept in the test's tmp folder)."""
from __future__ import annotations

import json
import re
import subprocess
import textwrap
from html.parser import HTMLParser
from pathlib import Path

import pytest

import fact._engine
import fact.plots

from report_browser import find_browser, measure, screenshot
from test_optimize_cli import _env

try:
    ENGINE = fact._engine.engine_path()
except fact._engine.EngineNotFound:  # pragma: no cover - the test command builds it
    ENGINE = None
needs_engine = pytest.mark.skipif(ENGINE is None, reason="no `fact` engine built")

MIXED_MODEL = textwrap.dedent('''
    import torch
    import torch.nn as nn
    import torch.nn.functional as F


    class RMSNorm(nn.Module):
        def __init__(self, hidden, eps=1e-6):
            super().__init__()
            self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))
            self.eps = eps

        def forward(self, x):
            dtype = x.dtype
            h = x.to(torch.float32)
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
            return self.weight * h.to(dtype)


    class Mixed(nn.Module):
        """A projection after an RMSNorm (declined: the fold is opt-in), an MLP (covered), then a
        LayerNorm and a cumsum that no pattern covers, and a last projection."""

        def __init__(self, width, hidden):
            super().__init__()
            self.norm = RMSNorm(width)
            self.inp = nn.Linear(width, width)
            self.fc1 = nn.Linear(width, hidden)
            self.fc2 = nn.Linear(hidden, width)
            self.ln = nn.LayerNorm(width)
            self.out = nn.Linear(width, width)

        def forward(self, x):
            h = self.inp(self.norm(x))
            h = self.fc2(F.gelu(self.fc1(h), approximate="tanh")) + h
            h = torch.cumsum(self.ln(h), dim=1)
            return self.out(h)


    def get_inputs(dtype=torch.float32, device="cpu"):
        return [torch.randn(4, 32, 128, dtype=dtype, device=device)]


    def get_init_inputs():
        return [128, 256]
''')


@pytest.fixture(scope="module")
def optimized(tmp_path_factory):
    """(terminal, out folder) of one CPU `fact optimize --no-compile` run of the mixed model."""
    folder = tmp_path_factory.mktemp("left_to_pytorch")
    (folder / "mixed.py").write_text(MIXED_MODEL)
    out = folder / "out"
    done = subprocess.run([str(ENGINE), "optimize", "mixed.py:Mixed", "--dtype", "bf16", "--no-compile",
                           "-o", str(out)], cwd=folder, capture_output=True, text=True, env=_env(), timeout=900)
    terminal = done.stdout + done.stderr
    assert done.returncode == 0, terminal
    return terminal, out


def _section(markdown: str, heading: str) -> str:
    start = markdown.index(f"\n## {heading}\n")
    end = markdown.find("\n## ", start + 1)
    return markdown[start:end if end != -1 else None]


class _Text(HTMLParser):
    """The visible text of an HTML page, cell by cell."""

    def __init__(self):
        super().__init__()
        self.cells: list[str] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.cells.append("".join(self._cell))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


@needs_engine
def test_left_to_pytorch_lists_declines_and_uncovered_ops_in_md_json_and_html(optimized):
    _, out = optimized
    doc = json.loads((out / "report.json").read_text())
    left = doc["left_to_pytorch"]
    declined = [r for r in left if r["kind"] == "declined"]
    assert declined, left
    rmsnorm = [r for r in declined if "rmsnorm" in r["what"]]
    assert rmsnorm and "opt-in" in rmsnorm[0]["reason"], declined
    uncovered = {r["what"]: r for r in left if r["kind"] == "uncovered"}
    assert any("layer_norm" in op for op in uncovered), sorted(uncovered)
    assert any("cumsum" in op for op in uncovered), sorted(uncovered)
    for row in [rmsnorm[0], *uncovered.values()]:
        assert row["nodes"] and row["est_seconds"] > 0 and 0 < row["est_share"] < 1, row
    for row in left:
        assert row["reason"], row
    assert sum(r["est_share"] for r in left if r["est_share"] is not None) < 1  # the MLP is replaced
    # Views cost nothing and are not listed.
    assert not any(op.startswith(("aten.view", "aten.reshape", "aten._unsafe_view")) for op in uncovered)

    markdown = (out / "report.md").read_text()
    table = _section(markdown, "Left to PyTorch")
    for row in left:
        assert row["reason"].replace("|", "\\|") in table, row["reason"]  # in full, not cut
        assert f"`{row['what']}`" in table
    assert re.search(r"\| `aten\.[a-z_]*cumsum[a-z_.]*` \| uncovered \| .* \| \d+\.\d+ \| \d+\.?\d*% \|", table), table
    # The discovery section is a table now, its reasons in this section only.
    discovery = _section(markdown, "Discovery")
    assert "```" not in discovery and "| # | match |" in discovery
    assert "(see *Left to PyTorch*)" in discovery

    parser = _Text()
    parser.feed((out / "report.html").read_text())
    cells = set(parser.cells)
    for row in left:
        assert row["reason"] in cells, row["reason"]


@needs_engine
def test_one_class_definition_for_the_terminal_and_the_report(optimized):
    terminal, out = optimized
    doc = json.loads((out / "report.json").read_text())
    legend = doc["classification_legend"]
    assert "REUSE = " in legend and "ADAPT = " in legend and "NEW = " in legend
    assert f"class: {legend}" in terminal  # the terminal's legend line
    markdown = (out / "report.md").read_text()
    how_to_read = _section(markdown, "How to read this report")
    bolded = legend
    for word in ("REUSE", "ADAPT", "NEW"):
        bolded = bolded.replace(f"{word} =", f"**{word}** =", 1)
    assert f"- **class** (discovery): {bolded}\n" in how_to_read
    # No second definition anywhere in the report.
    assert markdown.count("REUSE = ") + markdown.count("**REUSE** = ") == 1


@needs_engine
def test_kernel_rows_follow_the_labels(optimized):
    _, out = optimized
    doc = json.loads((out / "report.json").read_text())
    labels = [k["label"] for k in doc["kernels"]]
    assert len(labels) >= 2, labels
    key = [(int(re.match(r"\d+", label).group()), label) for label in labels]
    assert key == sorted(key), labels
    assert [p["label"] for p in doc["roofline"]] == labels
    kernels = _section((out / "report.md").read_text(), "Kernels")
    rows = re.findall(r"^\| (\d+[a-z]?) \|", kernels, re.M)
    assert rows == labels, rows


@needs_engine
def test_roofline_plot_without_a_gpu_says_it_shows_bounds_only(optimized):
    _, out = optimized
    markdown = (out / "report.md").read_text()
    plots = _section(markdown, "Plots")
    assert "(roofline.png)" in plots
    assert fact.plots.ROOFLINE_BOUNDS_ONLY in plots, plots


def test_roofline_figure_carries_the_bounds_only_note(tmp_path, monkeypatch):
    """The note is on the image itself, not only in its caption; a measured point drops it."""
    figures = []
    real = fact.plots._pyplot

    def recording():
        plt = real()

        class Recorder:
            def __getattr__(self, name):
                return getattr(plt, name)

            def subplots(self, *args, **kwargs):
                fig, ax = plt.subplots(*args, **kwargs)
                figures.append(fig)
                return fig, ax

            def close(self, fig):  # kept open for the assertions
                pass
        return Recorder()

    monkeypatch.setattr(fact.plots, "_pyplot", recording)
    point = {"label": "1", "flops": 3e9, "min_bytes": 5e6, "intensity_flop_per_byte": 600.0,
             "compute_ceiling_flops_per_s": 7.5e14, "memory_ceiling_bytes_per_s": 3e12,
             "ridge_flop_per_byte": 250.0, "bound_seconds": 4e-6}
    caption = fact.plots.plot_roofline({"roofline": [point], "device_profile": {"name": "H100"}}, tmp_path / "a.png")
    texts = [t.get_text() for t in figures[-1].axes[0].texts] + [figures[-1].axes[0].get_title()]
    assert fact.plots.ROOFLINE_BOUNDS_ONLY in caption
    assert any(fact.plots.ROOFLINE_BOUNDS_ONLY in t for t in texts), texts
    assert any(fact.plots.ROOFLINE_BOUNDS_ONLY_WHY in t for t in texts), texts
    measured = dict(point, achieved_flops_per_s=5e14)
    caption = fact.plots.plot_roofline({"roofline": [measured], "device_profile": {"name": "H100"}}, tmp_path / "b.png")
    texts = [t.get_text() for t in figures[-1].axes[0].texts] + [figures[-1].axes[0].get_title()]
    assert fact.plots.ROOFLINE_BOUNDS_ONLY not in caption
    assert not any(fact.plots.ROOFLINE_BOUNDS_ONLY in t for t in texts), texts


@needs_engine
def test_report_html_fits_1280_px_in_a_real_browser(optimized, tmp_path):
    browser = find_browser()
    if browser is None:
        pytest.skip("no headless Chromium found (FACT_CHROMIUM, or `chromium` on PATH; scripts/setup.sh "
                    "installs Debian's chromium): the report's layout was not checked in a browser")
    _, out = optimized
    page = out / "report.html"
    shot = screenshot(browser, page, tmp_path / "report-1280.png")
    print(f"screenshot: {shot}")
    assert shot.read_bytes()[:4] == b"\x89PNG"
    layout = measure(browser, page, tmp_path)
    assert layout["clientWidth"] == 1280, layout["clientWidth"]
    assert layout["scrollWidth"] <= layout["clientWidth"], layout
    assert "Left to PyTorch" in layout["headings"], layout["headings"]
    assert any(b["tag"] == "table" and "left to PyTorch" in b["text"] for b in layout["boxes"]), layout["boxes"]
    for box in layout["boxes"]:
        assert box["scrollWidth"] <= box["clientWidth"], box
        assert box["right"] <= layout["clientWidth"], box


def test_the_browser_check_catches_an_overflowing_page(tmp_path):
    """The measure fails a page that is too wide: a configuration no CSS lets break."""
    browser = find_browser()
    if browser is None:
        pytest.skip("no headless Chromium found (FACT_CHROMIUM, or `chromium` on PATH)")
    page = tmp_path / "wide.html"
    page.write_text("<!doctype html><html><body><table><tr><td style='white-space:nowrap'>" + "x" * 400 +
                    "</td></tr></table></body></html>")
    layout = measure(browser, page, tmp_path)
    assert layout["scrollWidth"] > layout["clientWidth"]
    assert layout["boxes"][0]["right"] > layout["clientWidth"]
    # The report's own stylesheet makes the same cell fit.
    html = fact.plots.markdown_to_html("| config |\n|---|\n| " + "x" * 400 + " |\n", tmp_path, "t")
    page.write_text(html)
    layout = measure(browser, page, tmp_path)
    assert layout["scrollWidth"] <= layout["clientWidth"], layout
