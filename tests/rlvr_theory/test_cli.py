"""`rlvr-theory` command line."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rlvr_theory import cli


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_masses_json(capsys):
    code, out, _ = run(capsys, "masses", "--advantage", "asym_grpo", "--param", "delta=0.5", "--p", "0.3",
                       "--G", "8", "--json")
    assert code == 0
    d = json.loads(out)
    assert {"advantage", "params", "p", "G", "closed_form", "exact", "sign_ratio", "advantage_ratio"} <= set(d)
    assert d["closed_form"] == pytest.approx({"m_S": 0.21, "m_F": 0.42})
    # exact: E[p̂q̂] = pq(G−1)/G
    assert d["exact"] == pytest.approx({"m_S": 0.21 * 7 / 8, "m_F": 0.42 * 7 / 8})
    assert d["sign_ratio"] == pytest.approx(0.5) and d["advantage_ratio"] == pytest.approx(0.5 * 3 / 7)
    assert d["params"] == {"delta": 0.5}


def test_masses_json_with_infinite_ratio(capsys):
    code, out, _ = run(capsys, "masses", "--advantage", "relu", "--p", "0.3", "--json")
    assert code == 0 and json.loads(out)["sign_ratio"] == "inf"


def test_masses_text_and_reward_values(capsys):
    code, out, _ = run(capsys, "masses", "--advantage", "reinforce", "--reward-values", "-1", "1", "--p", "0.3")
    assert code == 0 and "m_S = 0.3" in out and "m_F = 0.7" in out


@pytest.mark.parametrize("fmt", ["markdown", "csv", "latex", "json"])
def test_table_formats(capsys, fmt):
    code, out, _ = run(capsys, "table", "--p", "0.3", "--p", "0.5", "--G", "8", "--format", fmt)
    assert code == 0
    name = "asym\\_grpo" if fmt == "latex" else "asym_grpo"
    assert name in out and "passk" in out
    if fmt == "json":
        rows = json.loads(out)
        assert len(rows) == 2 * len(cli.advantages.names())
        assert {"m_S", "m_S_exact", "advantage_ratio"} <= set(rows[0])


def test_list(capsys):
    code, out, _ = run(capsys, "list", "--json")
    assert code == 0 and {r["name"] for r in json.loads(out)} == set(cli.advantages.names())


@pytest.mark.parametrize("argv, match", [
    (["masses", "--advantage", "nope", "--p", "0.3"], "unknown advantage"),
    (["masses", "--advantage", "grpo", "--p", "1.5"], "p must lie in"),
    (["masses", "--advantage", "asym_grpo", "--param", "delta", "--p", "0.3"], "--param must look like"),
    (["masses", "--advantage", "asym_grpo", "--param", "delta=-1", "--p", "0.3"], "delta must be"),
    (["masses", "--advantage", "grpo", "--p", "0.3", "--G", "0"], "G must be"),
])
def test_errors_exit_2_with_a_message(capsys, argv, match):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and match in err


def test_module_entry_point():
    res = subprocess.run([sys.executable, "-m", "rlvr_theory", "masses", "--advantage", "grpo", "--p", "0.5",
                          "--json"], capture_output=True, text=True, check=True)
    assert json.loads(res.stdout)["closed_form"]["m_S"] == pytest.approx(0.5)
