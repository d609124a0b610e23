"""rlvr-figures under faults: --out and --doc are checked before any figure is made, unknown
names leave nothing behind, and a write the system refuses is one line and exit 1.

CLI cases run ``cli.main(argv)`` in-process (:func:`run_in_process`: the code the console script
runs before ``sys.exit``, its output captured), as do the faults that need a patch (read-only
place, full disk); a write to a full standard output runs the real console script
(``.venv/bin/rlvr-figures``, else ``python -m figures``) in a subprocess."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from figures import cli, registry
from figures.registry import Claim, FigureSpec
from rlvr_plumbing import io
from tests.in_process import run_in_process

ROOT = Path(__file__).resolve().parents[2]
_SCRIPT = Path(sys.executable).with_name("rlvr-figures")


def rlvr_figures(*args: str, stdout=subprocess.PIPE) -> subprocess.CompletedProcess:
    cmd = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "figures"]
    env = dict(os.environ, PYTHONPATH=str(ROOT), MPLBACKEND="Agg")
    return subprocess.run(cmd + [str(a) for a in args], stdout=stdout, stderr=subprocess.PIPE, text=True,
                          env=env, cwd=ROOT, timeout=300)


def _tiny() -> FigureSpec:
    def plot(df):
        import matplotlib.pyplot as plt
        return plt.figure()
    return FigureSpec("zz_tiny", "t", "s", lambda: pd.DataFrame({"x": [1.0]}), plot,
                      lambda df: [Claim("one is one", "nowhere", 1.0, 1.0, 0.0)])


@pytest.fixture
def no_work(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("a figure was made before --out / --doc were checked")
    monkeypatch.setattr(registry, "make", boom)


def test_make_out_that_is_a_file_or_under_a_file_is_refused_before_work(tmp_path, no_work):
    f = tmp_path / "notes.txt"
    f.write_text("mine")
    p = run_in_process(cli.main, "make", "agrae_fig6", "--out", f)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr == f"rlvr-figures: error: --out: {str(f)!r} is an existing file; give a directory path\n"
    p = run_in_process(cli.main, "make", "agrae_fig6", "--out", f / "figs")
    assert p.returncode == 2
    assert p.stderr == f"rlvr-figures: error: --out: {str(f / 'figs')!r} lies under the file {str(f)!r}\n"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["notes.txt"] and f.read_text() == "mine"


def test_check_doc_that_is_a_directory_or_under_a_file_is_refused_before_work(tmp_path, no_work):
    f = tmp_path / "notes.txt"
    f.write_text("mine")
    out = tmp_path / "figs"
    p = run_in_process(cli.main, "check", "agrae_fig6", "--out", out, "--doc", tmp_path)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr == f"rlvr-figures: error: --doc: {str(tmp_path)!r} is an existing directory; give a file path\n"
    p = run_in_process(cli.main, "check", "agrae_fig6", "--out", out, "--doc", f / "r.md")
    assert p.returncode == 2
    assert p.stderr == f"rlvr-figures: error: --doc: {str(f / 'r.md')!r} lies under the file {str(f)!r}\n"
    assert not out.exists()


@pytest.mark.parametrize("argv,flag", [
    (["make", "agrae_fig6", "--out", "{tmp}/figs"], "--out"),
    (["check", "agrae_fig6", "--out", "{tmp}/figs", "--doc", "{tmp}/r.md"], "--out"),
])
def test_read_only_place_is_refused_before_work(tmp_path, monkeypatch, capsys, no_work, argv, flag):
    def read_only(*a, **k):
        raise OSError(errno.EROFS, "Read-only file system")
    monkeypatch.setattr(io.tempfile, "mkstemp", read_only)
    assert cli.main([a.format(tmp=tmp_path) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err == f"rlvr-figures: error: {flag}: cannot write in {str(tmp_path)!r} (Read-only file system)\n"
    assert list(tmp_path.iterdir()) == []


def test_read_only_doc_is_refused_before_work(tmp_path, monkeypatch, capsys, no_work):
    real = io.tempfile.mkstemp

    def read_only_docs(*a, dir=None, **k):
        if str(dir) == str(tmp_path / "docs"):
            raise OSError(errno.EROFS, "Read-only file system")
        return real(*a, dir=dir, **k)
    (tmp_path / "docs").mkdir()
    monkeypatch.setattr(io.tempfile, "mkstemp", read_only_docs)
    rc = cli.main(["check", "agrae_fig6", "--out", str(tmp_path / "figs"), "--doc", str(tmp_path / "docs" / "r.md")])
    assert rc == 2
    assert capsys.readouterr().err == (f"rlvr-figures: error: --doc: cannot write in {str(tmp_path / 'docs')!r} "
                                       "(Read-only file system)\n")


def test_unknown_name_after_valid_ones_leaves_nothing(tmp_path, capsys):
    """Names are all checked before the first figure is made (make and check alike)."""
    for sub in (["make", "agrae_fig6", "nope"], ["check", "agrae_fig6", "nope", "--doc", str(tmp_path / "r.md")]):
        assert cli.main(sub + ["--out", str(tmp_path / "figs")]) == 2
        assert "unknown figure 'nope'" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_non_empty_out_folder_keeps_other_files(tmp_path):
    """``--out`` is a shared folder: a figure adds its files and keeps everybody else's."""
    (tmp_path / "mine.txt").write_text("keep")
    with registry.registered(_tiny()):
        assert cli.main(["make", "zz_tiny", "--out", str(tmp_path), "--quiet"]) == 0
    assert (tmp_path / "mine.txt").read_text() == "keep"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.txt", "zz_tiny.claims.csv", "zz_tiny.csv",
                                                          "zz_tiny.png"]


