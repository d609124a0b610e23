"""The settings dataclasses of the GRPO trainer and the command line generated from them."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json

import pytest

from rlvr_plumbing import runner
from simulations.grpo import checkpoint as ck
from simulations.grpo import cli, config, evaluate, sft, sweep, trainer

_SUBCOMMANDS = {"sft": config.SFTConfig, "grpo": config.GRPOConfig, "eval": config.EvalConfig,
                "sweep": config.SweepConfig}


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for act in parser._actions:
        if isinstance(act, argparse._SubParsersAction):
            return dict(act.choices)
    raise AssertionError("no subcommands")


def _shown(default) -> str:
    """How a default reads in --help: 3e-4 as 0.0003, (0.0, 1.0) as "0 1"."""
    if isinstance(default, tuple):
        return " ".join(_shown(v) for v in default)
    return f"{default:g}" if isinstance(default, float) else str(default)


def _dests(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {a.dest: a for a in parser._actions}


def test_configs_are_importable_where_they_were():
    assert trainer.GRPOConfig is config.GRPOConfig and sft.SFTConfig is config.SFTConfig
    assert sweep.SweepConfig is config.SweepConfig and trainer.RESUMABLE_CHANGES is config.RESUMABLE_CHANGES


def test_sft_and_grpo_share_one_base():
    shared = {f.name for f in dataclasses.fields(config.RunSettings)}
    assert len(shared) == 17   # with overwrite
    assert shared <= {f.name for f in dataclasses.fields(config.SFTConfig)}
    assert shared <= {f.name for f in dataclasses.fields(config.GRPOConfig)}
    assert issubclass(config.SFTConfig, config.RunSettings) and issubclass(config.GRPOConfig, config.RunSettings)
    # the defaults that differ between the two run kinds
    assert (config.SFTConfig(out="x").batch_size, config.GRPOConfig(out="x").batch_size) == (64, 16)


@pytest.mark.parametrize("command", sorted(_SUBCOMMANDS))
def test_every_field_has_a_flag_with_help_and_its_default(command):
    cls = _SUBCOMMANDS[command]
    sub = _subparsers(cli.build_parser())[command]
    dests = _dests(sub)
    help_text = sub.format_help()
    for f in dataclasses.fields(cls):
        assert f.metadata.get("help"), f"{cls.__name__}.{f.name} has no help"
        if f.name in cli.NOT_FLAGS:
            continue
        assert f.name in dests, f"{command}: no flag for {f.name}"
        if f.name == "threads":   # the runner's --threads, with the runner's default
            continue
        act = dests[f.name]
        assert f.metadata["help"] in act.help
        if "default_text" in f.metadata:
            assert act.help.endswith(f"[{f.metadata['default_text']}]"), (f.name, act.help)
        elif f.default is None:    # unset by default: no "[None]" in the help
            assert not act.help.endswith("]"), (f.name, act.help)
        elif f.default is not dataclasses.MISSING and not isinstance(f.default, bool) and not act.required:
            assert act.help.endswith(f"[{_shown(f.default)}]"), (f.name, act.help)
        assert act.default is None   # only what was typed reaches the dataclass
    # flag spellings of before
    for flag in {"grpo": ["--group-size", "--no-log-kl", "--reward-values", "--resume", "--param", "--threads"],
                 "sft": ["--target-solve-rate", "--max-steps", "--threads"],
                 "eval": ["--k", "--n", "--problems", "--top-p", "--threads"],
                 "sweep": ["--deltas", "--no-fade", "--fade-param", "--diff-layers", "--threads"]}[command]:
        assert flag in help_text, flag


def test_help_shows_the_field_defaults(capsys):
    assert cli.main(["grpo", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "rollouts per prompt G (>= 2 and the family's minimum) [8]" in text
    assert "--reward-values R_W R_C rewards of a wrong and a correct response [0 1]" in text
    assert "lower clip ε_low [0.2; cispo 1]" in text
    assert cli.main(["sft", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "demonstrations per step [64]" in text and "AdamW learning rate [0.003]" in text


def test_a_new_setting_is_one_field():
    @dataclasses.dataclass
    class MyGRPO(config.GRPOConfig):
        clip_ratio_c: float = dataclasses.field(default=3.0, metadata={"help": "dual-clip bound c"})

    ap = argparse.ArgumentParser(prog="t")
    cli.add_run_settings(ap, MyGRPO)
    assert "dual-clip bound c [3]" in " ".join(ap.format_help().split())
    args = ap.parse_args(["--out", "o", "--clip-ratio-c", "5", "--group-size", "4", "--no-log-kl"])
    assert runner.given_settings(args, MyGRPO) == {"out": "o", "clip_ratio_c": 5.0, "group_size": 4, "log_kl": False}
    assert MyGRPO(**runner.given_settings(args, MyGRPO)).clip_ratio_c == 5.0


def test_exclusive_flags():
    for argv in (["grpo", "--out", "o", "--init", "a", "--preset", "tiny-cpu"],
                 ["grpo", "--out", "o", "--advantage", "grpo", "--schedule", "fade"]):
        with pytest.raises(SystemExit):
            cli.build_parser().parse_args(argv)


def test_validation_uses_the_shared_checks(tmp_path):
    cfg = config.GRPOConfig(out=str(tmp_path / "r"), task="sort", difficulty=3.0, group_size=4.0, steps=2.0)
    task, adv = cfg.validate()
    assert (cfg.group_size, cfg.steps, cfg.difficulty) == (4, 2, 3.0) and type(cfg.group_size) is int
    assert task.difficulty == 3 and adv.name == "grpo"
    for bad, message in [({"group_size": True}, r"^group_size must be an integer >= 2, got True"),
                         ({"lr": float("nan")}, r"^lr must be a finite number > 0, got nan"),
                         ({"top_p": 1.5}, r"^top_p must be a finite number > 0 and <= 1, got 1.5"),
                         ({"preset": "huge"}, r"^preset must be one of 'tiny-cpu', 'small-gpu'; got 'huge'"),
                         ({"threads": 0}, r"^threads must be an integer >= 1 \(or None\), got 0"),
                         ({"schedule": "fade", "params": {"H0": -1.0}},
                          r"^param: schedule 'fade': H0 must be a finite number >= 0, got -1.0"),
                         ({"advantage": "asym_grpo", "params": {"delta": -1.0}}, r"^param: asym_grpo: delta")]:
        with pytest.raises(ValueError, match=message):
            config.GRPOConfig(out=str(tmp_path / "r"), **bad).validate()
    with pytest.raises(ValueError, match=r"^advantage: the sweep sets it for each run"):
        config.SweepConfig(out=str(tmp_path / "s"), init="x", advantage="rloo").validate()
    assert not (tmp_path / "r").exists() and not (tmp_path / "s").exists()


def test_eval_defaults_are_those_of_the_settings():
    sig = inspect.signature(evaluate.evaluate).parameters
    for f in dataclasses.fields(config.EvalConfig):
        if f.name in sig and f.default is not dataclasses.MISSING:
            assert sig[f.name].default == f.default, f.name
    assert list(sig["k"].default) == config.EvalConfig(checkpoint="c").k


def test_run_settings_round_trip(tmp_path):
    cfg = config.GRPOConfig(out=str(tmp_path), advantage="asym_grpo", params={"delta": 0.5}, reward_values=(-1, 1))
    from rlvr_plumbing.runtime import run_metadata

    ck.write_json(tmp_path / "run_config.json", {"kind": "grpo", **run_metadata(cfg.to_json(), seed=0)})
    back = config.read_run_settings(tmp_path)
    assert config.GRPOConfig(**back) == dataclasses.replace(cfg, reward_values=[-1, 1])
    # a run directory written before the metadata block: the settings at the top level
    (tmp_path / "run_config.json").write_text(json.dumps(cfg.to_json()))
    assert config.read_run_settings(tmp_path) == cfg.to_json()
    assert config.read_run_settings(tmp_path / "none") is None


def test_json_files_follow_the_one_policy(tmp_path):
    ck.write_json(tmp_path / "x.json", {"a": float("nan"), "b": float("inf"), "c": (1, 2)})
    assert ck.read_json(tmp_path / "x.json") == {"a": None, "b": "inf", "c": [1, 2]}
    log = ck.MetricsLog(tmp_path, ["step", "m_ratio"])
    log.append({"step": 1, "m_ratio": float("nan")})
    log.write()
    assert (tmp_path / "metrics.jsonl").read_text() == '{"step": 1, "m_ratio": null}\n'
    assert (tmp_path / "metrics.csv").read_text() == "step,m_ratio\n1,\n"


def test_extreme_reward_values_are_refused_with_the_usable_range(tmp_path):
    # the trainer's batch means of (-1e308, 1e308) rewards overflow: refused before work, with the range
    for rv, message in [((-1e308, 1e308), r"^reward_values must be a finite number >= -1e\+100 and <= 1e\+100"),
                        ((0.0, 5e-324), r"^reward_values must be \(R_w, R_c\) with R_c - R_w >= 1e-100 \(usable range")]:
        with pytest.raises(ValueError, match=message):
            config.GRPOConfig(out=str(tmp_path / "r"), reward_values=rv).validate()
    assert not (tmp_path / "r").exists()
    assert cli.main(["grpo", "--out", str(tmp_path / "r"), "--reward-values", "-1e308", "1e308"]) == 2
    assert not (tmp_path / "r").exists()
