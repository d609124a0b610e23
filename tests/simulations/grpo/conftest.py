"""Checkpoints shared by the trainer's test modules, built once per test process (session scope;
with pytest-xdist once per worker): an untrained and an SFT-trained tiny-cpu model for 3-digit
sorting."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulations.grpo import checkpoint as ck
from simulations.grpo import models, sft, tasks
from simulations.grpo.tokenizer import build_tokenizer


@pytest.fixture(scope="session")
def untrained_sort3(tmp_path_factory) -> Path:
    """An untrained tiny-cpu checkpoint for 3-digit sorting, with its task.json (no training: fast)."""
    task = tasks.get("sort", 3)
    tok = build_tokenizer(task.alphabet)
    model = models.build_model("tiny-cpu", tok, seed=0)
    return ck.save_model_dir(tmp_path_factory.mktemp("untrained") / "base", model, tok,
                             json_files={"task.json": task.spec()})


@pytest.fixture(scope="session")
def sft_sort3(tmp_path_factory) -> Path:
    """An SFT checkpoint of the tiny-cpu preset on 3-digit sorting (held-out solve rate >= 0.3)."""
    out = tmp_path_factory.mktemp("grpo") / "sft"
    final = sft.train_sft(sft.SFTConfig(out=str(out), task="sort", difficulty=3, target_solve_rate=0.3,
                                        eval_every=10, max_steps=400, device="cpu", threads=1, quiet=True))
    info = json.loads((final / "sft.json").read_text())
    assert info["heldout_solve_rate"] >= 0.3 and 0 < info["n_params"] < 1_000_000
    return final