def test_disk_full_writing_the_doc_leaves_nothing_and_says_so(tmp_path, monkeypatch, capsys):
    doc = tmp_path / "r.md"
    real = Path.write_text

    def write_text(self, *a, **k):
        if Path(self).name.startswith(".r.md."):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, *a, **k)
    with registry.registered(_tiny()):
        monkeypatch.setattr(Path, "write_text", write_text)
        rc = cli.main(["check", "zz_tiny", "--out", str(tmp_path / "figs"), "--doc", str(doc), "--quiet"])
    assert rc == 1
    assert capsys.readouterr().err == f"rlvr-figures: error: No space left on device: {str(doc)!r}\n"
    assert not doc.exists() and [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_disk_full_writing_a_figure_leaves_no_temporary_file(tmp_path, monkeypatch, capsys):
    def full(self, *a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")
    with registry.registered(_tiny()):
        monkeypatch.setattr(pd.DataFrame, "to_csv", full)
        assert cli.main(["make", "zz_tiny", "--out", str(tmp_path), "--quiet"]) == 1
    assert capsys.readouterr().err == f"rlvr-figures: error: No space left on device: {str(tmp_path / 'zz_tiny.csv')!r}\n"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("fails", ["csv", "png"])
def test_disk_full_on_a_new_out_folder_leaves_nothing(tmp_path, monkeypatch, capsys, fails):
    """``--out`` that does not exist yet appears with the first figure's files, complete (built in a
    hidden temporary sibling and renamed, :func:`rlvr_plumbing.io.atomic_dir`): a full disk while writing
    them leaves no folder, and the message names the file under ``--out``."""
    import matplotlib.figure

    def full(self, *a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")
    if fails == "csv":
        monkeypatch.setattr(pd.DataFrame, "to_csv", full)
    else:
        monkeypatch.setattr(matplotlib.figure.Figure, "savefig", full)
    out = tmp_path / "figs"
    with registry.registered(_tiny()):
        assert cli.main(["make", "zz_tiny", "--out", str(out), "--quiet"]) == 1
    name = out / f"zz_tiny.{fails}"
    assert capsys.readouterr().err == f"rlvr-figures: error: No space left on device: {str(name)!r}\n"
    assert list(tmp_path.iterdir()) == []


def test_disk_full_at_a_later_figure_keeps_the_earlier_ones(tmp_path, monkeypatch, capsys):
    """The first figure creates --out; the second one fails: the first stays complete, the second
    leaves nothing (no temporary file)."""
    second = FigureSpec("zz_tiny2", "t", "s", lambda: pd.DataFrame({"y": [2.0]}), _tiny().plot, _tiny().claims)
    real = pd.DataFrame.to_csv

    def full_for_the_second(self, path, *a, **k):
        if "zz_tiny2" in str(path) or "zz_tiny2" in os.path.basename(os.path.dirname(str(path))):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, path, *a, **k)
    out = tmp_path / "figs"
    with registry.registered(_tiny()), registry.registered(second):
        monkeypatch.setattr(pd.DataFrame, "to_csv", full_for_the_second)
        assert cli.main(["make", "zz_tiny", "zz_tiny2", "--out", str(out), "--quiet"]) == 1
    assert capsys.readouterr().err.startswith("rlvr-figures: error: No space left on device: ")
    assert sorted(p.name for p in out.iterdir()) == ["zz_tiny.claims.csv", "zz_tiny.csv", "zz_tiny.png"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["figs"]


def test_stdout_on_a_full_device_is_one_line_exit_1():
    with open("/dev/full", "w") as full:
        p = rlvr_figures("list", stdout=full)
    assert p.returncode == 1
    assert p.stderr == "rlvr-figures: error: cannot write the output: No space left on device\n"
