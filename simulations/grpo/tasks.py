"""Synthetic tasks with exact verifiers, a difficulty knob and train / held-out splits.

A task maps a random generator to a :class:`Problem` (``prompt``, reference ``answer``) and
owns a *verifier* that decides, for a batch of problems and decoded responses, which
responses are correct (binary reward, F-GRPO Eq. 1).  The reference answer is used
only for SFT demonstrations and by the default exact-match verifier.

Built-in tasks (``difficulty`` is the knob; larger is harder):

=========  ======================================  ==========================  =========
name       prompt → answer                          difficulty                  default
=========  ======================================  ==========================  =========
``arith``  ``"47+385="`` → ``"432"``                digits per operand, 1-6     2
``modular`` ``"47*38%13="`` → ``"2"``               digits of a, b, 1-4         2
``sort``   ``"sort:3141="`` → ``"1134"``            number of digits, 2-10      4
``count``  ``"count b:abcbb="`` → ``"3"``           string length, 2-20         8
=========  ======================================  ==========================  =========

Splits.  A problem belongs to the held-out split iff ``crc32(f"{split_seed}:{prompt}") mod
10_000 < heldout_fraction · 10_000`` — a fixed, seed-dependent partition of the whole problem
space, so training never sees a held-out prompt however many problems it draws.

Users add a task by subclassing :class:`Task` (or :class:`ExactMatchTask`) and decorating it
with :func:`register`::

    @tasks.register
    class Reverse(tasks.ExactMatchTask):
        name = "reverse"
        alphabet = "0123456789rev:="
        difficulty_range = (1, 8)
        default_difficulty = 4

        def generate(self, rng):
            s = "".join(rng.choice(list("0123456789"), self.difficulty))
            return tasks.Problem(f"rev:{s}=", s[::-1])

A task without a verifier (``verify = None``) is refused by :func:`register` and by the
trainer before any work starts.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

import numpy as np

from rlvr_plumbing import checks
from rlvr_plumbing.registry import Registry

__all__ = [
    "Problem",
    "Task",
    "ExactMatchTask",
    "register",
    "unregister",
    "registered",
    "get",
    "read_spec",
    "names",
    "registry",
    "check_task",
    "BASE_ALPHABET",
]

#: characters every locally built tokenizer contains (the built-in tasks use a subset)
BASE_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz+-*/%=:,;.()<>| "


class Problem(NamedTuple):
    """One task instance: the ``prompt`` the model continues and its reference ``answer``."""

    prompt: str
    answer: str


class Task:
    """Base class of a task: ``generate`` one problem, ``verify`` a batch of responses.

    Class attributes: ``name`` (registry key), ``description``, ``alphabet`` (every character a
    prompt or answer may contain), ``difficulty_range`` (inclusive), ``default_difficulty``,
    ``max_answer_len(difficulty)`` (longest reference answer, used to size generation).

    Parameters
    ----------
    difficulty: the task's knob, an integer in ``difficulty_range`` (default ``default_difficulty``).
    heldout_fraction: share of the problem space reserved for evaluation, in (0, 1).
    split_seed: seed of the train / held-out partition.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    alphabet: ClassVar[str] = ""
    difficulty_range: ClassVar[tuple[int, int]] = (1, 1)
    default_difficulty: ClassVar[int] = 1
    #: ``verify(problems, responses) -> bool array``; ``None`` means the task has no verifier
    verify: ClassVar[Callable[..., np.ndarray] | None] = None

    def __init__(self, difficulty: int | None = None, *, heldout_fraction: float = 0.1, split_seed: int = 0):
        lo, hi = self.difficulty_range
        d = self.default_difficulty if difficulty is None else difficulty
        try:
            self.difficulty = checks.integer("difficulty", d, low=lo, high=hi)
        except ValueError as err:
            raise ValueError(f"{err} (task {self.name!r})") from None
        self.heldout_fraction = checks.probability("heldout_fraction", heldout_fraction, low_open=True,
                                                   high_open=True)
        self.split_seed = checks.integer("split_seed", split_seed)

    # ------------------------------------------------------------ subclass API
    def generate(self, rng: np.random.Generator) -> Problem:  # pragma: no cover - abstract
        """One random problem at ``self.difficulty``."""
        raise NotImplementedError

    def max_answer_len(self) -> int:
        """Length (characters) of the longest reference answer at this difficulty."""
        raise NotImplementedError  # pragma: no cover - abstract

    # ---------------------------------------------------------------- helpers
    def max_prompt_len(self, n: int = 64) -> int:
        """Longest prompt (UTF-8 bytes, a bound on its tokens) among ``n`` fixed draws: a size
        estimate for memory checks, not a limit."""
        return max(len(p.prompt.encode()) for p in self.sample(np.random.default_rng(0), n))

    def spec(self) -> dict[str, Any]:
        """JSON-serialisable description, enough for :func:`get` to rebuild the task."""
        return {"name": self.name, "difficulty": self.difficulty,
                "heldout_fraction": self.heldout_fraction, "split_seed": self.split_seed}

    def is_heldout(self, prompt: str) -> bool:
        """Held-out membership of a prompt (crc32 partition; see the module docstring)."""
        h = zlib.crc32(f"{self.split_seed}:{prompt}".encode())
        return h % 10_000 < self.heldout_fraction * 10_000

    def sample(self, rng: np.random.Generator, n: int, split: str = "train") -> list[Problem]:
        """``n`` problems of ``split`` ("train" or "heldout"), drawn i.i.d. (repeats allowed).

        Rejection sampling from :meth:`generate`; gives up after ``1000·n`` draws.
        """
        if split not in ("train", "heldout"):
            raise ValueError(f"split must be 'train' or 'heldout', got {split!r}")
        want_heldout = split == "heldout"
        out: list[Problem] = []
        for _ in range(1000 * max(n, 1)):
            if len(out) == n:
                break
            prob = self.generate(rng)
            if self.is_heldout(prob.prompt) == want_heldout:
                out.append(prob)
        if len(out) < n:
            raise ValueError(f"split: task {self.name!r} at difficulty {self.difficulty} has too few "
                             f"{split} problems; change heldout_fraction or difficulty")
        return out

    def heldout_set(self, n: int, seed: int = 0) -> list[Problem]:
        """Up to ``n`` *distinct* held-out problems (a fixed evaluation set for a seed).

        Fewer than ``n`` are returned only when the held-out split is smaller than ``n``.
        """
        rng = np.random.default_rng([seed, self.split_seed, 7])
        seen: dict[str, Problem] = {}
        misses = 0
        while len(seen) < n and misses < 20 * n + 1000:
            prob = self.generate(rng)
            if self.is_heldout(prob.prompt) and prob.prompt not in seen:
                seen[prob.prompt] = prob
                misses = 0
            else:
                misses += 1
        return list(seen.values())

    def __repr__(self) -> str:
        return f"tasks.get({self.name!r}, difficulty={self.difficulty})"


