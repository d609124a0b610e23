"""analysis.diff keeps no module state: each diff() call has its own DiffRun.

Two diffs of different tiny checkpoint pairs run side by side in two threads of one process give
the report each gives alone; ``workers`` changes no number; and no module of the package assigns
a mutable value (or ``None``, a slot for state) to a non-constant name at module level.
"""

from __future__ import annotations

import ast
import json
import threading
from pathlib import Path

import pytest

from analysis import diff as wd
from analysis.diff import measure
from tests.analysis import tiny_checkpoints as tc

PACKAGE = Path(wd.__file__).parent


def _numbers(doc: dict) -> str:
    """The document without what legitimately differs between runs (timings, run block)."""
    return json.dumps({k: v for k, v in doc.items() if k not in ("timing_s", "timings_s", "run")})


def _run(pair: tuple, workers: int) -> dict:
    base, rl, _ = pair
    return wd.diff(str(base), [str(rl), str(base)], device="cpu", top_k=4, progress=False, workers=workers)


def test_two_diffs_in_two_threads_give_the_reports_of_each_alone(monkeypatch):
    monkeypatch.setattr(measure, "_FAST_MIN_ELEMS", 100)   # block spectra through the background workers
    pairs = [tc.arch_pair("qwen2"), tc.arch_pair("gpt2")]
    alone = [_numbers(_run(p, 2)) for p in pairs]
    barrier = threading.Barrier(2)
    out: list = [None, None]

    def work(i: int) -> None:
        barrier.wait()
        try:
            out[i] = _numbers(_run(pairs[i], 2))
        except BaseException as err:   # reported below, in the test's thread
            out[i] = err

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(2):
        if isinstance(out[i], BaseException):
            raise out[i]
        assert out[i] == alone[i]
    assert alone[0] != alone[1]


def test_workers_change_no_number(monkeypatch):
    monkeypatch.setattr(measure, "_FAST_MIN_ELEMS", 100)
    pair = tc.arch_pair("qwen2")
    one, two = _run(pair, 1), _run(pair, 2)
    assert _numbers(one) == _numbers(two)
    assert set(two["timings_s"]) == set(wd.PHASES)


# ------------------------------------------------------------ no module state
def _is_constant_name(name: str) -> bool:
    return name.lstrip("_").isupper() or name.startswith("__")


def _mutable(value: ast.expr) -> bool:
    if isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)):
        return True
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Name) \
        and value.func.id in ("dict", "list", "set", "deque", "defaultdict", "OrderedDict", "Counter")


def module_state(source: str) -> list[str]:
    """Module-level assignments of ``None`` (a slot for state, whatever the name's case), of a mutable
    display or container call to a name that is not an UPPERCASE constant, and every ``global``
    statement: ``["line N: name"]``."""
    tree = ast.parse(source)
    found = []
    for node in tree.body:
        targets, value = [], None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        for t in targets:
            is_none = isinstance(value, ast.Constant) and value.value is None
            if isinstance(t, ast.Name) and (is_none or (_mutable(value) and not _is_constant_name(t.id))):
                found.append(f"line {node.lineno}: {t.id}")
    found += [f"line {n.lineno}: global {', '.join(n.names)}" for n in ast.walk(tree) if isinstance(n, ast.Global)]
    return found


@pytest.mark.parametrize("snippet, flagged", [
    ("_BG = None", True),
    ("_BG: _Background | None = None", True),
    ("_TIMINGS: dict[str, float] | None = None", True),
    ("_cache = {}", True),
    ("state = list()", True),
    ("def f():\n    global _BG\n    _BG = 1", True),
    ("_CHUNK = 1 << 17", False),
    ("_MANTISSA = {'F32': 23}", False),
    ("PHASES = ('read', 'spectra')", False),
    ("__all__ = ['diff']", False),
])
def test_the_state_scan_flags_module_state(snippet, flagged):
    assert bool(module_state(snippet)) is flagged


def test_the_package_has_no_module_state():
    files = sorted(PACKAGE.glob("*.py"))
    assert {f.name for f in files} >= {"__init__.py", "compare.py", "run.py", "stream.py", "measure.py"}
    found = {f.name: module_state(f.read_text(encoding="utf-8")) for f in files}
    assert not {k: v for k, v in found.items() if v}
