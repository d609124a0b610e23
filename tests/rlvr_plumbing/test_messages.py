"""Messages as the user reads them (issue 30, item 6): every Python name of the library shown as the
flag or positional typed on the command line (:func:`rlvr_plumbing.runner.error_message`), and
"did you mean" for registry names, presets, choices and subcommands
(:func:`rlvr_plumbing.registry.close_name`); a Python caller keeps the library's own names.

The commands run in-process through their ``main(argv)`` (:mod:`tests.in_process`), as the
console scripts run them."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from rlvr_plumbing import checks, runner
from rlvr_plumbing.registry import Registry, close_name, did_you_mean
from tests.in_process import run_in_process

VERL_LINE = '{"step": 1, "input": "q1", "output": "a", "score": 1.0}\n'


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A directory that passes for a base checkpoint (config.json + model.safetensors): enough for
    the refusals of the inputs that come after it."""
    from safetensors.numpy import save_file

    d = tmp_path_factory.mktemp("base")
    (d / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    save_file({"lm_head.weight": np.zeros((4, 2), np.float32)}, str(d / "model.safetensors"))
    return d


def _diff(*argv):
    from analysis.diff import cli

    return run_in_process(cli.main, *argv)


def _error(res, prog: str) -> str:
    """The message of a refusal: the last line of stderr (argparse prints the usage above it)."""
    assert res.returncode == 2 and res.stdout == "", res
    last = res.stderr.splitlines()[-1]
    assert last.startswith(f"{prog}: error: "), res.stderr
    return last[len(f"{prog}: error: "):]


# --------------------------------------------------------------- rlvr-diff
def test_a_missing_rl_checkpoint_is_named_by_its_positional(base, tmp_path):
    msg = _error(_diff(base, tmp_path / "nope", "--out", tmp_path / "rep"), "rlvr-diff")
    assert msg.startswith(f"RL 1: {str(tmp_path / 'nope')!r} does not exist"), msg       # was checkpoints[0]
    msg = _error(_diff(base, base, tmp_path / "nope", "--out", tmp_path / "rep"), "rlvr-diff")
    assert msg.startswith(f"RL 2: {str(tmp_path / 'nope')!r} does not exist"), msg       # was checkpoints[1]
    msg = _error(_diff(tmp_path / "nobase", base, "--out", tmp_path / "rep"), "rlvr-diff")
    assert msg.startswith(f"BASE: {str(tmp_path / 'nobase')!r} does not exist"), msg      # was base:
    msg = _error(_diff(base, "--out", tmp_path / "rep"), "rlvr-diff")
    assert msg == "RL: give at least one RL checkpoint directory or --series RUN_DIR"       # was checkpoints:
    assert not (tmp_path / "rep").exists()


def test_series_messages_name_the_flag(base, tmp_path):
    empty = tmp_path / "run"
    empty.mkdir()
    msg = _error(_diff(base, "--series", empty, "--out", tmp_path / "rep"), "rlvr-diff")
    assert msg.startswith("--series must hold checkpoint-<step> directories"), msg            # was run_dir
    msg = _error(_diff(base, "--series", tmp_path / "no", "--out", tmp_path / "rep"), "rlvr-diff")
    assert msg.startswith("--series must be a training-run directory"), msg
    msg = _error(_diff("reconstruct", "--series", empty, "--extrapolate", "3", "--out", tmp_path / "ck"), "rlvr-diff")
    assert msg.startswith("--series must hold checkpoint-<step> directories"), msg
    a, b = tmp_path / "a", tmp_path / "b"
    msg = _error(_diff("reconstruct", "--series", a, b, "--extrapolate", "3", "--out", tmp_path / "ck"), "rlvr-diff")
    assert msg.startswith(f"--steps: the step of --series {str(a)!r} cannot be read from its name"), msg
    msg = _error(_diff("reconstruct", base, tmp_path / "nope", "--rank", "1", "--out", tmp_path / "ck"), "rlvr-diff")
    assert msg.startswith(f"RL: {str(tmp_path / 'nope')!r} does not exist"), msg               # was rl:


def test_a_subcommand_typo_is_not_taken_for_a_checkpoint(base, tmp_path):
    res = _diff("weigths", base, "--out", tmp_path / "rep")
    assert _error(res, "rlvr-diff") == ("invalid command: 'weigths' (choose from 'hidden-states', 'kl', 'reconstruct', "
                                        "'weights'); did you mean 'weights'?")
    assert res.stderr.startswith("usage: rlvr-diff")
    (tmp_path / "weigths").mkdir()                     # a directory of that name is the default command's BASE
    msg = _error(_diff(tmp_path / "weigths", base, "--out", tmp_path / "rep"), "rlvr-diff")
    assert msg.startswith("BASE: "), msg


def test_python_callers_keep_the_python_names(base, tmp_path):
    from analysis.diff import diff, series

    with pytest.raises(ValueError, match=r"^checkpoints\[0\]: .* does not exist"):
        diff(str(base), [str(tmp_path / "nope")], device="cpu", progress=False)
    with pytest.raises(ValueError, match=r"^run_dir must hold checkpoint-<step> directories"):
        series(tmp_path)


# -------------------------------------------------------------- rlvr-audit
def test_audit_messages_name_the_flags(tmp_path):
    from analysis import audit_cli
    from analysis.audit import readers

    weird = tmp_path / "weird.txt"
    weird.write_text("hello\n")
    msg = _error(run_in_process(audit_cli.main, weird, "--out", tmp_path / "rep"), "rlvr-audit")
    assert msg.endswith("matches its names or columns); pass --format"), msg                # was format=... (--format)
    assert "format=" not in msg
    log = tmp_path / "rollouts.jsonl"
    log.write_text(VERL_LINE + "{broken\n" + VERL_LINE)
    msg = _error(run_in_process(audit_cli.main, log, "--out", tmp_path / "rep"), "rlvr-audit")
    assert msg.startswith(f"{log}:2: not a valid JSON line") and msg.endswith("; pass --skip-bad-lines to skip such "
                                                                              "lines"), msg
    assert not (tmp_path / "rep").exists()
    # the library says it in Python
    with pytest.raises(ValueError, match=r"; pass format=\.\.\. \(--format\)$"):
        readers.read(weird)
    with pytest.raises(ValueError, match=r"; pass skip_bad_lines=True \(--skip-bad-lines\) to skip such lines$"):
        readers.read(log)


# ------------------------------------------------------- the runner itself
def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="demo")
    sub = ap.add_subparsers(dest="command", required=True)
    go = sub.add_parser("go")
    go.add_argument("inputs", metavar="BASE RL", nargs="*")
    go.add_argument("--group-size", type=int)
    go.add_argument("--tokenizer", metavar="DIR")
    go.add_argument("--series", nargs="+", metavar="RUN_DIR")
    go.add_argument("--preset", default=None)
    go.add_argument("--format", choices=("markdown", "csv"))
    other = sub.add_parser("other")
    other.add_argument("checkpoint", metavar="CHECKPOINT")
    return ap


