"""Named recipes (simulations.grpo.recipes): each builds a valid GRPOConfig with the settings F-GRPO
App. H.2 and Table 6 state (copied here from the paper, not from the module), user settings win."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from rlvr_theory import advantages
from simulations.grpo import recipes, trainer
from simulations.grpo.config import GRPOConfig

#: F-GRPO App. H.2: clip ranges; Table 6 (Qwen2.5-7B): γ; Sec. 5.5 / App. H.2: regulariser coefficients
PAPER = {
    "grpo": dict(advantage="grpo", params={}, loss="ppo", eps=(0.2, 0.2)),
    "f-grpo": dict(advantage="fgrpo", params={"gamma": 0.5}, loss="ppo", eps=(0.2, 0.2)),
    "dapo": dict(advantage="grpo", params={}, loss="ppo", eps=(0.2, 0.28)),
    "f-dapo": dict(advantage="fgrpo", params={"gamma": 0.5}, loss="ppo", eps=(0.2, 0.28)),
    "cispo": dict(advantage="grpo", params={}, loss="cispo", eps=(1.0, 5.0)),
    "f-cispo": dict(advantage="fgrpo", params={"gamma": 1.0}, loss="cispo", eps=(1.0, 5.0)),
    "grpo-h": dict(advantage="grpo", params={}, loss="ppo", eps=(0.2, 0.2), entropy_coef=0.001),
    "grpo-kl": dict(advantage="grpo", params={}, loss="ppo", eps=(0.2, 0.2), kl_coef=0.001),
}


def test_every_recipe_is_listed_with_its_source():
    assert recipes.names() == list(PAPER)
    for name in recipes.names():
        r = recipes.get(name)
        assert r.description and "F-GRPO" in r.source, name


@pytest.mark.parametrize("name", list(PAPER))
def test_each_recipe_builds_a_valid_config_with_the_papers_settings(name, tmp_path):
    cfg = recipes.config(name, out=str(tmp_path / name), steps=3)
    task, adv = cfg.validate()                         # a valid GRPOConfig: no error, the advantage built
    want = PAPER[name]
    assert adv == advantages.get(want["advantage"], **want["params"])
    assert (cfg.loss, cfg.eps) == (want["loss"], want["eps"])
    # App. H.2 / Table 5 for every method: token-mean, no KL unless GRPO-KL, 1 PPO epoch, mini-batch 64 of 256
    assert cfg.aggregation == "token-mean" and cfg.ppo_epochs == 1 and cfg.minibatches == 4
    assert cfg.kl_coef == want.get("kl_coef", 0.0) and cfg.entropy_coef == want.get("entropy_coef", 0.0)
    assert cfg.weight_decay == 0.01 and cfg.max_grad_norm == 1.0 and cfg.temperature == 1.0
    assert cfg.steps == 3 and cfg.lr == GRPOConfig(out="x").lr      # the model-scale settings are the user's


def test_focal_recipes_are_their_baselines_plus_the_focal_weight():
    for f, base in (("f-grpo", "grpo"), ("f-dapo", "dapo"), ("f-cispo", "cispo")):
        a, b = dict(recipes.get(f).settings), dict(recipes.get(base).settings)
        assert {k for k in a if a[k] != b.get(k)} == {"advantage", "params"}, f


def test_user_settings_win(tmp_path):
    cfg = recipes.config("f-cispo", out=str(tmp_path / "a"), params={"gamma": 2.0}, eps_high=3.0)
    assert cfg.params == {"gamma": 2.0} and cfg.eps == (1.0, 3.0)
    given = GRPOConfig(out=str(tmp_path / "b"), minibatches=2, lr=1e-2, loss="ppo")
    out = recipes.apply("f-cispo", given, given={"minibatches", "lr"})
    assert (out.minibatches, out.lr, out.loss, out.advantage) == (2, 1e-2, "cispo", "fgrpo")
    assert given.loss == "ppo"                                        # apply returns a copy
    # the dict the CLI merges with the given flags: {**settings(name), **given}
    assert {**recipes.settings("f-dapo"), "lr": 0.5}["eps_high"] == 0.28
    assert recipes.settings("f-dapo") == dict(recipes.get("f-dapo").settings)
    # a recipe's dict settings are copies: changing one config leaves the recipe as it was
    recipes.config("f-grpo", out="x").params["gamma"] = 9
    assert recipes.get("f-grpo").settings["params"] == {"gamma": 0.5}


def test_bad_recipes_and_names_are_refused():
    with pytest.raises(ValueError, match="recipe: unknown recipe 'nope'; allowed: cispo, dapo"):
        recipes.get("nope")
    with pytest.raises(ValueError, match="settings clip are not GRPOConfig fields"):
        recipes.Recipe("x", "d", "s", {"clip": 0.2})
    with pytest.raises(ValueError, match="may not set out"):
        recipes.Recipe("x", "d", "s", {"out": "runs/x"})
    with pytest.raises(ValueError, match="needs its source"):
        recipes.Recipe("x", "d", "", {})
    with pytest.raises(ValueError):
        recipes.register(recipes.Recipe("grpo", "another", "somewhere", {}))
    extra = recipes.Recipe("test-recipe", "d", "a test", {"loss": "grpo-n"})
    with recipes.registered(extra):
        assert recipes.config("test-recipe", out="x").loss == "grpo-n"
    assert "test-recipe" not in recipes.names()
    with pytest.raises(TypeError):
        recipes.get("grpo").settings["loss"] = "cispo"                # read-only


def test_a_recipe_run_trains_with_the_focal_advantage(tmp_path):
    """Two steps of f-dapo: the advantages fed to the loss are F-GRPO Eq. 16 recomputed from the rewards."""
    seen = []
    cfg = recipes.config("f-dapo", out=str(tmp_path / "run"), task="sort", difficulty=2, steps=2, batch_size=4,
                         group_size=4, threads=1, device="cpu", quiet=True, rollout_log=False, log_kl=False)
    trainer.train(cfg, callback=seen.append)
    assert len(seen) == 2

    def focal(r):  # F-GRPO Eq. 15-16: (1 − p̂)^γ times the GRPO advantage, γ = 0.5
        p = r.mean(1, keepdims=True)
        sd = r.std(1, keepdims=True)
        return (1 - p) ** 0.5 * np.divide(r - p, sd, out=np.zeros_like(r), where=sd > 0)

    for rec in seen:
        np.testing.assert_allclose(rec.advantages, focal(rec.rewards), rtol=1e-6, atol=1e-7)
        # the run's advantage function, on rewards with signal (an untrained model solves little)
        r = (np.random.default_rng(rec.step).random((6, 4)) < 0.5).astype(float)
        np.testing.assert_allclose(rec.advantage(r), focal(r), rtol=1e-12)
    assert dataclasses.asdict(cfg)["minibatches"] == 4


def test_the_cli_recipe_flag_merges_under_the_given_flags(tmp_path):
    """`rlvr-train grpo --recipe NAME`: the recipe's settings, then every flag given on top; a given
    advantage or schedule replaces the recipe's method (advantage, schedule, params) as a whole."""
    from simulations.grpo import cli

    out = tmp_path / "run"
    assert cli.main(["grpo", "--recipe", "f-cispo", "--task", "sort", "--difficulty", "2", "--steps", "1",
                     "--batch-size", "4", "--group-size", "4", "--eps-high", "3", "--threads", "1", "--device", "cpu",
                     "--quiet", "--out", str(out)]) == 0
    saved = json.loads((out / "run_config.json").read_text())
    saved = saved.get("settings", saved)
    want = {**recipes.settings("f-cispo"), "eps_high": 3.0, "steps": 1, "batch_size": 4}
    assert {k: saved[k] for k in want} == {k: (list(v) if isinstance(v, tuple) else v) for k, v in want.items()}
    assert "params" not in cli.with_recipe("f-dapo", {"advantage": "grpo"})
    merged = cli.with_recipe("f-dapo", {"schedule": "fade", "lr": 0.5})
    assert merged["schedule"] == "fade" and "advantage" not in merged and "params" not in merged
    assert merged["eps_high"] == 0.28 and merged["lr"] == 0.5
    assert cli.with_recipe(None, {"lr": 1}) == {"lr": 1}


def test_the_cli_refuses_an_unknown_recipe(tmp_path, capsys):
    from simulations.grpo import cli

    assert cli.main(["grpo", "--recipe", "nope", "--task", "sort", "--out", str(tmp_path / "x")]) == 2
    assert "unknown recipe 'nope'; allowed: cispo" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
