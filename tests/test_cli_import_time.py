"""The console scripts answer quickly: ``--help`` loads no numerical stack beyond numpy, and
``rlvr-theory masses`` loads neither torch, matplotlib, pandas nor scipy (issue 30, item 8).

Each command runs in a fresh interpreter (a subprocess) that reports which of the heavy packages
ended up in ``sys.modules``: a check that passes or fails the same way on any machine, unlike wall
time.  The wall times are printed (``pytest -s``) and asserted only loosely (see ``_SLACK``).  The
rule these tests keep: docs/architecture.md, "Imports on use"; the times: docs/performance.md.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: [project.scripts] of pyproject.toml, name -> "module:attr" (read as text: tomllib needs Python 3.11)
_SECTION = (ROOT / "pyproject.toml").read_text(encoding="utf-8").split("[project.scripts]\n")[1].split("\n[")[0]
SCRIPTS = dict(re.findall(r'^(rlvr-[a-z]+) = "([\w.]+:\w+)"$', _SECTION, re.MULTILINE))
HEAVY = ("sympy", "torch", "matplotlib", "scipy", "pandas")

#: targets of issue 30 on the 2-core test machine: ``--help`` 0.5 s, ``rlvr-theory masses`` 1 s.
#: Asserted at 3x: the machine is shared with other jobs (load 2-4 is common) and one busy second
#: must not fail the suite; what keeps the commands fast is the sys.modules check, not this.
_SLACK = 3.0
HELP_S, MASSES_S = 0.5, 1.0

#: runs ``main_exit`` of MODULE:ATTR with the remaining arguments, then writes the heavy packages
#: loaded to stderr as one JSON line (stdout is the command's own output)
_PROBE = f"HEAVY = {HEAVY!r}\n" + """
import importlib, json, sys
target, argv = sys.argv[1], sys.argv[2:]
module, attr = target.split(":")
sys.argv = [module] + argv
code = 0
try:
    getattr(importlib.import_module(module), attr)()
except SystemExit as exc:
    code = exc.code
heavy = [name for name in HEAVY if name in sys.modules]
sys.stderr.write("\\nPROBE " + json.dumps({"code": code, "heavy": heavy}) + "\\n")
"""


def _probe(script: str, *argv: str) -> tuple[dict, float, str]:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _PROBE, SCRIPTS[script], *argv], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    wall = time.perf_counter() - t0
    line = [ln for ln in proc.stderr.splitlines() if ln.startswith("PROBE ")]
    assert line, f"{script} {' '.join(argv)} did not finish: {proc.stderr[-2000:]}"
    return json.loads(line[-1][len("PROBE "):]), wall, proc.stdout


def test_every_console_script_is_covered():
    assert set(SCRIPTS) == {"rlvr-theory", "rlvr-diff", "rlvr-audit", "rlvr-sim", "rlvr-train", "rlvr-figures"}


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_help_imports_no_heavy_stack(script):
    result, wall, out = _probe(script, "--help")
    print(f"{script} --help: {wall:.2f} s (target {HELP_S} s), heavy modules: {result['heavy'] or 'none'}")
    assert result["code"] == 0 and "usage:" in out
    assert result["heavy"] == [], f"{script} --help imports {result['heavy']}"
    assert wall < _SLACK * HELP_S, f"{script} --help took {wall:.2f} s"


def test_theory_masses_imports_no_torch_pandas_scipy():
    result, wall, out = _probe("rlvr-theory", "masses", "--advantage", "grpo", "--p", "0.3", "--G", "8")
    print(f"rlvr-theory masses: {wall:.2f} s (target {MASSES_S} s), heavy modules: {result['heavy']}")
    assert result["code"] == 0 and "exact, finite G:        m_S = 0.412171534" in out
    # sympy is this command's own work (the closed form it prints); the rest would be dead weight
    assert set(result["heavy"]) <= {"sympy"}, f"rlvr-theory masses imports {result['heavy']}"
    assert wall < _SLACK * MASSES_S, f"rlvr-theory masses took {wall:.2f} s"
