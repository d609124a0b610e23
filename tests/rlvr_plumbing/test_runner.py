"""The one CLI runner (rlvr_plumbing.runner): dispatch, errors naming the flag, Ctrl-C, closed
pipes, --threads, the shared --param syntax and the settings dataclass -> flags generator."""

from __future__ import annotations

import argparse
import dataclasses
import signal
import subprocess
import sys
from typing import Optional

import pytest

from rlvr_plumbing import runner


@dataclasses.dataclass
class Settings:
    group_size: int = dataclasses.field(default=8, metadata={"help": "rollouts per prompt"})
    lr: float = dataclasses.field(default=3e-4, metadata={"help": "learning rate"})
    log_kl: bool = dataclasses.field(default=True, metadata={"help": "do not log the KL"})
    resume: bool = dataclasses.field(default=False, metadata={"help": "continue a run"})
    betas: tuple[float, float] = (0.9, 0.999)
    sizes: list[int] = dataclasses.field(default_factory=lambda: [1, 2])
    seed: Optional[int] = None
    optimizer: str = dataclasses.field(default="adam", metadata={"choices": ["adam", "sgd"]})
    device: str = dataclasses.field(default="auto", metadata={"default_text": "cuda if available"})
    out: str = dataclasses.field(default="runs", metadata={"flag": "--output-dir", "metavar": "DIR"})
    params: dict = dataclasses.field(default_factory=dict)
    hidden: int = dataclasses.field(default=1, metadata={"cli": False})


def _settings_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="demo")
    runner.add_settings(ap, Settings)
    return ap


# ---------------------------------------------------------------- settings
def test_add_settings_generates_flags_with_the_field_defaults_in_help():
    ap = _settings_parser()
    help_text = " ".join(ap.format_help().split())
    for text in ("--group-size GROUP_SIZE rollouts per prompt [8]", "learning rate [0.0003]", "--no-log-kl",
                 "--resume", "--betas BETAS BETAS", "[0.9 0.999]", "--sizes SIZES [SIZES ...]",
                 "{adam,sgd}", "[cuda if available]", "--output-dir DIR"):
        assert text in help_text, text
    assert "--hidden" not in help_text and "--params" not in help_text


def test_given_settings_returns_only_what_was_typed():
    ap = _settings_parser()
    assert runner.given_settings(ap.parse_args([]), Settings) == {}
    args = ap.parse_args(["--group-size", "4", "--no-log-kl", "--resume", "--betas", "0.5", "0.6", "--sizes", "3",
                          "--seed", "7", "--optimizer", "sgd", "--output-dir", "x"])
    got = runner.given_settings(args, Settings)
    assert got == {"group_size": 4, "log_kl": False, "resume": True, "betas": (0.5, 0.6), "sizes": [3],
                   "seed": 7, "optimizer": "sgd", "out": "x"}
    assert Settings(**got).betas == (0.5, 0.6)
    assert runner.given_settings(args, Settings, names=["seed"]) == {"seed": 7}


def test_add_settings_only_exclude_required():
    ap = argparse.ArgumentParser(prog="demo")
    runner.add_settings(ap, Settings, only=["lr", "group_size"], required=["group_size"])
    assert [a.dest for a in ap._actions[1:]] == ["lr", "group_size"]
    with pytest.raises(SystemExit):
        ap.parse_args([])
    ap = argparse.ArgumentParser(prog="demo")
    runner.add_settings(ap, Settings, exclude=["lr"])
    assert "lr" not in {a.dest for a in ap._actions}


# ------------------------------------------------------------------ --param
def test_parse_params_literals_and_words():
    assert runner.parse_params(["delta=0.5", "k=3", "normalize=true", "x=NONE", "y=null", "ema=conventional",
                                "pair=(1, 2)", "s='a b'", "z = 2 "]) == {
        "delta": 0.5, "k": 3, "normalize": True, "x": None, "y": None, "ema": "conventional", "pair": (1, 2),
        "s": "a b", "z": 2}
    assert runner.parse_params(["a=1", "a=2"]) == {"a": 2}     # the last one wins
    assert runner.parse_params(None) == {} and runner.parse_params([]) == {}
    assert runner.parse_params(["v=1e-3", "w=-inf"]) == {"v": 1e-3, "w": "-inf"}


@pytest.mark.parametrize("bad", ["delta", "=0.5", "1x=2", "a-b=1", ""])
def test_parse_params_refuses_what_is_not_name_value(bad):
    with pytest.raises(ValueError, match=r"^param must look like NAME=VALUE \(e.g. delta=0.5\), got "):
        runner.parse_params([bad])


