"""Run a command's ``main(argv)`` in the test process, as the console script would run it.

Starting the console script in a subprocess costs 3-7 s of imports (torch, pandas, scipy) on a
2-core machine; the error paths, overwrite policies and scale limits the reliability tests check
are the code of ``rlvr_plumbing.runner.run``, which ``main(argv)`` runs too. Each command keeps one
test through its real console script (a full standard output, a closed pipe, a signal, ``python
-m``); the others call :func:`run_in_process`. The thread settings a command applies are put back
after each test by the autouse fixture of the root ``conftest.py``.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path


def run_in_process(main: Callable[[Sequence[str]], int], *args: object,
                   cwd: str | Path | None = None) -> subprocess.CompletedProcess:
    """``main(argv)`` with ``argv = [str(a) for a in args]``, returned as :func:`subprocess.run`
    returns the console script: the exit status ``runner.run`` gives (what the script passes to
    ``sys.exit``) and the captured stdout and stderr, with warnings printed there as a fresh
    interpreter prints them (default filters). ``cwd``: the command's working directory, put back
    afterwards. Never ``main_exit`` (it changes the SIGINT handler of the process)."""

    def show(message, category, filename, lineno, file=None, line=None):
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))

    argv = [str(a) for a in args]
    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            warnings.resetwarnings()
            warnings.simplefilter("default")
            for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
                warnings.simplefilter("ignore", category)
            warnings.showwarning = show
            if cwd is not None:
                os.chdir(cwd)
            code = main(argv)
    finally:
        os.chdir(here)
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())
