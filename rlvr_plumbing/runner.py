"""One runner for every console script (``rlvr-theory``, ``rlvr-sim``, ``rlvr-train``,
``rlvr-diff``, ``rlvr-figures``): parsing, dispatch, errors, threads, ``--param``, settings.

What every command line of the toolkit does the same way:

* **exit status**: ``run`` returns it (0, 2 for a usage error or bad input, 130, 141), also
  for argparse's own usage errors and ``--help``, so that ``main(argv)`` can be called in-process;
* **dispatch**: each subcommand's parser sets ``func(args)``; it returns an exit status
  (``int``/``None``) or the text to print (``str``);
* **errors**: a ``ValueError`` from the checks prints ``PROG: error: MESSAGE`` and exits with
  status 2, with the library's Python names shown as the user typed them (:func:`error_message`):
  ``group_size must be ...`` → ``--group-size must be ...``, ``checkpoints[0]: ...`` → ``RL 1: ...``,
  ``run_dir must hold ...`` → ``--series must hold ...``, ``pass format=... (--format)`` →
  ``pass --format``;
* **close names**: an invalid choice or subcommand (also a typo of a subcommand that would
  otherwise be read as the default command's input) ends with ``did you mean 'masses'?``, as do
  unknown registry names (:meth:`rlvr_plumbing.registry.Registry.get`) and
  ``must be one of A, B, got 'x'`` messages;
* **the system refusing** a write (disk full, read-only file system, no permission; also on
  standard output, e.g. ``> /dev/full``) prints one line saying what happened and where, and
  exits with status 1 (the writers of :mod:`rlvr_plumbing.io` leave nothing under a final name);
* **Ctrl-C** prints ``PROG: interrupted`` (and, when the command says, what it did not
  write: ``raise KeyboardInterrupt("no report written; 'rep' is left as it was")`` prints
  ``PROG: interrupted: no report written; ...``) and exits with status 130, no traceback; once
  the command has returned, the console script ignores Ctrl-C while Python shuts down (it
  would otherwise end in a traceback with status 0, or a silent death by the signal);
* **a closed pipe** (``rlvr-theory list --json | head -1``) ends quietly with status 141, as
  ``head``'s other producers do;
* **warnings** do not break progress bars (:func:`routed_warnings`): deprecation notices
  (``DeprecationWarning``, ``PendingDeprecationWarning``, ``FutureWarning``: mostly transformers'
  and torch's) are printed once each after the command, the others (the library's own, e.g.
  ``BaseIdentityWarning``) at once, with the bars cleared around them;
* **threads**: ``--threads N`` (every command that computes) sets torch's intra-op threads
  (when torch is in use) and the BLAS/OpenMP pools; the default is :func:`default_threads`;
* **parameters** of an advantage or schedule: a repeatable ``--param NAME=VALUE``
  (:func:`add_param_option`, :func:`parse_params`);
* **settings**: one dataclass per run kind generates its flags (:func:`add_settings`) with
  the defaults shown from the fields, and :func:`given_settings` collects what was typed.

Examples
--------
>>> parse_params(["delta=0.5", "normalize=true", "ema=conventional"])
{'delta': 0.5, 'normalize': True, 'ema': 'conventional'}
>>> import argparse, dataclasses
>>> @dataclasses.dataclass
... class Settings:
...     steps: int = dataclasses.field(default=200, metadata={"help": "training steps"})
...     lr: float = dataclasses.field(default=3e-4, metadata={"help": "learning rate"})
>>> ap = argparse.ArgumentParser(prog="demo")
>>> add_settings(ap, Settings)
>>> given_settings(ap.parse_args(["--steps", "10"]), Settings)
{'steps': 10}
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import json
import os
import re
import signal
import sys
import types
import typing
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from .registry import close_name, did_you_mean

__all__ = [
    "run", "console", "routed_warnings", "error_message", "os_error_message", "add_param_option", "parse_params", "add_threads_option",
    "default_threads", "apply_threads", "add_overwrite_option", "add_run_options", "add_settings", "given_settings",
]

#: exit status of a command refused for bad input / interrupted / whose reader went away /
#: stopped by the system (disk full, read-only file system, permission denied)
EXIT_USAGE, EXIT_INTERRUPTED, EXIT_PIPE, EXIT_OS = 2, 130, 141, 1


# ------------------------------------------------------------------ running
def _flag_names(parser: argparse.ArgumentParser, out: dict[str, str] | None = None) -> dict[str, str]:
    """dest → the long option string, over the parser and all its subparsers."""
    out = {} if out is None else out
    for act in parser._actions:  # argparse has no public walker of its actions
        if isinstance(act, argparse._SubParsersAction):
            for sub in act.choices.values():
                _flag_names(sub, out)
        elif act.option_strings and act.dest not in ("help",):
            longs = [s for s in act.option_strings if s.startswith("--")] or list(act.option_strings)
            if act.dest == "param":  # --param, never its deprecated aliases
                longs = ["--param"] if "--param" in act.option_strings else longs
            out.setdefault(act.dest, longs[0])
            # a negated boolean (--no-log-kl, dest log_kl) is also found under its own spelling
            out.setdefault(longs[0].lstrip("-").replace("-", "_"), longs[0])
    return out


def _chosen_parsers(parser: argparse.ArgumentParser, args: argparse.Namespace | None) -> list[argparse.ArgumentParser]:
    """The parser and the subcommand parsers ``args`` chose, outermost first."""
    chain = [parser]
    while args is not None:
        sub = next((a for a in chain[-1]._actions if isinstance(a, argparse._SubParsersAction)), None)
        chosen = None if sub is None else sub.choices.get(getattr(args, sub.dest, None) or "")
        if chosen is None:
            break
        chain.append(chosen)
    return chain


def _all_parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    out = [parser]
    for act in parser._actions:
        if isinstance(act, argparse._SubParsersAction):
            for sub in act.choices.values():
                out += [p for p in _all_parsers(sub) if all(p is not q for q in out)]
    return out


def _shown(act: argparse.Action) -> str:
    """How the user sees an argument: ``--group-size`` (an option), ``RL`` (a positional's metavar)."""
    if act.option_strings:
        if act.dest == "param" and "--param" in act.option_strings:  # never its deprecated aliases
            return "--param"
        return next((o for o in act.option_strings if o.startswith("--")), act.option_strings[0])
    metavar = act.metavar if isinstance(act.metavar, str) else None
    return metavar or act.dest


def _name_map(parser: argparse.ArgumentParser,
              args: argparse.Namespace | None) -> dict[str, tuple[argparse.Action, str]]:
    """Python name → (its argument, how the user sees it): the chosen subcommand's first, then
    the options of the rest of the tree.

    A name is an argument's ``dest``, the spelling of an option (``log_kl`` for ``--no-log-kl``),
    a metavar with an underscore (``run_dir`` for ``--series RUN_DIR``) or a word of a
    positional's metavar (``base``, ``rl`` for ``BASE RL``)."""
    out: dict[str, tuple[argparse.Action, str]] = {}
    chosen = _chosen_parsers(parser, args)
    others = [p for p in _all_parsers(parser) if all(p is not q for q in chosen)]
    for group, positionals in ((chosen, True), (others, False)):  # another subcommand's positional: not typed
        acts = [a for p in group for a in p._actions
                if not isinstance(a, (argparse._SubParsersAction, argparse._HelpAction))
                and a.dest not in (None, argparse.SUPPRESS) and (positionals or a.option_strings)]
        for act in acts:
            out.setdefault(act.dest, (act, _shown(act)))
            if act.option_strings:
                out.setdefault(_shown(act).lstrip("-").replace("-", "_"), (act, _shown(act)))
        for act in acts:
            metavar = act.metavar if isinstance(act.metavar, str) else ""
            for word in (metavar.split() if not act.option_strings else [metavar]):
                key = word.lower()
                if key.isidentifier() and ("_" in key or not act.option_strings):
                    out.setdefault(key, (act, word if not act.option_strings else _shown(act)))
    return out


def _from_values(msg: str, parser: argparse.ArgumentParser, args: argparse.Namespace | None) -> str | None:
    """The option of the chosen subcommand whose value is a path quoted in ``msg``, or a folder
    of one (``--series RUN_DIR`` for ``'RUN_DIR/checkpoint-10'``)."""
    if args is None:
        return None
    quoted = re.findall(r"'([^']+)'", msg)
    for p in _chosen_parsers(parser, args):
        for act in p._actions:
            if not act.option_strings:
                continue
            value = getattr(args, act.dest, None)
            values = [value] if isinstance(value, str) else value if isinstance(value, list) else []
            for v in (str(x) for x in values if isinstance(x, (str, os.PathLike))):
                folder = v.rstrip("/" + os.sep) + os.sep
                if any(q == v or q.startswith(folder) for q in quoted):
                    return _shown(act)
    return None


def error_message(err: BaseException, parser: argparse.ArgumentParser | None = None,
                  args: argparse.Namespace | None = None) -> str:
    """The message of ``err`` with the library's Python names shown as the user typed them.

    With the command's ``parser`` (and the parsed ``args``, for the chosen subcommand first):

    * a leading argument name: ``group_size must be ...`` → ``--group-size must be ...``,
      ``base: ...`` → ``BASE: ...``, ``run_dir must hold ...`` → ``--series must hold ...``;
    * an indexed name anywhere: ``checkpoints[1]: ...`` → ``RL 2: ...`` (a positional, counted
      from 1), or the option whose value is the path the message quotes (``--series``);
    * ``pass NAME=VALUE (--flag)`` → ``pass --flag VALUE`` (``--flag`` alone for ``...``/``True``);
    * ``must be one of A, B, got 'x'`` gains ``; did you mean 'A'?`` when a name is close.

    Python callers of the library keep its own wording; names the command does not know stay.
    """
    msg = str(err)
    if parser is None:
        return msg
    names = _name_map(parser, args)

    def indexed(m: re.Match) -> str:
        name, i = m.group(1), int(m.group(2))
        chosen = {id(a) for p in _chosen_parsers(parser, args) for a in p._actions}
        act, shown = names.get(name, (None, m.group(0)))
        if act is not None and id(act) in chosen and not act.option_strings:
            typed = getattr(args, act.dest, None) if args is not None else None
            if isinstance(typed, list) and i < len(typed):
                return f"{shown} {i + 1}"
        by_value = _from_values(msg[m.end():], parser, args)
        return shown if by_value is None else by_value

    msg = re.sub(r"(?<![\w.\-'\"])([A-Za-z_][A-Za-z0-9_]*)\[(\d+)\]", indexed, msg)
    m = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)(?=[ :=\[])", msg)
    if m and m.group(1) in names:
        act, shown = names[m.group(1)]
        if act.option_strings and act.dest not in {a.dest for p in _chosen_parsers(parser, args) for a in p._actions}:
            shown = _from_values(msg, parser, args) or shown
        msg = shown + msg[m.end():]

    def passed(m: re.Match) -> str:
        name, value, flag = m.group(1), m.group(2), m.group(3)
        if flag is None:
            act, flag = names.get(name, (None, ""))
            if act is None or not act.option_strings:
                return m.group(0)
        return f"pass {flag}" + ("" if value in ("", "...", "True") else f" {value}")

    msg = re.sub(r"\bpass ([A-Za-z_][A-Za-z0-9_]*)=([^\s;,()]*)(?: \((--[A-Za-z0-9][A-Za-z0-9-]*)\))?", passed, msg)
    if "did you mean" not in msg:
        m = re.search(r"must be one of (.+?)[;,] got '([^']*)'", msg)
        if m:
            msg += did_you_mean(m.group(2), [n.strip().strip("'\"") for n in m.group(1).split(",")])
    return msg


#: what argparse should read as a negative number, not an option: -1, -1.5, -.5, -1e308, -inf
_NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^-inf(inity)?$", re.IGNORECASE)


def _accept_negative_numbers(parser: argparse.ArgumentParser) -> None:
    """Let values such as ``--reward-values -1e308 1e308`` through, in the parser and its
    subparsers (argparse's own pattern knows ``-1`` and ``-1.5`` only); no option of the
    toolkit looks like a number."""
    parser._negative_number_matcher = _NEGATIVE_NUMBER  # argparse has no public switch for it
    for act in parser._actions:
        if isinstance(act, argparse._SubParsersAction):
            for sub in act.choices.values():
                _accept_negative_numbers(sub)


def _suggest_choices(parser: argparse.ArgumentParser) -> None:
    """An invalid choice (a subcommand, ``--preset``, ``--format``) gains ``; did you mean 'x'?``
    when a choice is close (argparse has it from Python 3.14 only), in the parser and its
    subparsers; an invalid subcommand reads ``invalid command: 'mases' (choose from ...)``."""
    check = parser._check_value  # argparse has no public hook for it

    def check_value(action: argparse.Action, value: Any) -> None:
        try:
            check(action, value)
        except argparse.ArgumentError as err:
            if action.choices is None or value in action.choices:
                raise
            hint = did_you_mean(value, [c for c in action.choices if isinstance(c, str)])
            if isinstance(action, argparse._SubParsersAction):
                choices = ", ".join(map(repr, action.choices))
                raise argparse.ArgumentError(None, f"invalid command: {value!r} (choose from {choices}){hint}") from None
            if not hint:
                raise
            raise argparse.ArgumentError(action, err.message + hint) from None

    parser._check_value = check_value  # type: ignore[method-assign]
    for act in parser._actions:
        if isinstance(act, argparse._SubParsersAction):
            for sub in act.choices.values():
                _suggest_choices(sub)


#: warning categories held back and shown once each after the command: the deprecation notices of
#: dependencies (transformers, torch), printed in the middle of a progress bar, cut it in two
DEFERRED_WARNINGS = (DeprecationWarning, PendingDeprecationWarning, FutureWarning)


@contextlib.contextmanager
def routed_warnings() -> typing.Iterator[None]:
    """Inside the block, warnings keep out of the progress bars: one of
    :data:`DEFERRED_WARNINGS` is held back and shown once (per category and text) when the block
    ends, also on an error; any other warning (the library's own, e.g.
    :class:`analysis.diff.lora.BaseIdentityWarning`) is shown at once, with the tqdm bars cleared
    before and redrawn after it (``tqdm.external_write_mode``).  Which warnings are shown at all
    is still decided by the warning filters; they are shown through the ``warnings.showwarning``
    in force when the block starts (so ``pytest.warns`` and ``catch_warnings(record=True)`` still
    record them), which is put back at the end.

    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as seen:
    ...     warnings.simplefilter("always")
    ...     with routed_warnings():
    ...         for _ in range(3):
    ...             warnings.warn("old API", FutureWarning)
    ...         warnings.warn("check the base", UserWarning)
    >>> [str(w.message) for w in seen]
    ['check the base', 'old API']
    """
    previous = warnings.showwarning
    held: dict[tuple[str, str], tuple[Any, ...]] = {}

    def show(message: Any, category: type[Warning], filename: str, lineno: int, file: Any = None,
             line: str | None = None) -> None:
        if issubclass(category, DEFERRED_WARNINGS):
            held.setdefault((category.__name__, str(message)), (message, category, filename, lineno, file, line))
            return
        tqdm = sys.modules.get("tqdm")
        clear = tqdm.tqdm.external_write_mode(file=sys.stderr) if hasattr(tqdm, "tqdm") else contextlib.nullcontext()
        with clear:
            previous(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    try:
        yield
    finally:
        if warnings.showwarning is show:
            warnings.showwarning = previous
        for item in held.values():
            previous(*item)


def _subcommands(parser: argparse.ArgumentParser) -> set[str]:
    for act in parser._actions:
        if isinstance(act, argparse._SubParsersAction):
            return set(act.choices)
    return set()


def run(prog: str, build_parser: Callable[[], argparse.ArgumentParser],
        argv: Sequence[str] | None = None, *, default_command: str | None = None) -> int:
    """Parse ``argv``, run the chosen command, and return the exit status (see module docstring).

    ``default_command``: the subcommand used when the first argument names none (``rlvr-diff
    BASE CKPT`` is ``rlvr-diff weights BASE CKPT``); ``-h``/``--help`` still show the overview.
    """
    parser = build_parser()
    _accept_negative_numbers(parser)
    argv = list(sys.argv[1:] if argv is None else argv)
    _suggest_choices(parser)
    if default_command and argv and argv[0] not in _subcommands(parser) and argv[0] not in ("-h", "--help"):
        # a typo of a subcommand ('weigths') that names no file: not an input of the default one
        hit = None if argv[0].startswith("-") or os.path.exists(argv[0]) else close_name(argv[0], _subcommands(parser))
        if hit is not None:
            parser.print_usage(sys.stderr)
            choices = ", ".join(map(repr, sorted(_subcommands(parser))))
            print(f"{prog}: error: invalid command: {argv[0]!r} (choose from {choices}); did you mean {hit!r}?",
                  file=sys.stderr)
            return EXIT_USAGE
        argv.insert(0, default_command)
    args = None
    try:
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # argparse printed a usage error (2) or the help (0): return, not raise
            return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_USAGE)
        apply_threads(getattr(args, "threads", None), explicit=hasattr(args, "threads"),
                      all_cores=bool(getattr(args, "threads_all_cores", False)))
        func = getattr(args, "func", None)
        if func is None:  # pragma: no cover - every parser sets one
            parser.print_usage(sys.stderr)
            return EXIT_USAGE
        with routed_warnings():
            result = func(args)
        if isinstance(result, str):
            sys.stdout.write(result if result.endswith("\n") else result + "\n")
            result = 0
        sys.stdout.flush()
        return int(result or 0)
    except ValueError as err:
        print(f"{prog}: error: {error_message(err, parser, args)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt as err:
        detail = str(err)  # what the command did not write, when it says
        print(f"\n{prog}: interrupted" + (f": {detail}" if detail else ""), file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # the reader (e.g. `head`) went away: silence the final flush of stdout and stop
        _silence_stdout()
        return EXIT_PIPE
    except OSError as err:  # the system refused: disk full, read-only file system, permission, ...
        if getattr(err, "filename", None) is None:  # no file named: standard output (e.g. > /dev/full)
            _silence_stdout()
        print(f"{prog}: error: {os_error_message(err)}", file=sys.stderr)
        return EXIT_OS


def os_error_message(err: OSError) -> str:
    """``"No space left on device: 'runs/x/final.csv'"`` — what happened and where, one line."""
    what = err.strerror or str(err)
    where = [f"{f!r}" for f in (err.filename, getattr(err, "filename2", None)) if f is not None]
    return f"{what}: {' -> '.join(where)}" if where else f"cannot write the output: {what}"


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # pragma: no cover - stdout without a file descriptor
        pass


def console(prog: str, build_parser: Callable[[], argparse.ArgumentParser], *,
            default_command: str | None = None) -> Callable[[], None]:
    """A console-script entry point: ``sys.exit(run(prog, build_parser))``.

    Once ``run`` has returned, SIGINT is ignored: the interpreter's shutdown (atexit callbacks,
    finalizers of torch and matplotlib) takes a moment, and Ctrl-C there would print a
    traceback under status 0 or kill the process silently (status -2).
    """
    def main_exit() -> None:
        code = None
        try:
            code = run(prog, build_parser, default_command=default_command)
        except KeyboardInterrupt:  # before run() could catch it (while the parser is built)
            pass
        finally:
            with contextlib.suppress(ValueError):  # ValueError: not the main thread (no Ctrl-C there)
                signal.signal(signal.SIGINT, signal.SIG_IGN)  # the command is over
        if code is None:
            print(f"\n{prog}: interrupted", file=sys.stderr)
            code = EXIT_INTERRUPTED
        sys.exit(code)
    main_exit.__doc__ = f"Console entry point of ``{prog}``."
    return main_exit


# --------------------------------------------------------------- --param
def add_param_option(parser: argparse.ArgumentParser, *, of: str = "advantage",
                     json_alias: str | None = None, help: str | None = None) -> None:
    """A repeatable ``--param NAME=VALUE`` (dest ``param``, a list of strings).

    ``json_alias`` (e.g. ``"--advantage-params"``) adds the deprecated JSON-object spelling;
    its pairs are appended to the same list (see :func:`parse_params`).  ``help`` replaces
    the default help text.
    """
    parser.add_argument("--param", action="append", default=None, metavar="NAME=VALUE",
                        help=help or f"{of} parameter, repeatable (e.g. --param delta=0.5)")
    if json_alias:
        parser.add_argument(json_alias, dest="param", action=_JSONParams, default=None, metavar="JSON",
                            help="deprecated: the same as --param, as one JSON object")


class _JSONParams(argparse.Action):
    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        try:
            obj = json.loads(values)
        except json.JSONDecodeError as err:
            parser.error(f"{option_string}: not a JSON object ({err.msg})")
        if not isinstance(obj, dict):
            parser.error(f"{option_string}: must be a JSON object, e.g. '{{\"delta\": 0.5}}'")
        print(f"{parser.prog}: warning: {option_string} is deprecated; use --param NAME=VALUE", file=sys.stderr)
        items = list(getattr(namespace, self.dest) or [])
        items += [f"{k}={v!r}" if isinstance(v, str) else f"{k}={json.dumps(v) if v is not None else 'none'}"
                  for k, v in obj.items()]
        setattr(namespace, self.dest, items)


def parse_params(items: Iterable[str] | None) -> dict[str, Any]:
    """``["delta=0.5", "normalize=true"]`` → ``{"delta": 0.5, "normalize": True}``.

    Values are Python literals (``0.5``, ``3``, ``(1, 2)``, ``None``, ``True``); ``true``,
    ``false``, ``none`` and ``null`` in any case; anything else stays a string.  A name given
    twice keeps the last value.
    """
    out: dict[str, Any] = {}
    for item in items or ():
        key, sep, raw = str(item).partition("=")
        key, raw = key.strip(), raw.strip()
        if not sep or not key.isidentifier():
            raise ValueError(f"param must look like NAME=VALUE (e.g. delta=0.5), got {item!r}")
        low = raw.lower()
        if low in ("true", "false", "none", "null"):
            val: Any = {"true": True, "false": False, "none": None, "null": None}[low]
        else:
            try:
                val = ast.literal_eval(raw)
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                val = raw
        out[key] = val
    return out


# ----------------------------------------------------------------- threads
def default_threads(all_cores: bool = False) -> int:
    """Default for ``--threads``: half the CPU cores this process may use, at least 1; all of
    them for the commands registered with ``all_cores=True`` (:func:`add_threads_option`).

    Half the cores: measured on the 2-core machine the toolkit is tested on (``rlvr-sim
    categorical --preset fgrpo-fig4-small``, numbers in ``docs/cli.md``), with both cores busy
    with other work, torch operations split over two OpenMP threads took 167 s and one thread 50 s
    (oversubscribed OpenMP threads wait on each other at every operation's barrier); on a nearly
    idle machine two threads took 10.8 s and one 13.6 s.  Half the cores never oversubscribes a
    machine shared with one other job of the same size and keeps most of the speed of an idle one.

    All the cores: commands whose parallel work is independent jobs side by side, each on one
    thread, with no barrier between them (``rlvr-sim categorical``'s blocks of group sizes,
    ``rlvr-diff weights``'s per-matrix spectra): under load they slow down only by the share of
    the cores they get, and on an idle machine they use it all (``docs/cli.md``).
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        cores = os.cpu_count() or 1
    return max(1, cores) if all_cores else max(1, cores // 2)


def add_threads_option(parser: argparse.ArgumentParser, *, all_cores: bool = False) -> None:
    """``--threads N`` (CPU threads of torch and of the BLAS/OpenMP pools); its default is
    :func:`default_threads` ``(all_cores)``."""
    parser.add_argument("--threads", type=int, default=None, metavar="N",
                        help=f"CPU threads for torch and BLAS (>= 1) [{default_threads(all_cores)}; see docs/cli.md]")
    if all_cores:
        parser.set_defaults(threads_all_cores=True)


def apply_threads(n: int | None, *, explicit: bool = True, all_cores: bool = False) -> int | None:
    """Use ``n`` CPU threads (``None``: :func:`default_threads` ``(all_cores)``) in torch and the
    BLAS pools.

    ``explicit=False`` (a command without ``--threads``) changes nothing.  Returns the number
    set.  Torch is not imported here (``rlvr-theory`` never loads it): a torch already loaded
    is set directly, one loaded later reads ``OMP_NUM_THREADS``, set here.
    """
    if not explicit:
        return None
    from .checks import integer

    n = integer("threads", default_threads(all_cores) if n is None else n, low=1)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(n)  # read by torch and BLAS libraries loaded from now on, and by workers
    try:
        import threadpoolctl

        threadpoolctl.threadpool_limits(n)  # the BLAS / OpenMP libraries already loaded
    except ImportError:  # pragma: no cover - a dependency
        pass
    torch = sys.modules.get("torch")
    if torch is not None and torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return n


def add_overwrite_option(parser: argparse.ArgumentParser) -> None:
    """``--overwrite``: replace a non-empty ``--out`` that is not an earlier output of the command
    (see ``rlvr_plumbing.io.check_out``); without it such a directory is refused before any work."""
    parser.add_argument("--overwrite", action="store_true",
                        help="replace a non-empty --out that this command did not write (default: refuse)")


def add_run_options(parser: argparse.ArgumentParser, *, device: str | None = None,
                    all_cores: bool = False) -> None:
    """The options every simulator subcommand shares: ``--device`` (only when ``device``, its
    default, is given), ``--threads`` (default :func:`default_threads` ``(all_cores)``),
    ``--out DIR`` (required), ``--overwrite`` and ``--quiet``."""
    if device is not None:
        parser.add_argument("--device", default=device, help=f"auto, cpu, cuda or cuda:K [{device}]")
    add_threads_option(parser, all_cores=all_cores)
    parser.add_argument("--out", required=True, metavar="DIR", help="output directory (files written atomically)")
    add_overwrite_option(parser)
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


# ---------------------------------------------------------------- settings
def _unwrap_optional(tp: Any) -> Any:
    args = typing.get_args(tp)
    if (typing.get_origin(tp) in (typing.Union, types.UnionType)) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return rest[0] if len(rest) == 1 else str
    return tp


def _show(default: Any) -> str:
    if isinstance(default, tuple):
        return " ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in default)
    if isinstance(default, float):
        return f"{default:g}"
    return str(default)


def add_settings(parser: argparse.ArgumentParser, cls: type, *, exclude: Iterable[str] = (),
                 only: Iterable[str] | None = None, required: Iterable[str] = ()) -> None:
    """One flag per field of the dataclass ``cls`` (``--group-size`` for ``group_size``).

    A field's ``metadata`` may hold ``help`` (text), ``choices``, ``metavar``, ``flag`` (another
    spelling), ``default_text`` (shown instead of the default) and ``cli=False`` (no flag).
    Flags default to ``None`` so that :func:`given_settings` returns only what was typed; the
    help text shows the field's default.  ``bool`` fields default ``False`` become
    ``--name``; default ``True`` become ``--no-name``.  ``tuple[float, float]`` takes two
    values, ``list[int]`` one or more; ``dict`` fields get no flag.
    """
    hints = typing.get_type_hints(cls)
    exclude, only, required = set(exclude), None if only is None else list(only), set(required)
    fields = [f for f in dataclasses.fields(cls) if f.name not in exclude and f.metadata.get("cli", True)]
    if only is not None:
        by = {f.name: f for f in fields}
        fields = [by[n] for n in only if n in by]
    for f in fields:
        tp = _unwrap_optional(hints[f.name])
        origin = typing.get_origin(tp)
        if tp is dict or origin is dict:
            continue
        flag = f.metadata.get("flag", "--" + f.name.replace("_", "-"))
        has_default = f.default is not dataclasses.MISSING
        shown = f.metadata.get("default_text", _show(f.default) if has_default and f.default is not None else None)
        help_ = f.metadata.get("help", "")
        if shown is not None and f.name not in required:
            help_ = f"{help_} [{shown}]".strip()
        kw: dict[str, Any] = {"dest": f.name, "default": None, "help": help_}
        if f.name in required:
            kw["required"] = True
        if tp is bool:
            if has_default and f.default is True:
                flag = f.metadata.get("flag", "--no-" + f.name.replace("_", "-"))
                kw.update(action="store_false", help=f.metadata.get("help", ""))
            else:
                kw.update(action="store_true", help=f.metadata.get("help", ""))  # a switch: off unless given
            parser.add_argument(flag, **kw)
            continue
        if origin is tuple:
            elem = typing.get_args(tp)
            kw.update(nargs=len(elem), type=elem[0])
        elif origin is list:
            kw.update(nargs="+", type=typing.get_args(tp)[0])
        else:
            kw["type"] = tp if tp in (int, float, str) else str
        for key in ("choices", "metavar"):
            if key in f.metadata:
                kw[key] = f.metadata[key]
        parser.add_argument(flag, **kw)


def given_settings(args: argparse.Namespace, cls: type, *, names: Iterable[str] | None = None) -> dict[str, Any]:
    """The fields of ``cls`` the user gave on the command line (not ``None``) as keyword
    arguments (``tuple`` fields as tuples)."""
    keep = None if names is None else set(names)
    hints = typing.get_type_hints(cls)
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if keep is not None and f.name not in keep:
            continue
        v = getattr(args, f.name, None)
        if v is None:
            continue
        if typing.get_origin(_unwrap_optional(hints[f.name])) is tuple:
            v = tuple(v)
        out[f.name] = v
    return out