class ExactMatchTask(Task):
    """A task whose verifier is exact string equality of the response with the answer."""

    def verify(self, problems: Sequence[Problem], responses: Sequence[str]) -> np.ndarray:
        """``responses[i] == problems[i].answer`` for every i (vectorised string comparison)."""
        if len(problems) != len(responses):
            raise ValueError(f"responses must have one entry per problem ({len(problems)}), got {len(responses)}")
        if len(problems) == 0:
            return np.zeros(0, bool)
        ans = np.array([p.answer for p in problems], dtype=str)
        return np.char.equal(np.array(list(responses), dtype=str), ans)


_REGISTRY: Registry[type[Task]] = Registry("task")


def check_task(task: Any) -> Task:
    """Refuse anything that is not a usable :class:`Task` (missing name, alphabet or verifier)."""
    cls = task if isinstance(task, type) else type(task)
    if not (isinstance(cls, type) and issubclass(cls, Task)):
        raise ValueError(f"task must be a Task (see simulations.grpo.tasks), got {type(task).__name__}")
    if not cls.name:
        raise ValueError("task: a task class needs a non-empty `name`")
    if not callable(getattr(cls, "verify", None)):
        raise ValueError(f"task: {cls.name!r} has no verifier; define verify(problems, responses) -> bool array "
                         "(or subclass ExactMatchTask)")
    if not cls.alphabet:
        raise ValueError(f"task: {cls.name!r} needs a non-empty `alphabet` (characters of prompts and answers)")
    return task


def register(cls: type[Task]) -> type[Task]:
    """Class decorator adding a :class:`Task` subclass to the registry under ``cls.name``.

    A class without a verifier, name or alphabet is refused (:func:`check_task`); another class
    under a taken name raises ``ValueError`` (see :func:`unregister`).
    """
    return _REGISTRY.register(check_task(cls))


def unregister(name: str) -> None:
    """Remove the task ``name`` from the registry (``ValueError`` listing the names if unknown)."""
    _REGISTRY.unregister(name)


def registered(cls: type[Task]) -> AbstractContextManager[type[Task]]:
    """Context manager: ``cls`` is registered (after :func:`check_task`) inside the ``with``
    block only (for tests)."""
    return _REGISTRY.registered(check_task(cls))


def names() -> list[str]:
    """Registered task names, in registration order."""
    return _REGISTRY.names()


def registry() -> Mapping[str, type[Task]]:
    """A copy of the registry: name -> class."""
    return _REGISTRY.as_dict()


