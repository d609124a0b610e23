"""The TRL examples run end to end on CPU (a few steps each; in the TRL environment).

``examples/trl_entropy_collapse.py`` (docs/integrations.md, "A worked example: entropy collapse
inside TRL"): both runs (``relu``, ``grpo``) go through, each prints its table, the token-level
split of Ĉov(log π, A) adds up, ``relu`` has no ``A < 0`` tokens and its guard (action
``alert``) writes the ``sign_ratio`` alert (m_F = 0, so m_S/m_F = inf) into ``rlvr_alerts.jsonl``.
(``examples/trl_grpo.py`` is run by ``test_trl.py::test_example_script``.)
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("trl")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STEPS = 3


def _shares(block: str, label: str) -> list[float]:
    line = next(s for s in block.splitlines() if s.strip().startswith(label))
    return [float(x) for x in re.findall(r"[+-]\d+\.\d+", line.split(label, 1)[1])]


@pytest.mark.slow  # about 25 s on one CPU thread (two TRL runs of 3 steps and the imports)
def test_trl_entropy_collapse_example(tmp_path):
    out = tmp_path / "runs"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "trl_entropy_collapse.py"),
                           "--out", str(out), "--steps", str(STEPS), "--seeds", "0"],
                          env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    blocks = {adv: proc.stdout.split(f"== seed 0, {name}:", 1)[1].split("\n==", 1)[0]
              for adv, name in (("relu", "collapse (relu)"), ("grpo", "balanced (grpo)"))}
    for block in blocks.values():
        assert "entropy, step 1 -> last" in block and "corr(Cui prediction, measured dH)" in block, block
        pos, neg, zero = _shares(block, "share from A>0 / A<0 / A=0 tokens")
        assert pos + neg + zero == pytest.approx(1.0, abs=0.02), block  # printed to 2 decimals
        clipped, unclipped = _shares(block, "share from clipped / unclipped tokens")
        assert clipped + unclipped == pytest.approx(1.0, abs=0.02), block
        assert f"over {STEPS - 1} steps" in block  # the tracker paired every step after the first
    assert _shares(blocks["relu"], "share from A>0 / A<0 / A=0 tokens")[1] == 0.0  # relu: no A < 0 token
    assert "mean m_F (failure mass)                0.000" in blocks["relu"]
    with open(out / "seed0_relu" / "rlvr_alerts.jsonl") as f:
        alerts = [json.loads(line) for line in f if line.strip()]
    assert [(a["step"], a["rule"], a["action"]) for a in alerts] == [(STEPS, "sign_ratio", "alert")]
    assert f"step   {STEPS}  sign_ratio" in blocks["relu"]


@pytest.mark.slow  # about 15 s on one CPU thread (a TRL run of 2 steps with peft, then the diff of its adapter)
def test_trl_grpo_lora_example(tmp_path):
    """``examples/trl_grpo_lora.py``: the base once in OUT/base, adapter checkpoints that record it,
    and ``rlvr-diff OUT/base OUT/checkpoint-2`` reads the adapter as ΔW = s·B·A of every linear layer."""
    pytest.importorskip("peft")
    out = tmp_path / "lora"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "trl_grpo_lora.py"),
                           "--out", str(out), "--steps", "2", "--save-steps", "1"],
                          env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "adapter checkpoints: checkpoint-1, checkpoint-2" in proc.stdout
    cfg = json.loads((out / "checkpoint-2" / "adapter_config.json").read_text())
    assert cfg["base_model_name_or_path"] == str(out / "base") and cfg["r"] == 8
    from analysis import diff as weight_diff

    c = weight_diff.diff(str(out / "base"), [str(out / "checkpoint-2")], device="cpu", progress=False)["checkpoints"][0]
    assert c["base_identity"] == "same" and c["adapter"]["n_low_rank"] == 14 and c["adapter"]["ranks"] == [8]
    assert c["global_l2"] > 0
