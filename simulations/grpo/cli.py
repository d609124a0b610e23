"""``rlvr-train`` (also ``python -m simulations.grpo``): SFT, GRPO, evaluation, sweep.

::

    rlvr-train sft  --task arith --preset tiny-cpu --out runs/sft
    rlvr-train grpo --init runs/sft/final --advantage asym_grpo --param delta=0.5 \\
                    --steps 200 --group-size 8 --out runs/asym05
    rlvr-train grpo --out runs/asym05 --resume          # continue after a crash
    rlvr-train eval runs/asym05/checkpoint-000200 --k 1 8 64
    rlvr-train eval runs/asym05/checkpoint-000200 --temperature 0   # greedy accuracy
    rlvr-train sweep --init runs/sft/final --steps 200 --out runs/sweep

The flags of every subcommand are generated from the fields of its settings dataclass in
:mod:`simulations.grpo.config` (``--group-size`` for ``GRPOConfig.group_size``; the help shows
each field's default).  Parsing, dispatch, errors and ``--threads`` are those of
:mod:`rlvr_plumbing.runner`: a bad setting prints ``rlvr-train: error: MESSAGE`` (naming the
flag) and exits with status 2 before any work starts.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from rlvr_plumbing import runner
from rlvr_plumbing.io import check_out

from .config import EVAL_FILES, EvalConfig, GRPOConfig, SFTConfig, SweepConfig, check_out_dir, read_run_settings

__all__ = ["main", "main_exit", "build_parser", "add_run_settings", "NOT_FLAGS"]

PROG = "rlvr-train"

#: fields that get no flag of their own name, and what sets them instead
NOT_FLAGS = {
    "params": "--param NAME=VALUE (repeatable)",
    "fade_params": "--fade-param NAME=VALUE (repeatable)",
    "checkpoint": "the positional argument of rlvr-train eval",
    **{name: "set by the sweep for each run" for name in SweepConfig.PER_RUN},
}

#: choices that exclude each other on the command line
_EXCLUSIVE = (("init", "preset"), ("advantage", "schedule"))


def add_run_settings(parser: argparse.ArgumentParser, cls: type, *, exclude: Iterable[str] = (),
                     required: Iterable[str] = ("out",)) -> None:
    """One flag per field of the settings dataclass ``cls`` (:func:`rlvr_plumbing.runner.add_settings`),
    ``--init``/``--preset`` and ``--advantage``/``--schedule`` mutually exclusive, and ``--threads``
    (:func:`rlvr_plumbing.runner.add_threads_option`) for a class with a ``threads`` field."""
    exclude = set(exclude)
    names = {f.name for f in dataclasses.fields(cls)} - exclude
    grouped: list[str] = []
    for pair in _EXCLUSIVE:
        if set(pair) <= names:
            runner.add_settings(parser.add_mutually_exclusive_group(), cls, only=pair)
            grouped += pair
    runner.add_settings(parser, cls, exclude={*exclude, *grouped, "threads"}, required=required)
    if "threads" in names:
        runner.add_threads_option(parser)


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``rlvr-train`` (subcommands ``sft``, ``grpo``, ``eval``, ``sweep``)."""
    ap = argparse.ArgumentParser(prog=PROG, description="Small GRPO trainer producing Hugging Face checkpoints.")
    sub = ap.add_subparsers(dest="command", required=True)

    s = sub.add_parser("sft", help="supervised warm start to a target solve rate",
                       description="SFT on task demonstrations until the held-out sampled solve rate "
                                   "reaches --target-solve-rate; saves OUT/final.")
    add_run_settings(s, SFTConfig)
    s.set_defaults(func=_cmd_sft)

    g = sub.add_parser("grpo", help="GRPO with any registry advantage or schedule",
                       description="GRPO / DAPO / CISPO / GRPO-N / GSPO / GSPO-N training with checkpoints "
                                   "every k steps.")
    add_run_settings(g, GRPOConfig)
    runner.add_param_option(g, of="advantage or schedule")
    g.add_argument("--recipe", default=None, metavar="NAME",
                   help="a method's published settings (simulations.grpo.recipes: "
                        f"{', '.join(_recipe_names())}); flags given explicitly win")
    g.set_defaults(func=_cmd_grpo)

    e = sub.add_parser("eval", help="held-out pass@k (or greedy accuracy) and answer/token entropy of a checkpoint")
    e.add_argument("checkpoint", help="checkpoint directory")
    add_run_settings(e, EvalConfig, required=())
    runner.add_param_option(e, of="advantage of --triage")
    e.set_defaults(func=_cmd_eval)

    w = sub.add_parser("sweep", help="AsymGRPO δ ∈ {0.5,1,2} and FADE from one SFT checkpoint + output-head table",
                       description="Trains one GRPO run per advantage (resuming unfinished ones), evaluates "
                                   "them and tabulates the output-head SVD of their weight changes.")
    add_run_settings(w, SweepConfig, exclude=SweepConfig.PER_RUN, required=("init", "out"))
    w.add_argument("--fade-param", action="append", default=None, metavar="NAME=VALUE",
                   help="FADESchedule parameter, repeatable (e.g. --fade-param H_target=0.3)")
    w.set_defaults(func=_cmd_sweep)
    return ap