def get(name: str, difficulty: int | None = None, **kwargs: Any) -> Task:
    """Instantiate the registered task ``name`` (``difficulty``, ``heldout_fraction``, ``split_seed``).

    An unknown name is refused with the list of registered ones; a task class that has lost
    its verifier since registration is refused before it is instantiated.

    Examples
    --------
    >>> task = get("sort", 3)
    >>> problems = task.sample(np.random.default_rng(0), 2)
    >>> problems
    [Problem(prompt='sort:230=', answer='023'), Problem(prompt='sort:001=', answer='001')]
    >>> task.verify(problems, ["023", "010"])
    array([ True, False])
    >>> get("chess")
    Traceback (most recent call last):
    ...
    ValueError: task: unknown task 'chess'; allowed: arith, count, modular, sort
    """
    cls = check_task(_REGISTRY.get(name))
    return cls(difficulty, **kwargs)


def read_spec(directory: str | os.PathLike, *, what: str = "init") -> dict[str, Any] | None:
    """The task spec in ``DIR/task.json`` (what :meth:`Task.spec` wrote), checked; ``None`` if
    there is no such file.

    The file must be a JSON object with a registered ``name``; ``difficulty``,
    ``heldout_fraction`` and ``split_seed`` are optional and must be valid for the task.  A
    refusal is a ``ValueError`` starting with ``what`` and naming the file and the key.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "task.json").write_text('{"name": "sort", "difficulty": 3}')
    >>> read_spec(d)
    {'name': 'sort', 'difficulty': 3}
    >>> _ = (d / "task.json").write_text('[]')
    >>> read_spec(d)
    Traceback (most recent call last):
    ...
    ValueError: init: file '.../task.json' must hold a JSON object with the task's 'name', got a list
    """
    from rlvr_plumbing.io import read_json_object

    path = Path(directory) / "task.json"
    if not path.is_file():
        return None
    where = f"{what}: file {str(path)!r}"
    spec = read_json_object(path, where, expect="a JSON object with the task's 'name'")
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"{where}: key 'name' must be a task name ({', '.join(names())}), got {name!r}")
    unknown = sorted(set(spec) - {"name", "difficulty", "heldout_fraction", "split_seed"})
    if unknown:
        raise ValueError(f"{where}: unknown key {unknown[0]!r}")
    try:
        get(name, spec.get("difficulty"), **{k: spec[k] for k in ("heldout_fraction", "split_seed") if k in spec})
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None
    return spec


def _digits(rng: np.random.Generator, d: int) -> int:
    """A uniform integer with at most ``d`` digits, ``0 <= x < 10**d``."""
    return int(rng.integers(0, 10**d))


# ================================================================ built-ins ===


@register
class Addition(ExactMatchTask):
    """``a+b=`` → ``a+b`` with ``a, b`` uniform in ``[0, 10^d)`` (``d`` = difficulty)."""

    name = "arith"
    description = "multi-digit addition"
    alphabet = "0123456789+="
    difficulty_range = (1, 6)
    default_difficulty = 2

    def generate(self, rng):
        d = self.difficulty
        a, b = _digits(rng, d), _digits(rng, d)
        return Problem(f"{a:0{d}d}+{b:0{d}d}=", f"{a + b:0{d + 1}d}")

    def max_answer_len(self):
        return self.difficulty + 1


@register
class Modular(ExactMatchTask):
    """``a*b%m=`` → ``(a·b) mod m`` with ``a, b`` in ``[0, 10^d)`` and ``m`` in ``[2, 20)``."""

    name = "modular"
    description = "modular multiplication"
    alphabet = "0123456789*%="
    difficulty_range = (1, 4)
    default_difficulty = 2

    def generate(self, rng):
        a, b = _digits(rng, self.difficulty), _digits(rng, self.difficulty)
        m = int(rng.integers(2, 20))
        return Problem(f"{a}*{b}%{m}=", str(a * b % m))

    def max_answer_len(self):
        return 2


@register
class Sort(ExactMatchTask):
    """``sort:3141=`` → ``1134``: sort ``d`` random digits (``d`` = difficulty)."""

    name = "sort"
    description = "sorting digits"
    alphabet = "0123456789sort:="
    difficulty_range = (2, 10)
    default_difficulty = 4

    def generate(self, rng):
        s = rng.integers(0, 10, self.difficulty)
        return Problem("sort:" + "".join(map(str, s)) + "=", "".join(map(str, np.sort(s))))

    def max_answer_len(self):
        return self.difficulty


@register
class Count(ExactMatchTask):
    """``count b:abcbb=`` → ``3``: occurrences of a letter in a string of ``d`` letters from a-e."""

    name = "count"
    description = "counting a letter"
    alphabet = "0123456789abcdenotu :="
    difficulty_range = (2, 20)
    default_difficulty = 8

    def generate(self, rng):
        letters = np.array(list("abcde"))
        s = "".join(letters[rng.integers(0, 5, self.difficulty)])
        c = letters[rng.integers(0, 5)]
        return Problem(f"count {c}:{s}=", str(s.count(c)))

    def max_answer_len(self):
        return len(str(self.difficulty))
