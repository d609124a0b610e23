"""Group sizes whose exact masses cannot fit in memory are refused before any allocation.

``masses.exact`` (and ``rlvr-theory masses`` / ``table``) evaluate the ``G + 1`` outcomes of a
group in O(G) memory per p: ``G = 10**6`` fits, ``G = 2**40`` would need hundreds of TiB.  The
request is estimated first (Python integers: no overflow) and refused with a ``ValueError`` that
names ``G``, the estimate and the memory available, never a ``MemoryError`` traceback.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from rlvr_theory import advantages, cli, masses, variance

BIG = 2**40
BIN = Path(sys.executable).parent
CLI = shutil.which("rlvr-theory", path=str(BIN)) or str(BIN / "rlvr-theory")
#: "G = N needs about X UNIT of memory ...; Y UNIT available"
REFUSAL = re.compile(r"G = (\d+) needs about ([\d.]+) ([KMGTPE]?i?B) of memory .*; ([\d.]+) ([KMGTPE]?i?B) available")


def _bytes(number: str, unit: str) -> float:
    return float(number) * 1024 ** ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"].index(unit)


@pytest.mark.parametrize("family", ["grpo", "reinforce_pp", "t2t", "passk_chen"])
def test_exact_at_G_2_to_the_40_is_refused_before_allocating(family):
    t0 = time.perf_counter()
    with pytest.raises(ValueError) as info:
        masses.exact(family, [0.3, 0.5], BIG)
    assert time.perf_counter() - t0 < 5
    msg = str(info.value)
    assert msg.startswith(f"G = {BIG} needs about "), msg
    m = REFUSAL.match(msg)
    assert m, msg
    need, avail = _bytes(m.group(2), m.group(3)), _bytes(m.group(4), m.group(5))
    assert need >= 8 * (BIG + 1) > avail, msg          # at least one float64 per outcome; more than there is


@pytest.mark.parametrize("call", [
    lambda G: masses.outcome_advantages("grpo", G),
    lambda G: masses.binom_pmf(0.3, G),
    lambda G: masses.sign_ratio("grpo", 0.3, G, exact=True),
    lambda G: masses.advantage_ratio("reinforce_pp", 1.0, G, exact=True),
    lambda G: masses.table([0.3], G, ["grpo"]),
    lambda G: variance.weight_variance("grpo", 0.3, G, method="exact"),
])
def test_every_o_of_G_entry_point_refuses_by_name(call):
    with pytest.raises(ValueError, match=rf"^G = {BIG} needs about .* available"):
        call(BIG)


def test_the_estimate_is_compared_with_the_memory_available(monkeypatch):
    """A moderate G is refused when the machine has little memory left, and computed when it has."""
    G = 2**18  # about 68 MiB: above the size that is never compared
    want = masses.exact("grpo", 0.3, G)
    need = masses.memory_needed(G)
    assert isinstance(need, int) and 8 * (G + 1) <= need <= 1024 * (G + 1)
    monkeypatch.setattr(masses, "available_memory", lambda: need // 2)
    with pytest.raises(ValueError, match=rf"^G = {G} needs about .* of memory .*; .* available"):
        masses.exact("grpo", 0.3, G)
    monkeypatch.setattr(masses, "available_memory", lambda: 4 * need)
    np.testing.assert_array_equal(masses.exact("grpo", 0.3, G).m_S, want.m_S)


def test_memory_estimates_are_python_integers_that_do_not_overflow():
    for G, n_p in [(2**62, 1), (2**63 + 5, 10**6), (10**30, 3)]:
        need = masses.memory_needed(G, n_p, batch_level=True)
        assert isinstance(need, int) and need > 8 * G


def test_available_memory_is_positive_bytes():
    avail = masses.available_memory()
    assert isinstance(avail, int) and avail > 0


@pytest.mark.parametrize("G", [131072, 10**6])
def test_large_but_feasible_G_still_works(G):
    e = masses.exact("grpo", [0.3], G)
    assert np.isfinite(e.m_S).all() and e.m_S[0] == pytest.approx(np.sqrt(0.3 * 0.7), rel=1e-3)


def test_cli_masses_at_G_2_to_the_40_is_one_line_exit_2(capsys):
    assert cli.main(["masses", "--advantage", "grpo", "--p", "0.3", "--G", str(BIG)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and "Traceback" not in captured.err
    assert captured.err.startswith(f"rlvr-theory: error: --G = {BIG} needs about "), captured.err
    assert "available" in captured.err
    assert cli.main(["table", "--advantage", "grpo", "--p", "0.3", "--G", str(BIG)]) == 2
    assert capsys.readouterr().err.startswith(f"rlvr-theory: error: --G = {BIG} needs about ")


def test_console_script_at_G_2_to_the_40():
    res = subprocess.run([CLI, "masses", "--advantage", "grpo", "--p", "0.3", "--G", str(BIG)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "Traceback" not in res.stderr and "MemoryError" not in res.stderr, res.stderr
    assert res.stderr.startswith(f"rlvr-theory: error: --G = {BIG} needs about ") and res.stderr.count("\n") == 1


def test_dense_family_keeps_its_own_limit():
    """A family registered elsewhere (no O(G) form) is still refused by its dense limit first."""
    from tests.rlvr_theory.test_advantages import Halved

    with advantages.registered(Halved):
        G = advantages.DENSE_MAX_G + 1
        with pytest.raises(ValueError, match=rf"^G = {G} is too large for "):
            masses.exact(Halved.name, 0.3, G)
