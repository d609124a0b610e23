"""``rlvr-sim``: faults refused before any work, outputs written all at once, computed limits,
no NaN out of a diverging run (every subcommand: categorical, toys, linear-head).

The commands run as ``cli.main(argv)`` in this process (:func:`run_in_process`: the code the
console script runs before ``sys.exit``, its output captured); what needs a process of its own
runs one: a full standard output (the real console script), a run killed by SIGKILL."""

from __future__ import annotations

import errno
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from simulations import categorical as sc
from simulations import cli
from simulations import linear_head as lh
from tests.in_process import run_in_process

#: fast arguments of each subcommand (a run of a few steps)
FAST = {
    "categorical": ["categorical", "--preset", "fgrpo-fig4-small", "--N", "4", "--gamma", "0", "--seeds", "1",
                    "--steps", "2", "--device", "cpu", "--quiet"],
    "toys": ["toys", "--preset", "agrae-c0", "--steps", "2", "--seeds", "1", "--quiet"],
    "linear-head": ["linear-head", "--preset", "toy-small", "--steps", "2", "--seeds", "1", "--quiet"],
}
FILES = ["config.json", "final.csv", "trajectory.csv"]


def one_error_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rlvr-sim: error: "), stderr
    assert "Traceback" not in stderr
    return lines[0]


