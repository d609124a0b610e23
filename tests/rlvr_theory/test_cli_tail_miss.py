"""`rlvr-theory tail-miss`: output against closed forms and a brute-force scan, errors exit 2."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from rlvr_theory import cli

MU, TAU = 0.64, 6.3e-5


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def naive(mu, tau, N):
    """Lemma 3.1 in plain float arithmetic (accurate to ~1e-12 at these moderate N)."""
    return (1 - tau) ** N - (mu - tau) ** N - (1 - mu) ** N


def test_json_rows_and_peak(capsys):
    code, out, err = run(capsys, "tail-miss", "--mu", str(MU), "--tau", str(TAU), "--N", "2", "4", "8",
                         "--peak", "--json")
    assert code == 0 and err == ""
    d = json.loads(out)
    assert d["mu"] == MU and d["tau"] == TAU
    assert [r["N"] for r in d["rows"]] == [2, 4, 8]
    # N = 2: one correct and one wrong rollout; the correct one not rare
    assert d["rows"][0]["active"] == pytest.approx(2 * MU * (1 - MU), rel=1e-14)
    assert d["rows"][0]["tail_miss"] == pytest.approx(2 * (MU - TAU) * (1 - MU), rel=1e-14)
    for r in d["rows"]:
        assert r["active"] == pytest.approx(1 - MU ** r["N"] - (1 - MU) ** r["N"], rel=1e-12)
        assert r["tail_miss"] == pytest.approx(naive(MU, TAU, r["N"]), rel=1e-12)
    scan = max(range(1, 2000), key=lambda n: naive(MU, TAU, n))
    assert d["peak_N"] == scan == 20
    assert d["peak_value"] == pytest.approx(naive(MU, TAU, scan), rel=1e-12)


def test_default_sweep_is_the_app_j_grid(capsys):
    code, out, _ = run(capsys, "tail-miss", "--mu", str(MU), "--tau", str(TAU), "--json")
    d = json.loads(out)
    assert code == 0 and [r["N"] for r in d["rows"]] == [2**k for k in range(1, 18)]
    assert d["rows"][-1]["tail_miss"] < 1e-3  # F-GRPO App. J: < 1e-3 at N = 2^17
    assert "peak_N" not in d


def test_text_table(capsys):
    code, out, _ = run(capsys, "tail-miss", "--mu", "0.5", "--tau", "0.01", "--N", "1", "131072", "--peak")
    assert code == 0
    assert "| N | active | tail_miss |" in out and "| 1 | 0 | 0 |" in out
    assert "peak: N = 7" in out  # brute force: argmax over N of Lemma 3.1 at mu = 0.5, tau = 0.01
    assert max(range(1, 500), key=lambda n: naive(0.5, 0.01, n)) == 7


@pytest.mark.parametrize("argv, match", [
    (["--mu", "1.5", "--tau", "0.1"], "--mu must be a finite number >= 0 and <= 1, got 1.5"),
    (["--mu", "0.64", "--tau", "0.7"], "--tau must lie in [0, mu]"),
    (["--mu", "0.64", "--tau", "0.1", "--N", "2.5"], "--N must contain only integers >= 1, got 2.5"),
    (["--mu", "0.64", "--tau", "0.1", "--N", "0"], "--N must contain only integers >= 1, got 0"),
    (["--mu", "0.64", "--tau", "0", "--peak"], "--tau must be > 0"),
])
def test_errors_exit_2_with_a_message(capsys, argv, match):
    code, out, err = run(capsys, "tail-miss", *argv)
    assert code == 2 and out == "" and match in err and err.startswith("rlvr-theory: error: ")


def test_argparse_errors_exit_2(capsys):
    assert cli.main(["tail-miss", "--mu", "0.5"]) == 2  # --tau missing
    assert "--tau" in capsys.readouterr().err


def test_module_entry_point():
    res = subprocess.run([sys.executable, "-m", "rlvr_theory", "tail-miss", "--mu", "0.64", "--tau", "6.3e-5",
                          "--N", "131072", "--json"], capture_output=True, text=True, check=True)
    # at N = 2^17 the two subtracted powers underflow: Pr(B) = (1 - tau)^N
    assert json.loads(res.stdout)["rows"][0]["tail_miss"] == pytest.approx(math.exp(131072 * math.log1p(-6.3e-5)),
                                                                          rel=1e-12)
