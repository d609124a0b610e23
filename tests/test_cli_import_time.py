"""The console scripts answer quickly: ``--help`` loads no numerical stack beyond numpy, and
``rlvr-theory masses`` loads none of sympy, torch, matplotlib, pandas and scipy: only numpy
(issue 30, item 8; the closed form as an expression, ``--symbolic``, loads sympy).

Each command runs in a fresh interpreter (a subprocess) that reports which of the heavy packages
ended up in ``sys.modules``: a check that passes or fails the same way on any machine, unlike wall
time.  The wall times are printed (``pytest -s``); the CPU time of the command (user + system, which
other jobs on the machine barely change) is asserted loosely (see ``_SLACK``).  The
rule these tests keep: docs/architecture.md, "Imports on use"; the times: docs/performance.md.
"""

from __future__ import annotations

import json
import re
import resource
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
#: Asserted on the command's CPU time, at 3x: the machine is shared with other jobs (load 2-12 is
#: seen; at load 12 wall times triple while CPU times grow ~1.2x) and one busy second must not fail
#: the suite; what keeps the commands fast is the sys.modules check, not this.
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
    """``(result, wall, stdout)``; ``result`` holds the exit ``code``, the ``heavy`` modules loaded
    and ``cpu``, the child's user + system seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _PROBE, SCRIPTS[script], *argv], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    line = [ln for ln in proc.stderr.splitlines() if ln.startswith("PROBE ")]
    assert line, f"{script} {' '.join(argv)} did not finish: {proc.stderr[-2000:]}"
    return {**json.loads(line[-1][len("PROBE "):]), "cpu": cpu}, wall, proc.stdout


def test_every_console_script_is_covered():
    assert set(SCRIPTS) == {"rlvr-theory", "rlvr-diff", "rlvr-audit", "rlvr-sim", "rlvr-train", "rlvr-figures"}


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_help_imports_no_heavy_stack(script):
    result, wall, out = _probe(script, "--help")
    print(f"{script} --help: {wall:.2f} s wall, {result['cpu']:.2f} s CPU (target {HELP_S} s), "
          f"heavy modules: {result['heavy'] or 'none'}")
    assert result["code"] == 0 and "usage:" in out
    assert result["heavy"] == [], f"{script} --help imports {result['heavy']}"
    assert result["cpu"] < _SLACK * HELP_S, f"{script} --help took {result['cpu']:.2f} s of CPU ({wall:.2f} s wall)"


@pytest.mark.parametrize("advantage", [["grpo"], ["grpo", "--param", "ddof=1", "--param", "eps=1e-6"],
                                       ["asym_grpo", "--param", "delta=0.5"]])
def test_theory_masses_imports_no_heavy_stack(advantage):
    result, wall, out = _probe("rlvr-theory", "masses", "--advantage", *advantage, "--p", "0.3", "--G", "8")
    print(f"rlvr-theory masses --advantage {' '.join(advantage)}: {wall:.2f} s wall, {result['cpu']:.2f} s CPU "
          f"(target {MASSES_S} s), "
          f"heavy modules: {result['heavy'] or 'none'}")
    assert result["code"] == 0 and "closed form (plug-in):  m_S = " in out and "exact, finite G:" in out
    if advantage == ["grpo"]:
        assert "closed form (plug-in):  m_S = 0.4582575695" in out and "m_S = 0.412171534" in out
    # the plug-in of these families comes from masses.plugin, the exact column from numpy: sympy
    # (~0.5 s of imports) is loaded only for a closed form as an expression (--symbolic)
    assert result["heavy"] == [], f"rlvr-theory masses imports {result['heavy']}"
    assert result["cpu"] < _SLACK * MASSES_S, f"rlvr-theory masses took {result['cpu']:.2f} s of CPU ({wall:.2f} s wall)"


def test_theory_masses_symbolic_loads_sympy_for_the_expression():
    result, _, out = _probe("rlvr-theory", "masses", "--advantage", "grpo", "--p", "0.3", "--symbolic")
    assert result["code"] == 0 and "closed form: m_S = sqrt(p)*sqrt(1 - p)" in out
    assert result["heavy"] == ["sympy"]
