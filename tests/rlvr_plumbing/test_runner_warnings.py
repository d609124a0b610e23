"""Warnings stay out of progress bars (issue 30, item 7): a dependency's deprecation notice raised
while a tqdm bar is drawn is printed once, after the bar; the library's own warnings still show,
on a line of their own; ``pytest.warns`` still records both."""

from __future__ import annotations

import argparse
import sys
import warnings

import pytest

from rlvr_plumbing import runner


class OwnWarning(UserWarning):
    """Stands for a warning of the library (e.g. analysis.diff.lora.BaseIdentityWarning)."""


def _parser(own: bool = True, fail: bool = False) -> argparse.ArgumentParser:
    from tqdm import tqdm

    def work(args: argparse.Namespace) -> int:
        for i in tqdm(range(4), desc="bar", file=sys.stderr, mininterval=0, ascii=True):
            # what transformers does at each forward pass: a FutureWarning from its own module
            warnings.warn_explicit("`old_arg` is deprecated", FutureWarning, "transformers/fake.py", 10 + i,
                                   module="transformers.fake")
            if own and i == 1:
                warnings.warn("the base could not be verified", OwnWarning, stacklevel=1)
        if fail:
            raise ValueError("steps must be >= 1, got 0")
        return 0

    ap = argparse.ArgumentParser(prog="demo")
    ap.set_defaults(func=work)
    return ap


def _stderr_lines(capsys) -> list[str]:
    err = capsys.readouterr().err
    return [seg for line in err.split("\n") for seg in line.split("\r") if seg.strip()]


def test_dependency_warning_printed_once_after_the_bar_own_warning_kept(capsys):
    def shown(message, category, filename, lineno, file=None, line=None):  # as a console script prints
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))

    with warnings.catch_warnings():
        warnings.simplefilter("default")  # a fresh interpreter's filter for FutureWarning and UserWarning
        warnings.showwarning = shown
        assert runner.run("demo", _parser, []) == 0
        assert warnings.showwarning is shown  # put back
    lines = _stderr_lines(capsys)
    dep = [i for i, ln in enumerate(lines) if "`old_arg` is deprecated" in ln]
    bar_done = max(i for i, ln in enumerate(lines) if "bar: 100%" in ln)
    # four call sites, one message: printed once, after the last drawing of the bar
    assert len(dep) == 1 and dep[0] > bar_done, lines
    assert not any("bar:" in ln and "deprecated" in ln for ln in lines)
    own = [ln for ln in lines if "OwnWarning: the base could not be verified" in ln]
    assert len(own) == 1 and own[0].startswith(__file__) and "bar:" not in own[0], lines  # a line of its own


def test_held_warnings_are_shown_when_the_command_fails(capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        warnings.showwarning = lambda m, c, f, n, file=None, line=None: sys.stderr.write(f"W {m}\n")
        assert runner.run("demo", lambda: _parser(own=False, fail=True), []) == 2
    err = capsys.readouterr().err
    assert err.count("W `old_arg` is deprecated") == 1
    assert err.index("W `old_arg`") < err.index("demo: error: steps must be >= 1, got 0")


def test_pytest_warns_still_records_them():
    with pytest.warns(OwnWarning, match="could not be verified"), pytest.warns(FutureWarning, match="old_arg"):
        assert runner.run("demo", _parser, []) == 0
