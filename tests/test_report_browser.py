"""The HTML report (`--report FILE.html`): self-contained, and rendered by a real headless browser
(Chromium) to a non-blank page with every picture decoded and no console error.

Skips with the reason when Chromium is not installed (`apt-get install chromium`; .ci/run does it)."""

from __future__ import annotations

import base64
import io
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from autoplace.cli import app

CHROMIUM = next((p for p in (shutil.which("chromium"), shutil.which("chromium-browser"), "/usr/bin/chromium")
                 if p and Path(p).exists()), None)
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt-get install -y chromium)")
A = "tp=8,pp=2,zero=1,sp=1,recompute=selective,mbs=1"
B = "tp=2,pp=4,vpp=5,schedule=interleaved,zero=1,sp=1,mbs=1"


def _chromium(tmp: Path, url: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-extensions",
         f"--user-data-dir={tmp / 'profile'}", "--enable-logging=stderr", "--v=0", *extra, url],
        capture_output=True, text=True, timeout=90)


def _console_errors(stderr: str) -> list[str]:
    """Lines where the page logged to the console or threw (Chromium prints them as ...:CONSOLE...)."""
    return [ln for ln in stderr.splitlines() if ":CONSOLE" in ln or "Uncaught" in ln]


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report") / "compare.html"
    r = CliRunner().invoke(app, ["compare", "--model", "13b", "--gpus", "64", "--global-batch", "128", "--plan", A,
                                 "--plan", B, "--report", str(out)])
    assert r.exit_code == 0, r.output
    return out


def test_report_is_self_contained(report):
    text = report.read_text()
    assert text.startswith("<!DOCTYPE html>") and "</html>" in text
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//|file:)""", text), "external resource"
    assert "<script" not in text and "<link" not in text
    imgs = re.findall(r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'", text)
    assert len(imgs) == 4                      # memory, breakdown, two timelines
    for b64 in imgs:
        assert base64.b64decode(b64)[:8] == b"\x89PNG\r\n\x1a\n"
    assert "decides it" in text and "step-time terms" in text


@needs_chromium
def test_detector_catches_console_errors(tmp_path):
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><p>x</p><script>throw new Error('boom')</script></body></html>")
    res = _chromium(tmp_path, bad.as_uri(), "--dump-dom")
    assert any("boom" in ln for ln in _console_errors(res.stderr)), res.stderr[-2000:]


@needs_chromium
def test_report_renders_in_headless_chromium(report, tmp_path):
    from PIL import Image
    shot = tmp_path / "shot.png"
    res = _chromium(tmp_path, report.as_uri(), f"--screenshot={shot}", "--window-size=1280,2000",
                    "--hide-scrollbars")
    assert shot.exists(), res.stderr[-2000:]
    assert _console_errors(res.stderr) == []
    im = np.asarray(Image.open(io.BytesIO(shot.read_bytes())).convert("RGB"))
    assert im.shape[:2] == (2000, 1280)
    colours = len(np.unique(im.reshape(-1, 3), axis=0))
    ink = float(np.mean(np.any(im < 235, axis=2)))
    assert colours > 100 and ink > 0.05, (colours, ink)
    # every embedded picture decodes in the browser: a copy with a probe script writes the natural sizes
    probe = tmp_path / "probe.html"
    probe.write_text(report.read_text().replace(
        "</body>", "<script>window.addEventListener('load',()=>{document.body.setAttribute('data-imgs',"
                   "[...document.images].map(i=>i.naturalWidth+'x'+i.naturalHeight).join(' '))})</script></body>"))
    dom = _chromium(tmp_path, probe.as_uri(), "--dump-dom", "--virtual-time-budget=1000")
    assert _console_errors(dom.stderr) == []
    m = re.search(r'data-imgs="([^"]*)"', dom.stdout)
    assert m, dom.stdout[:500]
    sizes = [tuple(int(x) for x in s.split("x")) for s in m.group(1).split()]
    assert len(sizes) == 4 and all(w > 300 and h > 150 for w, h in sizes), sizes
