"""The self-contained HTML reports (``rlvr-diff weights``, ``rlvr-audit``) opened in a real headless browser.

A copy of each ``report.html`` gets two small scripts: one at the top of ``<head>`` that records
uncaught errors, failed resources and ``console.error`` calls, one at the end of ``<body>`` that,
in the ``load`` event, draws every ``<img>`` on a canvas (a full decode) and writes what it found
(errors, every image's ``complete``/``naturalWidth``/decode result, the number of ``<table>``, the
``<h2>`` headings) as JSON into a ``<pre>``.  Chromium runs headless (``--headless=new --no-sandbox --disable-gpu``,
as root in a container; every host name resolves to nothing, so no network) and prints the DOM
(``--dump-dom``) and its console on stderr (``--enable-logging=stderr``); the test reads both.
A screenshot of each report (1280 px wide) is saved to a path the test prints, and copied to
``$RLVR_SCREENSHOT_DIR`` when set.

The browser: ``$CHROME``, else ``chromium``, ``chromium-browser``, ``google-chrome`` or
``google-chrome-stable`` on PATH; without one the browser tests are skipped (``make browser``
installs Chromium from the distribution's packages).
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from analysis import diff as weight_diff
from analysis import report
from analysis.audit import metrics
from analysis.audit import report as audit_report
from tests.analysis import tiny_checkpoints as tc

BROWSER_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_browser() -> str | None:
    """``$CHROME`` (a name on PATH or a path), else the first of :data:`BROWSER_NAMES` on PATH."""
    env = os.environ.get("CHROME")
    if env:
        return shutil.which(env) or (env if os.path.isfile(env) and os.access(env, os.X_OK) else None)
    return next((p for p in map(shutil.which, BROWSER_NAMES) if p), None)


BROWSER = find_browser()
needs_browser = pytest.mark.skipif(
    BROWSER is None, reason="no headless browser found ($CHROME, or chromium, chromium-browser, google-chrome on "
                            "PATH): run `make browser` to install Chromium from the distribution's packages")

#: first thing in <head>: record every error before the page's own content runs
_CATCH = ("<script>window.__rlvrErrors=[];"
          "window.addEventListener('error',function(e){window.__rlvrErrors.push(e.message?'error: '+e.message:"
          "'resource failed to load: '+((e.target&&e.target.tagName)||'?'))},true);"
          "window.addEventListener('unhandledrejection',function(e){window.__rlvrErrors.push('unhandled rejection: '"
          "+e.reason)});"
          "(function(){var f=console.error;console.error=function(){window.__rlvrErrors.push('console.error: '+"
          "Array.prototype.join.call(arguments,' '));return f.apply(console,arguments)}})();</script>")
#: last thing in <body>: on load (synchronously, before the DOM is dumped) draw every image on a canvas (a
#: full decode) and write the findings into the DOM
_REPORT = ("<script>window.addEventListener('load',function(){var c=document.createElement('canvas').getContext('2d',{willReadFrequently:true});"
           "var imgs=Array.prototype.map.call(document.images,function(i){var ok=false;try{c.drawImage(i,0,0);"
           "c.getImageData(0,0,1,1);ok=i.naturalWidth>0}catch(e){}return {alt:i.alt,complete:i.complete,"
           "width:i.naturalWidth,height:i.naturalHeight,decoded:ok}});"
           "var r={errors:window.__rlvrErrors,tables:document.getElementsByTagName('table').length,images:imgs,"
           "headings:Array.prototype.map.call(document.querySelectorAll('h2'),function(h){return h.textContent})};"
           "var p=document.createElement('pre');p.id='rlvr-browser-check';p.textContent=JSON.stringify(r);"
           "document.body.appendChild(p)});</script>")
_RESULT = re.compile(r'<pre id="rlvr-browser-check">(.*?)</pre>', re.S)
_CONSOLE = re.compile(r"^\[[^\]]*:CONSOLE[^\]]*\].*$", re.M)


def with_checks(page: str) -> str:
    """``page`` with the checking scripts (for a copy: the report itself has no script)."""
    assert "<head>" in page and "</body>" in page
    return page.replace("<head>", "<head>" + _CATCH, 1).replace("</body>", _REPORT + "</body>", 1)


def open_in_browser(page: Path, tmp: Path, screenshot: Path | None = None, *, timeout: float = 60) -> dict:
    """Open a copy of ``page`` with the checks in headless Chromium; return the findings plus
    ``console`` (the console lines Chromium logged on stderr).  ``screenshot``: also save one there."""
    copy = tmp / f"{page.stem}.checked.html"
    copy.write_text(with_checks(page.read_text(encoding="utf-8")), encoding="utf-8")
    args = [BROWSER, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--disable-sync",
            "--disable-background-networking", "--disable-component-update", "--no-proxy-server",
            "--host-resolver-rules=MAP * ~NOTFOUND", f"--user-data-dir={tmp / 'profile'}",
            "--hide-scrollbars", "--window-size=1280,3200", "--virtual-time-budget=5000",
            "--enable-logging=stderr", "--v=0"]

    def run(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([*args, *extra, copy.as_uri()], capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "HOME": str(tmp)}, stdin=subprocess.DEVNULL)

    shot = [f"--screenshot={screenshot}"] if screenshot is not None else []
    proc = run(*shot, "--dump-dom")
    if screenshot is not None and not screenshot.is_file():      # a browser that does one thing per run
        run(*shot)
    found = _RESULT.search(proc.stdout)
    assert found, f"no findings in the dumped DOM (exit {proc.returncode}); stderr:\n{proc.stderr[-3000:]}"
    result = json.loads(html.unescape(found.group(1)))
    result["console"] = _CONSOLE.findall(proc.stderr)
    return result


def keep_screenshot(path: Path) -> None:
    """Print where the screenshot is; copy it to $RLVR_SCREENSHOT_DIR when set."""
    assert path.is_file(), f"no screenshot written to {path}"
    with Image.open(path) as im:
        assert im.format == "PNG" and im.size[0] == 1280, (im.format, im.size)
    where = [path]
    if os.environ.get("RLVR_SCREENSHOT_DIR"):
        dest = Path(os.environ["RLVR_SCREENSHOT_DIR"])
        dest.mkdir(parents=True, exist_ok=True)
        where.append(Path(shutil.copy(path, dest / path.name)))
    print("screenshot:", " and ".join(map(str, where)))


def check_report(out: Path, tmp: Path, name: str) -> dict:
    """Open ``out/report.html``: no error, every embedded image decodes, every table there."""
    page = out / "report.html"
    source = page.read_text(encoding="utf-8")
    shot = tmp / f"{name}_report.png"
    got = open_in_browser(page, tmp, shot)
    assert got["errors"] == [], got["errors"]
    assert got["console"] == [], got["console"]                 # the report logs nothing at all
    n_png = len(list(out.glob("*.png")))
    assert len(got["images"]) == source.count("<img ") == n_png > 0
    for img in got["images"]:
        assert img["complete"] and img["decoded"] and img["width"] > 0 and img["height"] > 0, img
    assert got["tables"] == source.count("<table>") > 0
    assert got["headings"][0] == "Verdict"
    keep_screenshot(shot)
    return got


# ------------------------------------------------------------------ reports
@pytest.fixture(scope="module")
def diff_out(tmp_path_factory) -> Path:
    """The diff report of two tiny RL checkpoints against their base (every section)."""
    def make(p: Path):
        base = tc.qwen2_base()
        rl, _ = tc.qwen2_planted()
        tc.plant(base, p, head=tc.spectrum_matrix((tc.VOCAB, tc.HIDDEN), [1.0, 0.5], 21))
        return weight_diff.diff(str(base), [str(rl), str(p)], progress=False, top_k=16)
    return report.write_report(tc.cached("browser_diff_doc", make), tmp_path_factory.mktemp("browser") / "diff")


@pytest.fixture(scope="module")
def audit_out(tmp_path_factory) -> Path:
    """The audit report of a 40-step run (rolling means, tail miss, a what-if family)."""
    rng = np.random.default_rng(3)
    n_steps, n_groups, G = 40, 6, 8
    mu = np.clip(rng.beta(1, 2, (n_steps, n_groups)) + np.linspace(0, 0.5, n_steps)[:, None], 0, 1)
    frame = pd.DataFrame({"step": np.repeat(np.arange(n_steps), n_groups * G),
                          "group": np.tile(np.repeat(np.arange(n_groups), G), n_steps),
                          "reward": (rng.random((n_steps, n_groups, G)) < mu[..., None]).astype(float).ravel()})
    doc = metrics.audit(frame, advantage="grpo", compare=["dr_grpo"], taus=[0.01])
    return audit_report.write_report(doc, None, tmp_path_factory.mktemp("browser") / "audit")


def test_the_verdict_figure_draws_the_papers_table(diff_out):
    """The diff report opens with its verdict and the verdict figure, whose paper marks (in the
    PNG's metadata) show every number of FADE's Sec. 5 table (its Inner column as drawn: × 28
    blocks, the depth-normalised Inner × L)."""
    out = diff_out
    md = (out / "report.md").read_text()
    assert md.index("## Verdict") < md.index("](verdict.png)") < md.index("## Precision")
    with Image.open(out / "verdict.png") as im:
        marks = json.loads(im.text["Paper marks"])
    table = [v * (report.FADE_LAYERS if j == 3 else 1) for row in report.FADE_SEC5_TABLE
             for j, x in enumerate(row[1:]) for v in np.atleast_1d(x)]
    assert all(any(abs(m - v) <= 1e-9 * abs(v) for m in marks) for v in table)


@needs_browser
def test_the_browser_check_catches_errors_and_broken_images(tmp_path):
    """The check is not vacuous: a console error, an uncaught exception and an image that does not decode."""
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><html><head><meta charset='utf-8'></head><body><script>console.error('boom');"
                   "not_defined();</script><img alt='x' src='data:image/png;base64,AAAA'><table></table></body></html>")
    got = open_in_browser(bad, tmp_path)
    assert any("boom" in e for e in got["errors"]) and any("not_defined" in e for e in got["errors"])
    assert got["console"] and got["tables"] == 1
    assert [(i["decoded"], i["width"]) for i in got["images"]] == [(False, 0)]


@needs_browser
def test_the_diff_report_in_a_browser(diff_out, tmp_path):
    got = check_report(diff_out, tmp_path, "diff")
    assert "Cross-checkpoint alignment (FADE Table 12)" in got["headings"]


@needs_browser
def test_the_audit_report_in_a_browser(audit_out, tmp_path):
    got = check_report(audit_out, tmp_path, "audit")
    assert "Series against step" in got["headings"]