# ------------------------------------------------------------------ commands
def _task_of_init(kw: dict[str, Any]) -> None:
    """Default task and difficulty: those of --init's task.json (an SFT checkpoint; the file is
    checked by :func:`simulations.grpo.tasks.read_spec`)."""
    from .tasks import read_spec

    init = kw.get("init")
    spec = read_spec(init, what="init") if init and Path(init).is_dir() else None
    if spec is not None and "task" not in kw:
        kw["task"] = spec["name"]
        for k in ("difficulty", "heldout_fraction", "split_seed"):
            if k in spec and k not in kw:
                kw[k] = spec[k]


def _cmd_sft(args: argparse.Namespace) -> int:
    from .sft import train_sft

    final = train_sft(SFTConfig(**runner.given_settings(args, SFTConfig)))
    info = json.loads((final / "sft.json").read_text())
    print(f"{PROG}: sft: {info['steps']} steps, held-out solve rate {info['heldout_solve_rate']:.3f} -> {final}")
    return 0


def _recipe_names() -> list[str]:
    from . import recipes

    return recipes.names()


def with_recipe(name: str | None, kw: dict[str, Any]) -> dict[str, Any]:
    """The settings ``kw`` given on the command line over recipe ``name``'s
    (:mod:`simulations.grpo.recipes`).  A given ``advantage`` or ``schedule`` replaces the
    recipe's method as a whole: its ``advantage``, ``schedule`` and ``params``."""
    if name is None:
        return kw
    from . import recipes

    base = recipes.settings(name)
    if "advantage" in kw or "schedule" in kw:
        for key in ("advantage", "schedule", "params"):
            base.pop(key, None)
    return {**base, **kw}


def _cmd_grpo(args: argparse.Namespace) -> int:
    from .trainer import train

    kw = runner.given_settings(args, GRPOConfig)
    if args.param is not None:
        kw["params"] = runner.parse_params(args.param)
    kw = with_recipe(args.recipe, kw)
    saved = None
    if kw.get("resume"):  # a resumed run keeps its settings unless given again
        check_out_dir(args.out, resume=True)
        saved = read_run_settings(args.out)
        saved.pop("overwrite", None)
        kw = {**saved, **kw}
    else:
        _task_of_init(kw)
    cfg = GRPOConfig(**kw)
    out = train(cfg)
    last = sorted(out.glob("checkpoint-*"))
    stop = _guard_stop(out, last[-1] if last else None)
    if stop is not None:
        print(f"{PROG}: grpo: stopped by --guard at step {stop['step']} ({stop['rule']}: {stop['message']}) -> "
              f"{last[-1]}; continue with: {PROG} grpo --out {out} --resume")
        return 0
    print(f"{PROG}: grpo: done -> {last[-1] if last else out}")
    return 0


def _guard_stop(out: Path, last: Path | None) -> dict[str, Any] | None:
    """The guard's ``stop`` record at the step of the last checkpoint ``last`` (``None``: the run
    was not stopped by its guard)."""
    from analysis.audit.trainer_log import find_alerts, read_alerts

    if last is None:
        return None
    step = int(last.name.rsplit("-", 1)[-1])
    stops = [a for a in read_alerts(find_alerts([out])) if a.get("action") == "stop" and a["step"] == step]
    return stops[0] if stops else None


