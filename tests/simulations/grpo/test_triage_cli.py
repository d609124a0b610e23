"""``rlvr-train eval --triage G``: the pre-RL triage of the sampled problems, printed and written to
eval.json / per_problem.csv, equal to ``analysis.triage`` on the per-problem successes; refusals
before any sampling."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from analysis.triage import triage
from simulations.grpo import cli

BASE = ["--problems", "6", "--n", "4", "--quiet", "--threads", "1", "--device", "cpu"]


def test_eval_triage_prints_and_writes(untrained_sort3, tmp_path, capsys):
    out = tmp_path / "ev"
    argv = ["eval", str(untrained_sort3), *BASE, "--triage", "4", "--advantage", "asym_grpo", "--param", "delta=0.5",
            "--out", str(out)]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert "triage at G = 4, advantage advantages.get('asym_grpo', delta=0.5)" in printed
    assert "zero-signal share" in printed and "verdict" in printed
    ev = json.loads((out / "eval.json").read_text())
    table = pd.read_csv(out / "per_problem.csv")
    t = triage(table["n"], table["correct"], 4, "asym_grpo", {"delta": 0.5})   # recomputed independently
    tri = ev["triage"]
    assert tri["G"] == 4 and tri["prompts"] == 6
    assert tri["zero_signal_share"] == pytest.approx(t.zero_signal_share)
    assert tri["no_signal_prompts"] == t.no_signal.tolist()
    assert tri["verdict"] == t.verdict and tri["verdict"] in printed
    assert tri["token_entropy"] == ev["token_entropy"] and tri["answer_entropy"] == ev["answer_entropy"]
    np.testing.assert_allclose(table["p_zero_signal"], t.per_prompt["p_zero_signal"])
    np.testing.assert_allclose(table["triage_m_S"], t.per_prompt["m_S"])
    # without --triage: no triage key, no extra columns
    assert cli.main(["eval", str(untrained_sort3), *BASE, "--out", str(tmp_path / "plain")]) == 0
    assert "triage" not in json.loads((tmp_path / "plain" / "eval.json").read_text())


@pytest.mark.parametrize("extra,message", [
    (["--triage", "5"], "triage must be <= n = 4"),
    (["--triage", "2", "--advantage", "reinforce_pp"], "batch-level"),
    (["--triage", "2", "--advantage", "asym_grpo", "--param", "delta=-1"], "asym_grpo: delta"),
    (["--advantage", "rloo"], "give --triage"),
])
def test_eval_triage_refusals(untrained_sort3, tmp_path, capsys, extra, message):
    out = tmp_path / "ev"
    assert cli.main(["eval", str(untrained_sort3), *BASE, *extra, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlvr-train: error: ") and message in err
    assert not out.exists()


def test_eval_triage_refuses_greedy(untrained_sort3, capsys):
    assert cli.main(["eval", str(untrained_sort3), "--temperature", "0", "--problems", "2", "--quiet",
                     "--device", "cpu", "--triage", "1"]) == 2
    assert "triage needs sampled completions" in capsys.readouterr().err
