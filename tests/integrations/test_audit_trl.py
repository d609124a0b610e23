"""rlvr-audit on real TRL logs: a TRL GRPO run on CPU (tiny local model, ``log_completions=True``)
audited end to end.  The audit's masses equal :func:`rlvr_theory.masses.of_group` on the rewards
of the parquet files, and "which advantage" names the advantage the run used: TRL's own default
(``scale_rewards="group"`` = ``grpo(ddof=1, eps=1e-4)``) and a registry family run through
:class:`integrations.trl.GRPOTrainer`."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("trl")
pytest.importorskip("pyarrow")

import torch  # noqa: E402
import trl  # noqa: E402

from analysis.audit import metrics, readers  # noqa: E402
from integrations.trl import GRPOTrainer  # noqa: E402
from rlvr_theory import advantages, masses  # noqa: E402
from tests.integrations import trl_tiny as T  # noqa: E402

G = 4
torch.set_num_threads(1)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two 3-step runs: plain TRL, and the adapter with RLOO (different advantages, same rewards)."""
    out = {}
    for name, base, kw in [("trl", trl.GRPOTrainer, {}), ("rloo", GRPOTrainer, {"advantage": "rloo"})]:
        path = str(tmp_path_factory.mktemp(name))
        T.build(base, path, reward="binary", cfg=dict(max_steps=3), **kw).train()
        out[name] = path
    return out


def _parquet_groups(path):
    """Rewards and advantages of every logged step, read directly (pandas), as (groups, G)."""
    tables = T.parquet_tables(path)
    return {step: (df["binary_reward"].to_numpy().reshape(-1, G), df["advantage"].to_numpy().reshape(-1, G))
            for step, df in tables.items()}


@pytest.mark.parametrize("run,name,params", [("trl", "grpo", {"ddof": 1, "eps": 1e-4}), ("rloo", "rloo", {})])
def test_audit_of_a_real_trl_run(runs, run, name, params):
    rollouts = readers.read([runs[run]])
    assert rollouts.source["format"] == "trl" and rollouts.group_size == G
    doc = metrics.audit(rollouts)
    found = doc["advantage"]
    assert found is not None and found["name"] == name, doc.get("advantage_search")
    assert all(found["params"].get(k) == v for k, v in params.items()), found
    adv = advantages.get(name, **params)
    by_step = {s["step"]: s for s in doc["steps"]}
    groups = _parquet_groups(runs[run])
    assert sorted(by_step) == sorted(groups)
    for step, (R, A_logged) in groups.items():
        np.testing.assert_allclose(A_logged, adv(R), rtol=1e-5, atol=1e-6)  # the run used this advantage
        m = masses.of_group(adv, R)
        s = by_step[step]
        assert s["m_S"] == pytest.approx(m.m_S.mean(), rel=1e-5, abs=1e-7)
        assert s["m_F"] == pytest.approx(m.m_F.mean(), rel=1e-5, abs=1e-7)
        assert s["frac_all_correct"] == pytest.approx(np.mean(R.sum(1) == G))
        assert s["frac_all_wrong"] == pytest.approx(np.mean(R.sum(1) == 0))
        assert s["reward_mean"] == pytest.approx(R.mean())


def test_rlvr_audit_command_on_a_real_trl_run(runs, tmp_path):
    out = tmp_path / "report"
    res = subprocess.run([sys.executable, "-m", "analysis.audit_cli", runs["trl"], "--out", str(out), "--json",
                          "--compare", "asym_grpo:delta=0.5", "--tau", "0.05"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["advantage"]["name"] == "grpo" and doc["group_size"] == G
    assert {"report.md", "report.html", "report.json"} <= {p.name for p in out.iterdir()}
