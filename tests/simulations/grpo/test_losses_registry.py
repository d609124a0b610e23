"""The registry of policy losses (simulations.grpo.losses.register_policy_loss): names, default
clip ranges, and that the configuration, the command line and the loss read them from it."""

from __future__ import annotations

import pytest
import torch

from simulations.grpo import cli, config, losses

BUILT_IN = {"ppo": (0.2, 0.2), "cispo": (1.0, 5.0), "grpo-n": (0.2, 0.2), "gspo": (3e-4, 4e-4),
            "gspo-n": (3e-4, 4e-4)}


def test_the_built_in_losses_and_their_default_clip_ranges():
    assert losses.names() == list(BUILT_IN) == list(losses.LOSSES)
    assert {n: losses.get_policy_loss(n).eps for n in losses.names()} == BUILT_IN
    assert dict(config.DEFAULT_EPS) == BUILT_IN
    assert losses.SEQUENCE_LOSSES == tuple(n for n in losses.names() if losses.get_policy_loss(n).sequence) \
        == ("gspo", "gspo-n")


@pytest.mark.parametrize("name", list(BUILT_IN))
def test_config_uses_the_registered_clip_range_when_none_is_given(name):
    cfg = config.GRPOConfig(out="x", loss=name)
    assert cfg.eps == losses.get_policy_loss(name).eps == config.DEFAULT_EPS[name]
    assert config.GRPOConfig(out="x", loss=name, eps_low=0.1).eps == (0.1, losses.get_policy_loss(name).eps[1])


def test_an_unknown_loss_lists_the_registered_ones(tmp_path):
    listed = r"'ppo', 'cispo', 'grpo-n', 'gspo', 'gspo-n'; got 'dpo'$"
    with pytest.raises(ValueError, match=r"^loss must be one of " + listed):
        losses.get_policy_loss("dpo")
    with pytest.raises(ValueError, match=r"^loss must be one of " + listed):
        config.GRPOConfig(out=str(tmp_path / "r"), loss="dpo").validate()
    assert not (tmp_path / "r").exists()
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["grpo", "--out", "r", "--loss", "dpo"])


def test_the_command_line_reads_the_registry():
    grpo = next(a for a in cli.build_parser()._subparsers._group_actions[0].choices["grpo"]._actions
                if a.dest == "loss")
    assert list(grpo.choices) == losses.names()
    for name in losses.names():
        assert name in grpo.help
    assert "cispo: clipped IS weight, REINFORCE (default ε 1/5)" in grpo.help


def test_a_registered_loss_is_usable_everywhere(tmp_path):
    def reinforce(ratio, adv, logp, lo, hi):
        L = -adv * logp
        return L, torch.zeros_like(L, dtype=torch.bool), torch.zeros_like(L, dtype=torch.bool)

    spec = losses.PolicyLoss("reinforce", reinforce, (0.5, 0.5), description="plain REINFORCE")
    with losses.POLICY_LOSSES.registered(spec):
        assert "reinforce" in losses.names() and config.DEFAULT_EPS["reinforce"] == (0.5, 0.5)
        assert config.GRPOConfig(out="x", loss="reinforce").eps == (0.5, 0.5)
        assert cli.build_parser().parse_args(["grpo", "--out", "r", "--loss", "reinforce"]).loss == "reinforce"
        logp = torch.log(torch.tensor([[0.5, 0.25]]))
        L, low, high = losses.per_token_loss(logp, logp, torch.tensor([2.0]), loss="reinforce")
        torch.testing.assert_close(L, -2.0 * logp)
        assert not low.any() and not high.any()
        with pytest.raises(ValueError, match=r"^loss 'ppo' is already registered"):
            losses.register_policy_loss("ppo", eps=(0.1, 0.1))(reinforce)
    assert "reinforce" not in losses.names() and "reinforce" not in config.DEFAULT_EPS
    with pytest.raises(ValueError, match=r"^loss must be one of 'ppo', 'cispo', 'grpo-n', 'gspo', 'gspo-n'; "
                                         r"got 'reinforce'"):
        losses.per_token_loss(torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(1), loss="reinforce")
