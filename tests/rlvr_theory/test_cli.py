"""`rlvr-theory` command line."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys

import numpy as np
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
        assert {"m_S_plugin", "m_S_exact", "advantage_ratio_plugin", "abs_adv_sum_exact"} <= set(rows[0])
    else:  # every mass and ratio column says plug-in or exact (issue 30, item 7)
        head = out.splitlines()[2 if fmt == "latex" else 0]
        cols = [c.strip() for c in head.replace("\\_", "_").replace("\\", "").split("|" if fmt == "markdown"
                else "," if fmt == "csv" else "&")]
        masses_cols = [c for c in cols if c.startswith(("m_S", "m_F", "sign_ratio", "advantage_ratio", "abs_adv"))]
        assert len(masses_cols) == 8 and all(c.endswith(("_plugin", "_exact")) for c in masses_cols), cols


def test_table_csv_prints_the_shortest_round_trip_of_each_float(capsys):
    """p = 0.3 prints as ``0.3`` (not ``0.29999999999999999``), and every number reads back to the
    float of the table computed now."""
    code, out, _ = run(capsys, "table", "--p", "0.3", "--p", "0.5", "--G", "8", "--format", "csv")
    assert code == 0
    lines = out.splitlines()
    assert "0.29999999999999999" not in out and all(",0.3," in ln or ",0.5," in ln for ln in lines[1:])
    back = list(csv.DictReader(io.StringIO(out)))  # Python's float(): exact round trip of a repr
    want = cli.masses.table(p=[0.3, 0.5], G=8)
    for col, ours in (("p", "p"), ("m_S", "m_S_plugin"), ("m_F", "m_F_plugin"), ("m_S_exact", "m_S_exact"),
                      ("m_F_exact", "m_F_exact")):
        got = np.array([float(r[ours]) if r[ours] else np.nan for r in back])
        np.testing.assert_array_equal(got, want[col].to_numpy(float), err_msg=col)


def test_list(capsys):
    code, out, _ = run(capsys, "list", "--json")
    assert code == 0 and {r["name"] for r in json.loads(out)} == set(cli.advantages.names())


@pytest.mark.parametrize("argv, match", [
    (["masses", "--advantage", "nope", "--p", "0.3"], "--advantage: unknown advantage 'nope'; allowed: "),
    (["masses", "--advantage", "grpo", "--p", "1.5"], "--p must lie in [0, 1], got"),
    (["masses", "--advantage", "asym_grpo", "--param", "delta", "--p", "0.3"], "--param must look like"),
    (["masses", "--advantage", "asym_grpo", "--param", "delta=-1", "--p", "0.3"],
     "asym_grpo: delta must be a finite number > 0, got -1"),
    (["masses", "--advantage", "grpo", "--p", "0.3", "--G", "0"], "--G must be an integer >= 1, got 0"),
    (["masses", "--advantage", "grpo", "--p", "0.3", "--threads", "0"], "--threads must be an integer >= 1, got 0"),
    (["table", "--param", "delta=0.5", "--advantage", "asym_grpo"], "--param must follow the --advantage"),
    (["table", "--param", "delta=0.5"], "--param must follow the --advantage"),
    (["table", "--advantage", "grpo", "--param", "delta=0.5"], "grpo: unknown parameter(s) delta; allowed: ddof, eps\n"),
    (["masses", "--advantage", "asym_grpo", "--param", "dleta=0.5", "--p", "0.3"],
     "asym_grpo: unknown parameter(s) dleta; allowed: delta; did you mean 'delta'?"),
    (["table", "--advantage", "grpo", "--param", "dof=1"], "allowed: ddof, eps; did you mean 'ddof'?"),
    (["table", "--advantage", "nope"], "--advantage: unknown advantage 'nope'"),
    (["table", "--G", "2", "--advantage", "passk_chen"], "--G must be >= 4"),
])
def test_errors_exit_2_with_a_message(capsys, argv, match):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and err.startswith("rlvr-theory: error: ") and match in err
    assert err.count("\n") == 1  # one line, no traceback


def test_table_chosen_advantages_with_their_own_params(capsys):
    code, out, _ = run(capsys, "table", "--advantage", "grpo", "--param", "ddof=1", "--advantage", "asym_grpo",
                       "--param", "delta=0.5", "--advantage", "grpo", "--p", "0.3", "--G", "8", "--format", "json")
    assert code == 0
    rows = json.loads(out)
    assert [(r["advantage"], r["params"]) for r in rows] == [
        ("grpo", "ddof=1, eps=0.0"), ("asym_grpo", "delta=0.5"), ("grpo", "ddof=0, eps=0.0")]
    assert rows[1]["m_S_plugin"] == pytest.approx(0.21) and rows[1]["m_F_plugin"] == pytest.approx(0.42)
    assert rows[1]["balance_plugin"] == "failure-biased"
    assert rows[0]["m_S_plugin"] == pytest.approx((0.21 * 7 / 8) ** 0.5, rel=1e-12)  # ddof=1: sqrt(pq(G-1)/G)
    assert rows[2]["m_S_plugin"] == pytest.approx(0.21 ** 0.5, rel=1e-12)
    from rlvr_theory import advantages, masses
    expect = masses.table([0.3], 8, [advantages.get("grpo", ddof=1)]).iloc[0]
    assert rows[0]["m_S_exact"] == pytest.approx(expect.m_S_exact, rel=1e-15)


def test_table_param_syntax_is_the_shared_one(capsys):
    """Values are Python literals, true/false/none in any case, as everywhere --param is taken."""
    code, out, _ = run(capsys, "table", "--advantage", "power_alpha", "--param", "alpha=3", "--param",
                       "normalize=TRUE", "--p", "0.25", "--format", "json")
    assert code == 0
    row = json.loads(out)[0]
    assert row["params"] == "alpha=3.0, normalize=True" and row["m_S_plugin"] == pytest.approx(0.25)


def test_json_is_strict_inf_as_string_nan_as_null(capsys):
    code, out, _ = run(capsys, "table", "--advantage", "relu", "--p", "0.3", "--format", "json")
    assert code == 0 and "Infinity" not in out and "NaN" not in out
    assert json.loads(out)[0]["sign_ratio_plugin"] == "inf"
    import pandas as pd

    from rlvr_theory.cli import format_frame

    text = format_frame(pd.DataFrame({"x": [float("nan"), float("inf"), 0.5]}), "json")
    assert json.loads(text) == [{"x": None}, {"x": "inf"}, {"x": 0.5}]
    md = format_frame(pd.DataFrame({"x": [float("nan"), float("-inf"), 1 / 3]}), "markdown")
    assert md.splitlines()[2:] == ["| — |", "| -∞ |", "| 0.333333 |"]
    assert "$\\infty$" in format_frame(pd.DataFrame({"x": [float("inf")]}), "latex")


def test_threads_option_on_computing_commands(capsys):
    for argv in (["masses", "--advantage", "grpo", "--p", "0.5"], ["table", "--advantage", "grpo"],
                 ["tail-miss", "--mu", "0.5", "--tau", "0.1", "--N", "4"]):
        code, out, _ = run(capsys, *argv, "--threads", "1")
        assert code == 0 and out


def test_table_help_documents_param_after_advantage(capsys):
    assert cli.main(["table", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--advantage NAME" in out and "named just before it" in out and "--threads N" in out


def test_closed_pipe_ends_quietly_with_141():
    """`rlvr-theory list --json | head -1` must not end in a BrokenPipeError traceback.

    A reader that leaves before the first write (``| true``) makes the write fail for sure:
    exit status 141, nothing on stderr.  With ``| head -1`` the kernel may accept the one
    large write partially, so only quietness is certain there.
    """
    base = f"{sys.executable} -m rlvr_theory"
    res = subprocess.run(["bash", "-c", f'{base} list --json | true; echo "status=${{PIPESTATUS[0]}}"'],
                         capture_output=True, text=True, timeout=300)
    assert res.stdout == "status=141\n" and res.stderr == ""
    cmd = (f"{base} table --p {' '.join(str(i / 100) for i in range(101))} --format json | head -1; "
           'echo "status=${PIPESTATUS[0]}"')
    res = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=300)
    assert res.stdout.splitlines()[0] == "[" and res.stdout.splitlines()[1] in ("status=0", "status=141")
    assert res.stderr == ""