# ------------------------------------------------------------------ output locations
@pytest.mark.parametrize("name", list(FAST))
def test_out_that_is_a_file_or_lies_under_a_file_is_refused_before_work(tmp_path, name, capsys):
    f = tmp_path / "notes.txt"
    f.write_text("mine")
    for out, why in ((f, "is an existing file"), (f / "run", "lies under the file")):
        assert cli.main(FAST[name] + ["--out", str(out)]) == 2
        line = one_error_line(capsys.readouterr().err)
        assert line.startswith("rlvr-sim: error: --out: ") and why in line
    assert f.read_text() == "mine" and sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_out_checks_through_the_console_script(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("mine")
    r = run_in_process(cli.main, *FAST["categorical"], "--out", str(f))
    assert r.returncode == 2 and "--out: " in one_error_line(r.stderr) and "is an existing file" in r.stderr
    r = run_in_process(cli.main, *FAST["linear-head"], "--out", str(f / "sub" / "run"))
    assert r.returncode == 2 and "lies under the file" in one_error_line(r.stderr)
    assert f.read_text() == "mine" and sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


@pytest.mark.parametrize("name", list(FAST))
def test_unwritable_out_is_refused_before_work(tmp_path, name, capsys, monkeypatch):
    import rlvr_plumbing.io

    def read_only(*a, **k):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(rlvr_plumbing.io.tempfile, "mkstemp", read_only)
    ran = []
    monkeypatch.setattr(sc, "simulate", lambda *a, **k: ran.append(1))  # nothing may run
    monkeypatch.setattr(lh, "simulate_toy", lambda *a, **k: ran.append(1))
    assert cli.main(FAST[name] + ["--out", str(tmp_path / "o")]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert "--out: cannot write in" in line and "Read-only file system" in line
    assert not ran and not (tmp_path / "o").exists()


def test_foreign_directory_refused_then_replaced_with_overwrite(tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    (out / "thesis.tex").write_text("precious")
    r = run_in_process(cli.main, *FAST["toys"], "--out", str(out))
    assert r.returncode == 2 and "--overwrite" in one_error_line(r.stderr) and "not empty" in r.stderr
    assert [p.name for p in out.iterdir()] == ["thesis.tex"]
    r = run_in_process(cli.main, *FAST["toys"], "--out", str(out), "--overwrite")
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in out.iterdir()) == FILES  # the whole directory is the new output
    assert [p.name for p in tmp_path.iterdir()] == ["o"]  # no temporary sibling left


@pytest.mark.parametrize("name", list(FAST))
def test_a_previous_output_is_replaced_whole(tmp_path, name, capsys):
    out = tmp_path / "o"
    assert cli.main(FAST[name] + ["--out", str(out)]) == 0
    (out / "stale.csv").write_text("from an older version")
    assert cli.main(FAST[name] + ["--out", str(out), "--steps", "3"]) == 0  # an earlier output: no --overwrite
    assert sorted(p.name for p in out.iterdir()) == FILES
    assert json.loads((out / "config.json").read_text())["settings"]["steps"] == 3
    assert [p.name for p in tmp_path.iterdir()] == ["o"]
    capsys.readouterr()


@pytest.mark.parametrize("previous", [False, True])
@pytest.mark.parametrize("name", list(FAST))
def test_disk_full_while_writing_leaves_the_old_output_or_nothing(tmp_path, name, previous, capsys, monkeypatch):
    out = tmp_path / "o"
    if previous:
        assert cli.main(FAST[name] + ["--out", str(out)]) == 0
        before = {p.name: p.read_bytes() for p in out.iterdir()}
    real = pd.DataFrame.to_csv

    def full(self, path, *a, **k):
        if str(path).endswith("final.csv"):  # trajectory.csv is written, then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(self, path, *a, **k)

    monkeypatch.setattr(pd.DataFrame, "to_csv", full)
    capsys.readouterr()
    assert cli.main(FAST[name] + ["--out", str(out), "--steps", "3"]) == 1
    line = one_error_line(capsys.readouterr().err)
    assert line.startswith("rlvr-sim: error: No space left on device: ") and "final.csv" in line
    if previous:
        assert {p.name: p.read_bytes() for p in out.iterdir()} == before
        assert [p.name for p in tmp_path.iterdir()] == ["o"]
    else:
        assert list(tmp_path.iterdir()) == []


def test_a_killed_write_leaves_nothing_under_the_final_name(tmp_path):
    """SIGKILL after trajectory.csv was written: no partial output directory, no stray .tmp file."""
    script = textwrap.dedent(f"""
        import os, signal, pandas as pd
        from simulations import cli
        real = pd.DataFrame.to_csv
        def killed(self, path, *a, **k):
            real(self, path, *a, **k)
            if str(path).endswith("trajectory.csv"):
                os.kill(os.getpid(), signal.SIGKILL)
        pd.DataFrame.to_csv = killed
        cli.main({FAST["linear-head"] + ["--out", str(tmp_path / "o")]!r})
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert r.returncode == -9
    assert not (tmp_path / "o").exists()
    assert not list(tmp_path.rglob(".trajectory.csv.*.tmp"))
    assert not [p for p in tmp_path.rglob("*") if p.is_file() and p.parent == tmp_path]


# ------------------------------------------------------------------ computed limits
@pytest.mark.parametrize("args, expect", [
    (["categorical", "--N", "1000000000000"], "needs about"),
    (["categorical", "--N", "9223372036854775808"], "--N must be an integer >= 1 and <= 9223372036854775806"),
    (["categorical", "--seeds", "1000000000000"], "34000000000000 configurations"),
    (["categorical", "--steps", "100000000000000"], "steps=100000000000000"),
    (["toys", "--preset", "twostage-fig1", "--seeds", "1000000000000"], "seeds=1000000000000"),
    (["toys", "--preset", "twostage-fig1", "--steps", "100000000000000"], "steps=100000000000000"),
    (["linear-head", "--preset", "toy-small", "--G", "1000000000000"], "G up to 1000000000000"),
    (["linear-head", "--preset", "population-small", "--G", "1000000000000"], "G=1000000000000"),
    (["linear-head", "--preset", "toy-small", "--seeds", "1000000000000"], "needs about"),
    (["linear-head", "--preset", "fade-rank1", "--steps", "100000000000000"], "steps=100000000000000"),
])
def test_requests_that_cannot_fit_are_refused_before_work(tmp_path, args, expect, capsys):
    assert cli.main(args + ["--out", str(tmp_path / "o"), "--quiet"]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert expect in line
    if "needs about" in line:
        assert "of memory on cpu" in line and "available" in line
    assert not (tmp_path / "o").exists()


def test_scale_limits_through_the_console_script(tmp_path):
    for n in ("1000000000000", str(2 ** 63)):
        r = run_in_process(cli.main, "categorical", "--N", n, "--device", "cpu", "--out", str(tmp_path / "o"))
        assert r.returncode == 2, r.stderr
        line = one_error_line(r.stderr)
        assert "needs about" in line or "<= 9223372036854775806" in line
    assert not (tmp_path / "o").exists()


def test_memory_estimates_are_python_integers_that_do_not_overflow():
    big = sc.Config(N=(2 ** 63 - 2,), seeds=tuple(range(4)))
    assert big.memory_bytes() > 2 ** 70 and isinstance(big.memory_bytes(), int)
    assert sc.Config(K=10, n_correct=2, N=(4,), seeds=(0,), steps=10).memory_bytes("cuda") < 2 ** 20
    with pytest.raises(ValueError, match=r"rlvr-sim categorical \(K=128000, N up to 1000000000000.*needs about"):
        sc.simulate(sc.Config(N=(10 ** 12,), seeds=(0,)), device="cpu")
    with pytest.raises(ValueError, match="population.*needs about"):
        lh.simulate_population(G=10 ** 12)


@pytest.mark.parametrize("args, expect", [
    (["toys", "--preset", "agrae-c0", "--steps", "0"], "--steps must be an integer >= 1, got 0"),
    (["categorical", "--steps", "0"], "--steps must be an integer >= 1, got 0"),
    (["categorical", "--seeds", "0"], "--seeds must be an integer >= 1, got 0"),
    (["categorical", "--N", "0"], "--N must be an integer >= 1"),
    (["linear-head", "--preset", "toy-small", "--seeds", "-3"], "--seeds must be an integer >= 1, got -3"),
    (["linear-head", "--preset", "population-small", "--steps", "0"], "--steps must be an integer >= 1, got 0"),
    (["linear-head", "--preset", "toy-small", "--lr", "0"], "--lr must be"),
])
def test_bad_counts_are_refused_with_the_argument_named(tmp_path, args, expect, capsys):
    assert cli.main(args + ["--out", str(tmp_path / "o"), "--quiet"]) == 2
    assert expect in one_error_line(capsys.readouterr().err)
    assert not (tmp_path / "o").exists()


# ------------------------------------------------------------------ divergence
@pytest.mark.parametrize("preset, args, step", [
    ("toy-small", ["--optimizer", "adamw", "--lr", "1e3", "--steps", "500"], 321),
    ("toy-small", ["--lr", "1e308"], 1),
    ("population-small", ["--optimizer", "adamw", "--lr", "1e3", "--steps", "400"], None),
])
def test_a_diverging_linear_head_run_stops_with_the_step_and_lr_and_writes_nothing(tmp_path, preset, args, step):
    r = run_in_process(cli.main, "linear-head", "--preset", preset, *args, "--out", str(tmp_path / "o"), "--quiet")
    assert r.returncode == 2
    line = one_error_line(r.stderr)
    assert line.startswith("rlvr-sim: error: --lr = ") and "makes the run diverge" in line
    assert (f"at step {step} " if step else "at step ") in line and "choose a smaller value" in line
    assert not (tmp_path / "o").exists()


def test_large_but_stable_learning_rates_write_no_nan_cell(tmp_path, capsys):
    """A policy collapsed by a huge step (p_cat and p_persian underflow to 0) still has finite
    cells: the only empty cells are the documented ones (reward_mean of the last row)."""
    for args in (["--optimizer", "adamw", "--lr", "1e3"], ["--lr", "1e6"], ["--optimizer", "momentum", "--lr", "1e6"]):
        out = tmp_path / args[-1].replace(".", "_")
        assert cli.main(["linear-head", "--preset", "oversharpening-fig1", "--steps", "60", "--seeds", "2",
                         "--out", str(out), "--quiet", *args]) == 0
        final = pd.read_csv(out / "final.csv")
        assert not final.isna().any().any()
        traj = pd.read_csv(out / "trajectory.csv")
        assert not traj.drop(columns=["reward_mean"]).isna().any().any()
        assert not traj[traj.step < 60].reward_mean.isna().any()
        assert final.winner_share.between(0.5, 1).all()
    capsys.readouterr()


def test_winner_share_is_finite_when_both_rewarded_labels_underflow():
    tr, final = lh.simulate_toy(G=4, seeds=2, steps=60, optimizer="adamw", lr=1e3)
    assert ((final.p_cat + final.p_persian) == 0).any()  # the case that gave 0/0 before
    assert np.isfinite(tr.winner_share).all() and final.winner_share.between(0.5, 1).all()
    ok = tr.p_cat + tr.p_persian > 1e-300
    np.testing.assert_allclose(tr.winner_share[ok], (np.maximum(tr.p_cat, tr.p_persian) / (tr.p_cat + tr.p_persian))[ok],
                               rtol=1e-12)


@pytest.mark.parametrize("optimizer, lr", [("adam", 1e38), ("sgd", 1e300)])
def test_a_diverging_categorical_run_stops_with_the_step_and_lr(optimizer, lr):
    cfg = sc.Config(K=10, n_correct=2, z_anchor=0.0, z_correct=0.0, N=(4,), gamma=(0.0,), seeds=(0,), lr=(lr,),
                    steps=50, record_every=5, optimizer=optimizer)
    with pytest.raises(ValueError, match=rf"^lr = {re.escape(f'{lr:g}')} makes the run diverge: non-finite logits "
                                         r"at step \d+ \(configuration 0: N=4, gamma=0, seed=0\); choose a smaller value"):
        sc.simulate(cfg, device="cpu", dtype=torch.float32)


def test_a_large_finite_categorical_step_writes_finite_metrics():
    cfg = sc.Config(K=10, n_correct=2, z_anchor=0.0, z_correct=0.0, N=(4, 16), gamma=(0.0,), seeds=(0, 1),
                    lr=(1e30,), steps=50, record_every=5)
    traj, final = sc.simulate(cfg, device="cpu")
    assert not traj.isna().any().any() and not final.isna().any().any()


def test_empty_out_and_a_full_stdout(tmp_path, capsys):
    assert cli.main(FAST["toys"] + ["--out", ""]) == 2
    assert "--out must be a directory path" in one_error_line(capsys.readouterr().err)
    exe = Path(sys.executable).parent / "rlvr-sim"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "simulations"]
    args = [a for a in FAST["toys"] if a != "--quiet"] + ["--out", str(tmp_path / "o")]
    with open("/dev/full", "w") as full:  # the closing "wrote ..." line cannot be printed
        r = subprocess.run(cmd + args, stdout=full, stderr=subprocess.PIPE, text=True, timeout=300)
    last = r.stderr.strip().splitlines()[-1]  # after the progress bar
    assert r.returncode == 1 and last == "rlvr-sim: error: cannot write the output: No space left on device"
    assert "Traceback" not in r.stderr


def test_no_stray_files_in_the_working_directory(tmp_path):
    """A relative --out: the temporary sibling lives beside it and is gone after the run."""
    r = run_in_process(cli.main, *FAST["linear-head"], "--out", "run", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["run"]
    assert sorted(os.listdir(tmp_path / "run")) == FILES


def test_the_working_directory_is_never_the_output(tmp_path, monkeypatch, capsys):
    """The output directory is replaced as a whole: ``--out .`` (or a parent of the working
    directory) is refused, with or without --overwrite, and nothing is touched."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    for out in (".", str(work), "..", str(tmp_path / "work" / "..")):
        for extra in ([], ["--overwrite"]):
            assert cli.main(FAST["linear-head"] + ["--out", out] + extra) == 2
            assert "is the working directory or holds it" in one_error_line(capsys.readouterr().err)
    assert list(work.iterdir()) == [] and [p.name for p in tmp_path.iterdir()] == ["work"]