@pytest.mark.parametrize("message, shown", [
    ("group_size: cannot infer the group size; pass group_size=num_generations (--group-size)",
     "--group-size: cannot infer the group size; pass --group-size num_generations"),
    ("tokenizer: no tokenizer was found; pass tokenizer= (a tokenizer directory)",
     "--tokenizer: no tokenizer was found; pass --tokenizer (a tokenizer directory)"),
    ("mixed formats; pass format=... (--format) to read one", "mixed formats; pass --format to read one"),
    ("lines; pass skip_bad_lines=True (--skip-bad-lines) to skip", "lines; pass --skip-bad-lines to skip"),
    ("pass lengths=None", "pass lengths=None"),                               # not an argument: left as it is
    ("run_dir must hold checkpoints", "--series must hold checkpoints"),     # a metavar
    ("base: 'x' does not exist", "BASE: 'x' does not exist"),                 # a word of a positional's metavar
    ("rl: 'x' does not exist", "RL: 'x' does not exist"),
    ("inputs[1]: 'b' is a file", "BASE RL 2: 'b' is a file"),
    ("checkpoints[0]: '/runs/a/checkpoint-5' has no weights", "--series: '/runs/a/checkpoint-5' has no weights"),
    ("checkpoint: 'x' is bad", "checkpoint: 'x' is bad"),    # another subcommand's positional: not typed here
    ("preset must be one of tiny-cpu, small-gpu, got 'tiny-cpuu'",
     "--preset must be one of tiny-cpu, small-gpu, got 'tiny-cpuu'; did you mean 'tiny-cpu'?"),
    ("preset must be one of tiny-cpu, small-gpu, got 'huge'", "--preset must be one of tiny-cpu, small-gpu, got 'huge'"),
])
def test_error_message_shows_the_flags(message, shown):
    ap = _parser()
    args = ap.parse_args(["go", "a", "b", "--series", "/runs/a"])
    assert runner.error_message(ValueError(message), ap, args) == shown
    assert runner.error_message(ValueError(message)) == message                     # no parser: as the library says


