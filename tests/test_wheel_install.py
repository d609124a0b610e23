"""The wheel of `make dist` installs into a fresh virtual environment and its console script runs.

What the test does: builds the wheel from a copy of this checkout with the command of
`make dist` (``pip wheel --no-deps --no-build-isolation``: setuptools of the running
environment, no network); checks that it holds every package and subpackage of the source tree
and their data files; creates a fresh venv (``python -m venv``, no system site packages) and
installs the wheel into it offline (``--no-index --find-links DIST``) **with dependency
resolution** (no ``--no-deps``); runs ``rlvr-theory masses --advantage grpo --p 0.3 --G 8`` from
the venv's ``bin/`` and compares its numbers with :mod:`rlvr_theory.masses` computed here.

How the dependencies get there without copying gigabytes: the test environment's site-packages
(this interpreter's: numpy, torch, ...) is put on ``PYTHONPATH`` for the install and the run.
pip counts what it finds there as installed, so the resolution of the wheel's ``Requires-Dist``
(and of its ``train`` extra) succeeds offline only if the tested versions satisfy them, and
``pip check`` then verifies them.  The editable install of this checkout in that site-packages
is a ``.pth`` hook, which Python does not run for ``PYTHONPATH`` entries: the test asserts that
``rlvr_theory`` and the console script come from the fresh venv, not from this checkout.

What it does not prove: that pip can download and resolve the dependencies from an index on
another machine (the README's commands do that; their versions are those of requirements/lock.txt),
nor the ``trl`` / ``verl`` extras (their environments are `make integration-envs`).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import numpy as np
import pytest

from rlvr_theory import masses

pytestmark = pytest.mark.slow  # builds a wheel and a venv (about 30 s on 2 busy cores)

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("rlvr_plumbing", "rlvr_theory", "analysis", "simulations", "integrations", "figures")
#: files under the package folders that are not part of the installed package: the pip requirements
#: of the integration test environments (read by the Makefile from the checkout)
NOT_PACKAGE_DATA = re.compile(r"^integrations/requirements-\w+\.txt$")
_SKIP = shutil.ignore_patterns(".git", ".venv*", "build", "dist", "*.egg-info", "__pycache__", "*.pyc",
                               ".pytest_cache", ".hypothesis", ".ipynb_checkpoints", "out", "runs")


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def _source_files() -> tuple[set[str], set[str]]:
    """The modules and the data files of the packages in this checkout (paths relative to ROOT)."""
    modules, data = set(), set()
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*"):
            rel = path.relative_to(ROOT).as_posix()
            if not path.is_file() or "__pycache__" in path.parts or rel.startswith("figures/out/"):
                continue
            if path.suffix == ".py":
                modules.add(rel)
            elif not path.suffix == ".pyc" and not NOT_PACKAGE_DATA.match(rel):
                data.add(rel)
    return modules, data


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("src") / "rlvr-diagnostics"
    shutil.copytree(ROOT, src, ignore=_SKIP)  # no stale build/ of the checkout, and the checkout untouched
    dist = src / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
          "--wheel-dir", str(dist), str(src)])
    (whl,) = dist.glob("rlvr_diagnostics-*.whl")
    return whl


def test_wheel_holds_every_package_and_data_file(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    modules, data = _source_files()
    assert {m for m in modules if m.endswith("/__init__.py")} >= {f"{p}/__init__.py" for p in PACKAGES}
    missing = sorted((modules | data) - names)
    assert not missing, f"not in {wheel.name} (package list / package-data of pyproject.toml): {missing}"
    meta = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/entry_points.txt")))
    for script in ("rlvr-theory", "rlvr-figures", "rlvr-sim", "rlvr-diff", "rlvr-train", "rlvr-audit"):
        assert script.encode() in meta, script


def test_wheel_installs_into_a_fresh_venv_and_runs(wheel, tmp_path):
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])  # pip is driven from outside (--python)
    assert "include-system-site-packages = false" in (venv / "pyvenv.cfg").read_text()
    bin_dir = venv / ("Scripts" if os.name == "nt" else "bin")
    vpy = bin_dir / "python"
    deps = sysconfig.get_paths()["purelib"]  # the tested dependencies, read-only, for import only
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON", "VIRTUAL_ENV"))}
    env.update(PYTHONPATH=deps, PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", OMP_NUM_THREADS="1")
    pip = [sys.executable, "-m", "pip", "--python", str(vpy)]
    _run([*pip, "install", "--quiet", "--no-index", "--find-links", str(wheel.parent), f"{wheel}[train]"],
         env=env, cwd=str(tmp_path))
    _run([*pip, "check"], env=env, cwd=str(tmp_path))

    site = _run([str(vpy), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], env=env).stdout.strip()
    where = _run([str(vpy), "-c", "import figures, rlvr_theory; print(rlvr_theory.__file__); print(figures.__file__)"],
                 env=env, cwd=str(tmp_path)).stdout.split()
    assert all(Path(w).resolve().is_relative_to(Path(site).resolve()) for w in where), (where, site)
    for rel in _source_files()[1]:  # the data files are where the modules look for them
        assert (Path(site) / rel).is_file(), rel

    out = _run([str(bin_dir / "rlvr-theory"), "masses", "--advantage", "grpo", "--p", "0.3", "--G", "8"],
               env=env, cwd=str(tmp_path)).stdout
    printed = [float(x) for x in re.findall(r"(?<![\w.])-?\d+\.\d+(?:e-?\d+)?", out)]
    plug, ex = masses.closed_form("grpo", 0.3), masses.exact("grpo", 0.3, 8)
    for name, value in (("closed-form m_S", plug.m_S), ("closed-form m_F", plug.m_F),
                        ("exact m_S", ex.m_S), ("exact m_F", ex.m_F)):
        v = float(np.asarray(value).ravel()[0])
        assert any(abs(p - v) <= 1e-8 * max(1.0, abs(v)) for p in printed), (name, v, out)