def test_param_option_and_deprecated_json_alias(capsys):
    ap = argparse.ArgumentParser(prog="demo")
    runner.add_param_option(ap, json_alias="--advantage-params")
    args = ap.parse_args(["--param", "delta=0.5", "--advantage-params", '{"alpha": 2, "mode": "x", "n": null}'])
    assert runner.parse_params(args.param) == {"delta": 0.5, "alpha": 2, "mode": "x", "n": None}
    assert "deprecated" in capsys.readouterr().err
    assert ap.parse_args([]).param is None
    with pytest.raises(SystemExit):
        ap.parse_args(["--advantage-params", "[1, 2]"])
    with pytest.raises(SystemExit):
        ap.parse_args(["--advantage-params", "{oops"])
    ap = argparse.ArgumentParser(prog="demo")
    runner.add_param_option(ap, of="schedule", help="custom help")
    assert "custom help" in ap.format_help()


# ----------------------------------------------------------------- running
def _cli(func, *, settings: bool = False, threads: bool = False):
    def build() -> argparse.ArgumentParser:
        ap = argparse.ArgumentParser(prog="demo")
        sub = ap.add_subparsers(dest="command", required=True)
        for name in ("go", "weights"):
            p = sub.add_parser(name)
            p.add_argument("rest", nargs="*")
            if settings:
                runner.add_settings(p, Settings, only=["group_size", "log_kl"])
            runner.add_param_option(p)
            if threads:
                runner.add_threads_option(p)
            p.set_defaults(func=func)
        return ap
    return build


def test_run_dispatches_and_prints_returned_text(capsys):
    assert runner.run("demo", _cli(lambda a: "hello"), ["go"]) == 0
    assert capsys.readouterr().out == "hello\n"
    assert runner.run("demo", _cli(lambda a: "x\n"), ["go"]) == 0 and capsys.readouterr().out == "x\n"
    assert runner.run("demo", _cli(lambda a: None), ["go"]) == 0
    assert runner.run("demo", _cli(lambda a: 3), ["go"]) == 3
    assert capsys.readouterr().out == ""


def _raise(err):
    def func(args):
        raise err
    return func