def test_invalid_choices_and_subcommands_suggest_the_close_one(capsys):
    def build():
        ap = _parser()
        for sub in ap._subparsers._group_actions[0].choices.values():
            sub.set_defaults(func=lambda a: None)
        return ap

    assert runner.run("demo", build, ["og"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == "demo: error: invalid command: 'og' (choose from 'go', 'other'); did you mean 'go'?"
    assert runner.run("demo", build, ["go", "--format", "cvs"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "demo go: error: argument --format: invalid choice: 'cvs' (choose from 'markdown', 'csv'); did you mean 'csv'?")
    assert runner.run("demo", build, ["go", "--format", "tsv"]) == 2               # a different name, not a typo
    assert capsys.readouterr().err.splitlines()[-1] == (
        "demo go: error: argument --format: invalid choice: 'tsv' (choose from 'markdown', 'csv')")
    assert runner.run("demo", build, ["go", "--format", "csv"]) == 0


# ----------------------------------------------------------- suggestions
@pytest.mark.parametrize("typed, names, hit", [
    ("asymgrpo", ["grpo", "asym_grpo", "dr_grpo"], "asym_grpo"),
    ("AsymGRPO", ["grpo", "asym_grpo"], "asym_grpo"),
    ("dr-grpo", ["grpo", "dr_grpo"], "dr_grpo"),
    ("tiny_cpu", ["tiny-cpu", "small-gpu"], "tiny-cpu"),
    ("fade_fig22", ["fade_fig2", "fade_fig4"], "fade_fig2"),
    ("mkae", ["list", "make", "check"], "make"),
    ("cvs", ["markdown", "csv"], "csv"),
    ("tsv", ["markdown", "csv"], None),
    ("nope", ["grpo", "opo", "rloo"], None),
    ("foo", ["opo"], None),
    ("grpo", ["grpo", "dr_grpo"], None),                                   # a registered name is no typo
])
def test_close_name(typed, names, hit):
    assert close_name(typed, names) == hit
    assert did_you_mean(typed, names) == ("" if hit is None else f"; did you mean {hit!r}?")


def test_registry_and_choice_suggest_the_close_name():
    from rlvr_theory import advantages

    with pytest.raises(ValueError, match=r"^advantage: unknown advantage 'asymgrpo'; allowed: .*, asym_grpo, .*"
                                         r"; did you mean 'asym_grpo'\?$"):
        advantages.get("asymgrpo")
    shapes = Registry("shape")
    shapes.register(type("Square", (), {"name": "square"}))
    with pytest.raises(ValueError, match=r"^shape: unknown shape 'circle'; allowed: square$"):
        shapes.get("circle")
    with pytest.raises(ValueError, match=r"^format must be one of 'markdown', 'csv'; got 'cvs'; did you mean 'csv'\?$"):
        checks.choice("format", "cvs", ("markdown", "csv"))


def test_guard_presets_suggest_the_close_one():
    from analysis.guardrails import Guard

    with pytest.raises(ValueError, match=r"^guard: 'defualt' is neither a preset \(default\) nor a rules file; "
                                         r"did you mean 'default'\?$"):
        Guard.from_spec("defualt")


@pytest.mark.parametrize("typed", ["asymgrpo", "AsymGRPO", "asym-grpo"])
def test_rlvr_theory_suggests_the_advantage(typed):
    from rlvr_theory import cli

    msg = _error(run_in_process(cli.main, "masses", "--advantage", typed, "--p", "0.2"), "rlvr-theory")
    assert msg.startswith(f"--advantage: unknown advantage {typed!r}; allowed: ") and \
        msg.endswith("; did you mean 'asym_grpo'?"), msg


def test_subcommand_and_preset_typos_suggest_the_close_one(tmp_path):
    from rlvr_theory import cli as theory_cli
    from simulations.grpo import cli as train_cli

    res = run_in_process(theory_cli.main, "mases", "--advantage", "grpo", "--p", "0.2")
    assert _error(res, "rlvr-theory") == ("invalid command: 'mases' (choose from 'list', 'masses', 'table', "
                                          "'tail-miss'); did you mean 'masses'?")
    res = run_in_process(train_cli.main, "grpo", "--preset", "tiny-cpuu", "--out", tmp_path / "run")
    assert res.returncode == 2 and res.stderr.splitlines()[-1] == (
        "rlvr-train grpo: error: argument --preset: invalid choice: 'tiny-cpuu' (choose from 'tiny-cpu', "
        "'small-gpu'); did you mean 'tiny-cpu'?")
    res = run_in_process(train_cli.main, "grpo", "--task", "arithh", "--out", tmp_path / "run")
    assert _error(res, "rlvr-train").endswith("; allowed: arith, count, modular, sort; did you mean 'arith'?")
    assert not (tmp_path / "run").exists()
