"""``rlvr-sim``: the writer shared by the simulators (run block, strict JSON) and the dispatch."""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from simulations import cli


def test_write_run_puts_the_run_block_first_and_writes_strict_json(tmp_path):
    df = pd.DataFrame({"step": [0, 1], "x": [0.5, float("nan")]})
    cli.write_run(tmp_path / "o", df, df.tail(1), {"preset": "p", "ratio": float("inf"), "missing": float("nan")},
                  settings={"steps": 1}, seed=[0, 1], device="cpu", threads=1)
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == ["config.json", "final.csv", "trajectory.csv"]
    text = (tmp_path / "o" / "config.json").read_text()
    meta = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    assert list(meta)[:5] == ["package_version", "settings", "seed", "device", "threads"]
    assert meta["settings"] == {"steps": 1} and meta["seed"] == [0, 1] and meta["device"] == "cpu"
    assert meta["threads"] == 1 and meta["ratio"] == "inf" and meta["missing"] is None and meta["preset"] == "p"
    with pytest.raises(TypeError, match="device"):  # the block's keys are not repeated by the record
        cli.write_run(tmp_path / "x", df, df, {"device": "cpu"}, settings={})


def test_command_settings_keeps_what_was_given():
    args = argparse.Namespace(command="categorical", func=print, out="o", quiet=True, threads=2, device="cpu",
                              preset="fgrpo-fig4-small", steps=None, param=["delta=0.5", "normalize=true"])
    assert cli.command_settings(args) == {"preset": "fgrpo-fig4-small", "param": {"delta": 0.5, "normalize": True}}


def test_every_simulator_has_threads_and_help(capsys):
    for name in ("categorical", "toys", "linear-head"):
        assert cli.main([name, "--help"]) == 0
        assert "--threads N" in capsys.readouterr().out


def test_python_m_simulations_reports_errors_with_exit_2(tmp_path):
    r = subprocess.run([sys.executable, "-m", "simulations", "toys", "--preset", "agrae-c0", "--seeds", "0",
                        "--out", str(tmp_path / "o")], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr == "rlvr-sim: error: --seeds must be an integer >= 1, got 0\n"
    assert not (tmp_path / "o").exists()


def test_the_run_helpers_live_below_the_simulators_and_the_cli_re_exports_them():
    """``simulations.runs`` holds the output of a run; no simulator imports the CLI module."""
    from simulations import runs

    for name in runs.__all__:
        assert getattr(cli, name) is getattr(runs, name) and name in cli.__all__
    # every import statement of the simulators, at module level or inside a function (a lazy one)
    for name in ("categorical", "linear_head", "toys"):
        tree = ast.parse(Path(runs.__file__).with_name(f"{name}.py").read_text())
        imported = {(n.level, n.module) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        imported |= {(0, a.name) for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert not imported & {(1, "cli"), (0, "simulations.cli")}, name
        assert (1, "runs") in imported, name


def test_calibration_settings_are_declared_once():
    """``mu`` / ``memory_lr`` of every simulator come from :mod:`simulations.calibration`: the same
    flags, the same refusal."""
    import dataclasses

    from simulations import calibration, categorical, linear_head, toys  # noqa: F401
    from simulations.grpo.config import GRPOConfig

    for cls in (categorical.Config, linear_head.ToySettings, linear_head.PopulationSettings, GRPOConfig):
        fields = {f.name: f for f in dataclasses.fields(cls)}
        assert fields["mu"].default == 0.0 and fields["memory_lr"].default is None
        assert fields["mu"].metadata["help"].startswith("distribution-level calibration (Over-Sharpening Sec. 3.2)")
        assert fields["memory_lr"].metadata["help"].startswith("with --mu > 0, the learning rate of the")
    for argv in (["categorical"], ["linear-head", "--preset", "toy-small"]):
        with pytest.raises(SystemExit):
            cli.build_parser().parse_args([*argv, "--help"])
    with pytest.raises(ValueError, match=r"^memory_lr applies only with mu > 0 \(no memory head is used"):
        linear_head.ToySettings(memory_lr=0.1).check()
    assert calibration.check_calibration(0.5, None, model="memory head", lr=0.2) == (0.5, 0.2)