@pytest.mark.parametrize("message, shown", [
    ("group_size must be an integer >= 1, got 0", "--group-size must be an integer >= 1, got 0"),
    ("log_kl must be a bool", "--no-log-kl must be a bool"),
    ("param must look like NAME=VALUE", "--param must look like NAME=VALUE"),
    ("threads: too many", "--threads: too many"),
    ("something else went wrong", "something else went wrong"),
    ("group_sizes must differ", "group_sizes must differ"),        # not a setting: unchanged
])
def test_value_errors_exit_2_naming_the_flag(capsys, message, shown):
    code = runner.run("demo", _cli(_raise(ValueError(message)), settings=True, threads=True), ["go"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err == f"demo: error: {shown}\n"


def test_error_message_without_a_parser():
    assert runner.error_message(ValueError("group_size bad")) == "group_size bad"


def test_keyboard_interrupt_is_one_line_and_130(capsys):
    code = runner.run("demo", _cli(_raise(KeyboardInterrupt())), ["go"])
    out, err = capsys.readouterr()
    assert code == 130 and out == "" and err.strip() == "demo: interrupted" and "Traceback" not in err


def test_keyboard_interrupt_says_what_the_command_did_not_write(capsys):
    code = runner.run("demo", _cli(_raise(KeyboardInterrupt("no report written; 'rep' is left as it was"))), ["go"])
    out, err = capsys.readouterr()
    assert code == 130 and out == ""
    assert err.strip().splitlines() == ["demo: interrupted: no report written; 'rep' is left as it was"]


def test_other_errors_are_not_swallowed():
    with pytest.raises(RuntimeError):
        runner.run("demo", _cli(_raise(RuntimeError("bug"))), ["go"])


def test_default_command(capsys):
    seen = []
    build = _cli(lambda a: seen.append((a.command, a.rest)))
    assert runner.run("demo", build, ["a", "b"], default_command="weights") == 0
    assert runner.run("demo", build, ["go", "c"], default_command="weights") == 0
    assert seen == [("weights", ["a", "b"]), ("go", ["c"])]
    assert runner.run("demo", build, ["--help"], default_command="weights") == 0
    assert "{go,weights}" in capsys.readouterr().out


def test_threads_option_is_checked_and_applied(capsys):
    code = runner.run("demo", _cli(lambda a: None, threads=True), ["go", "--threads", "0"])
    assert code == 2 and capsys.readouterr().err == "demo: error: --threads must be an integer >= 1, got 0\n"
    n = runner.default_threads()
    assert isinstance(n, int) and n >= 1
    assert runner.apply_threads(5, explicit=False) is None


def test_all_cores_commands_default_to_every_core(monkeypatch):
    """``add_threads_option(all_cores=True)``: the command's default is every core; the others half."""
    monkeypatch.setattr(runner.os, "sched_getaffinity", lambda pid: set(range(6)), raising=False)
    assert runner.default_threads() == 3 and runner.default_threads(all_cores=True) == 6
    seen = []
    monkeypatch.setattr(runner, "apply_threads", lambda n, explicit, all_cores=False: seen.append((n, all_cores)))

    def build() -> argparse.ArgumentParser:
        ap = argparse.ArgumentParser(prog="demo")
        sub = ap.add_subparsers(dest="command", required=True)
        for name, every in (("go", False), ("weights", True)):
            p = sub.add_parser(name)
            runner.add_threads_option(p, all_cores=every)
            p.set_defaults(func=lambda a: None)
        return ap

    for argv in (["go"], ["weights"], ["weights", "--threads", "1"]):
        assert runner.run("demo", build, argv) == 0
    assert seen == [(None, False), (None, True), (1, True)]
    help_text = build()._subparsers._group_actions[0].choices["weights"].format_help()
    assert "[6;" in help_text


def test_cli_defaults_of_the_side_by_side_commands():
    from analysis.diff import cli as diff_cli
    from simulations import categorical

    assert diff_cli.build_parser().parse_args(["weights", "a", "b", "--out", "o"]).threads_all_cores is True
    assert not hasattr(diff_cli.build_parser().parse_args(["hidden-states", "c", "--rollouts", "r", "--out", "o"]),
                       "threads_all_cores")
    sub = argparse.ArgumentParser().add_subparsers()
    assert categorical.add_parser(sub).parse_args(["--out", "o"]).threads_all_cores is True


def test_apply_threads_sets_torch_and_the_environment():
    code = ("import os, torch; from rlvr_plumbing import runner; n = runner.apply_threads(2); "
            "print(n, torch.get_num_threads(), os.environ['OMP_NUM_THREADS']); "
            "print(runner.apply_threads(None) == runner.default_threads() == torch.get_num_threads())")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert res.stdout.split() == ["2", "2", "2", "True"]


def test_console_entry_point_exits_with_the_status(monkeypatch, capsys):
    main_exit = runner.console("demo", _cli(_raise(ValueError("group_size bad")), settings=True))
    monkeypatch.setattr(sys, "argv", ["demo", "go"])
    before = signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(SystemExit) as exc:
            main_exit()
        # the command is over: Ctrl-C while Python shuts down is ignored (no traceback, no -2)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)                # this process is pytest's: give Ctrl-C back
    assert exc.value.code == 2 and capsys.readouterr().err == "demo: error: --group-size bad\n"
    assert "demo" in main_exit.__doc__


def test_closed_pipe_exits_141_quietly():
    """A reader that is gone before the first write: exit status 141 and nothing on stderr."""
    code = ("import argparse; from rlvr_plumbing import runner\n"
            "def build():\n"
            "    ap = argparse.ArgumentParser(prog='demo'); ap.set_defaults(func=lambda a: 'x' * 100000)\n"
            "    return ap\n"
            "raise SystemExit(runner.run('demo', build, []))\n")
    res = subprocess.run(["bash", "-c", f'{sys.executable} -c "{code}" | true; echo "status=${{PIPESTATUS[0]}}"'],
                         capture_output=True, text=True, timeout=300)
    assert res.stdout == "status=141\n" and res.stderr == ""


def test_negative_numbers_in_scientific_notation_are_values_in_every_subcommand(capsys):
    seen = []

    def build():
        ap = argparse.ArgumentParser(prog="demo")
        sub = ap.add_subparsers(dest="command", required=True)
        go = sub.add_parser("go")
        go.add_argument("--reward-values", nargs=2, type=float)
        go.set_defaults(func=lambda a: seen.append(a.reward_values))
        return ap

    assert runner.run("demo", build, ["go", "--reward-values", "-1e308", "1e308"]) == 0
    assert runner.run("demo", build, ["go", "--reward-values", "-.5", "-inf"]) == 0
    assert seen == [[-1e308, 1e308], [-0.5, float("-inf")]]
    assert runner.run("demo", build, ["go", "--reward-values", "-x", "1"]) == 2  # still an unknown option