def _rare_set(cfg: EvalConfig, task: Any) -> Any:
    """The rare-correct set of ``--nll-rare-set`` / ``--nll-rare-base`` (``None`` without either).

    The library functions get the settings' names as their ``what`` (``nll_rare_set``,
    ``nll_rare_base``), so that every refusal starts with the flag as typed
    (:func:`rlvr_plumbing.runner.error_message`), then names the file and what was expected."""
    from rlvr_plumbing import checks

    from .evaluate import RARE_SET_EXPECTED, RareSet, rare_correct_set

    checks.integer("nll_rare_prompts", cfg.nll_rare_prompts, low=1)
    checks.integer("nll_rare_samples", cfg.nll_rare_samples, low=1)
    checks.probability("nll_rare_fraction", cfg.nll_rare_fraction, low_open=True)
    path = Path(cfg.nll_rare_set) if cfg.nll_rare_set else None
    if path is not None and path.is_file():
        return RareSet.load(path, what="nll_rare_set")
    if cfg.nll_rare_base is None:
        if path is not None and not path.exists():
            raise ValueError(f"nll_rare_set: {str(path)!r} does not exist; expected {RARE_SET_EXPECTED}, or give "
                             "--nll-rare-base to build one there")
        return None if path is None else RareSet.load(path, what="nll_rare_set")  # a directory: refused
    if path is not None:
        check_out(path, kind="file", arg="nll_rare_set")
    rare = rare_correct_set(cfg.nll_rare_base, task=task, prompts=cfg.nll_rare_prompts, samples=cfg.nll_rare_samples,
                            fraction=cfg.nll_rare_fraction, seed=cfg.seed, batch_size=cfg.batch_size,
                            device=cfg.device, threads=cfg.threads, progress=not cfg.quiet, what="nll_rare_base")
    if path is not None:
        rare.save(path)
    return rare


def _cmd_eval(args: argparse.Namespace) -> int:
    from .evaluate import add_triage, check_triage, evaluate, load_task, write_result

    kw = runner.given_settings(args, EvalConfig)
    if args.param is not None:
        kw["params"] = runner.parse_params(args.param)
    cfg = EvalConfig(**kw)
    if cfg.triage is None and (cfg.params or "advantage" in kw):
        raise ValueError("advantage: it and --param choose the advantage of --triage G; give --triage")
    if cfg.triage is not None:  # before the evaluation, which may take long
        check_triage(cfg.triage, n=cfg.n, k=cfg.k, temperature=cfg.temperature, advantage=cfg.advantage,
                     params=cfg.params)
    if cfg.out is not None:  # before the evaluation, which may take long
        check_out(cfg.out, markers=EVAL_FILES[:1], overwrite=bool(cfg.overwrite))
    task = load_task(cfg.checkpoint, cfg.task, cfg.difficulty) if (cfg.task or cfg.difficulty) else None
    rare = _rare_set(cfg, task)
    res = evaluate(cfg.checkpoint, task=task, k=cfg.k, n=cfg.n, problems=cfg.problems,
                   max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature, top_p=cfg.top_p,
                   seed=cfg.seed, batch_size=cfg.batch_size, device=cfg.device, threads=cfg.threads,
                   progress=not cfg.quiet, rare=rare)
    print(f"checkpoint      {res.checkpoint}")
    print(f"task            {res.task['name']} (difficulty {res.task['difficulty']}), "
          f"{res.problems} held-out problems x "
          + ("1 greedy completion" if res.decoding == "greedy" else f"{res.n} samples"))
    if res.greedy_accuracy is not None:
        print(f"greedy accuracy {res.greedy_accuracy:.4f}")
    for k, v in res.pass_at_k.items():
        print(f"pass@{k:<10d} {v:.4f}")
    print(f"answer entropy  {res.answer_entropy:.4f} nats")
    print(f"token entropy   {res.token_entropy:.4f} nats")
    if res.delta_nll_rare is not None:
        print(f"ΔNLL_rare       {res.delta_nll_rare:+.4f} nats/token ({len(rare.prompts)} rare correct solutions, "
              f"base NLL {float(rare.base_nll.mean()):.4f})")
    if cfg.triage is not None:
        print(add_triage(res, cfg.triage, cfg.advantage, cfg.params).to_string())
    if cfg.out is not None:
        write_result(res, cfg.out, overwrite=bool(cfg.overwrite))
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    from .sweep import run_sweep

    kw = runner.given_settings(args, SweepConfig)
    kw["fade_params"] = runner.parse_params(args.fade_param)
    _task_of_init(kw)
    res = run_sweep(kw.pop("init"), kw.pop("out"), **kw)
    print(res["summary"].to_string(index=False))
    if res["table"] is not None:
        print(res["table"].to_string(index=False))
    else:
        print(f"{PROG}: sweep: runs trained, output-head table skipped: {res['table_error']}", file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``rlvr-train`` with ``argv`` (default: ``sys.argv[1:]``); returns the exit status."""
    return runner.run(PROG, build_parser, argv)


main_exit = runner.console(PROG, build_parser)

if __name__ == "__main__":  # pragma: no cover
    main_exit()
