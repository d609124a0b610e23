"""``rlvr-train`` (also ``python -m simulations.grpo``): SFT, GRPO, evaluation, sweep.

::

    rlvr-train sft  --task arith --preset tiny-cpu --out runs/sft
    rlvr-train grpo --init runs/sft/final --advantage asym_grpo --param delta=0.5 \\
                    --steps 200 --group-size 8 --out runs/asym05
    rlvr-train grpo --out runs/asym05 --resume          # continue after a crash
    rlvr-train eval runs/asym05/checkpoint-000200 --k 1 8 64
    rlvr-train sweep --init runs/sft/final --steps 200 --out runs/sweep

Bad settings print ``rlvr-train: error: MESSAGE`` (naming the setting) and exit with status 2
before any work starts.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence

__all__ = ["main", "main_exit", "build_parser"]

PROG = "rlvr-train"


def _add_common(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--seed", type=int, default=None, help="seed of every random draw [0]")
    ap.add_argument("--device", default=None, help="auto, cpu, cuda, cuda:N [auto]")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads [torch default]")
    ap.add_argument("--quiet", action="store_true", default=None, help="no progress bars")


def _add_grpo_options(ap: argparse.ArgumentParser, *, for_sweep: bool = False) -> None:
    if not for_sweep:
        ap.add_argument("--out", required=True, help="run directory (new, or an existing run with --resume)")
        src = ap.add_mutually_exclusive_group()
        src.add_argument("--init", default=None, help="local model directory (e.g. runs/sft/final)")
        src.add_argument("--preset", default=None, help="tiny-cpu or small-gpu (fresh model) [tiny-cpu]")
        how = ap.add_mutually_exclusive_group()
        how.add_argument("--advantage", default=None, help="registry name (rlvr-theory list) [grpo]")
        how.add_argument("--schedule", default=None, help="fade, fade-log or agrae (rlvr_theory.schedules)")
        ap.add_argument("--param", action="append", default=None, metavar="NAME=VALUE",
                        help="advantage or schedule parameter, repeatable (e.g. delta=0.5)")
        ap.add_argument("--resume", action="store_true", default=None,
                        help="continue the run in --out from its last complete checkpoint")
    ap.add_argument("--task", default=None, help="task name [the task of --init, else arith]")
    ap.add_argument("--difficulty", type=int, default=None, help="task difficulty [task default / --init's]")
    ap.add_argument("--steps", type=int, default=None, help="training steps [200]")
    ap.add_argument("--batch-size", type=int, default=None, help="prompts per step B [16]")
    ap.add_argument("--group-size", type=int, default=None, help="rollouts per prompt G >= 2 [8]")
    ap.add_argument("--max-new-tokens", type=int, default=None, help="response budget [longest answer + 2]")
    ap.add_argument("--temperature", type=float, default=None, help="sampling temperature [1.0]")
    ap.add_argument("--top-p", type=float, default=None, help="nucleus mass [1.0]")
    ap.add_argument("--loss", default=None, help="ppo, cispo or grpo-n [ppo]")
    ap.add_argument("--aggregation", default=None,
                    help="token-mean, seq-mean-token-mean, seq-mean-token-sum or sum-tmax [token-mean]")
    ap.add_argument("--eps-low", type=float, default=None, help="lower clip ε_low [0.2; cispo 1.0]")
    ap.add_argument("--eps-high", type=float, default=None, help="upper clip ε_high [0.2; cispo 5.0]")
    ap.add_argument("--ppo-epochs", type=int, default=None, help="inner epochs μ [1]")
    ap.add_argument("--minibatches", type=int, default=None, help="minibatches per epoch [1]")
    ap.add_argument("--lr", type=float, default=None, help="AdamW learning rate [3e-4]")
    ap.add_argument("--weight-decay", type=float, default=None, help="AdamW weight decay [0]")
    ap.add_argument("--warmup-steps", type=int, default=None, help="linear warm-up (optimizer steps) [0]")
    ap.add_argument("--max-grad-norm", type=float, default=None, help="gradient clipping [1.0]")
    ap.add_argument("--kl-coef", type=float, default=None, help="KL(π‖π_ref) penalty β [0]")
    ap.add_argument("--entropy-coef", type=float, default=None, help="entropy bonus c_H [0]")
    ap.add_argument("--no-log-kl", dest="log_kl", action="store_false", default=None,
                    help="do not keep a reference model to log the KL (saves memory)")
    ap.add_argument("--reward-values", type=float, nargs=2, default=None, metavar=("R_W", "R_C"),
                    help="rewards of a wrong and a correct response [0 1]")
    ap.add_argument("--checkpoint-every", type=int, default=None, help="save every k steps [50]")
    ap.add_argument("--log-every", type=int, default=None, help="rewrite the metrics files every k steps [10]")
    _add_common(ap)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=PROG, description="Small GRPO trainer producing Hugging Face checkpoints.")
    sub = ap.add_subparsers(dest="command", required=True)

    s = sub.add_parser("sft", help="supervised warm start to a target solve rate",
                       description="SFT on task demonstrations until the held-out sampled solve rate "
                                   "reaches --target-solve-rate; saves OUT/final.")
    s.add_argument("--out", required=True, help="new run directory")
    s.add_argument("--task", default="arith", help="task name [arith]")
    s.add_argument("--difficulty", type=int, default=None, help="task difficulty [task default]")
    src = s.add_mutually_exclusive_group()
    src.add_argument("--preset", default="tiny-cpu", help="tiny-cpu or small-gpu [tiny-cpu]")
    src.add_argument("--init", default=None, help="start from a local model directory instead")
    s.add_argument("--target-solve-rate", type=float, default=0.3, help="stop at this held-out solve rate [0.3]")
    s.add_argument("--max-steps", type=int, default=3000, help="give up after this many steps [3000]")
    s.add_argument("--batch-size", type=int, default=64, help="demonstrations per step [64]")
    s.add_argument("--lr", type=float, default=3e-3, help="AdamW learning rate [3e-3]")
    s.add_argument("--warmup-steps", type=int, default=20, help="linear warm-up [20]")
    s.add_argument("--eval-every", type=int, default=25, help="measure the solve rate every k steps [25]")
    s.add_argument("--eval-problems", type=int, default=64, help="held-out problems for the solve rate [64]")
    s.add_argument("--eval-samples", type=int, default=4, help="samples per problem for the solve rate [4]")
    _add_common(s)
    s.set_defaults(func=_cmd_sft)

    g = sub.add_parser("grpo", help="GRPO with any registry advantage or schedule",
                       description="GRPO / DAPO / CISPO / GRPO-N training with checkpoints every k steps.")
    _add_grpo_options(g)
    g.set_defaults(func=_cmd_grpo)

    e = sub.add_parser("eval", help="held-out pass@k and answer/token entropy of a checkpoint")
    e.add_argument("checkpoint", help="checkpoint directory")
    e.add_argument("--k", type=int, nargs="+", default=[1], help="pass@k values [1]")
    e.add_argument("--n", type=int, default=None, help="samples per problem [max k]")
    e.add_argument("--problems", type=int, default=100, help="held-out problems [100]")
    e.add_argument("--task", default=None, help="task [the checkpoint's task.json]")
    e.add_argument("--difficulty", type=int, default=None, help="task difficulty [the checkpoint's]")
    e.add_argument("--temperature", type=float, default=1.0, help="[1.0]")
    e.add_argument("--top-p", type=float, default=1.0, help="[1.0]")
    e.add_argument("--max-new-tokens", type=int, default=None, help="[longest answer + 2]")
    e.add_argument("--batch-size", type=int, default=2048, help="sequences generated at once [2048]")
    e.add_argument("--out", default=None, help="write eval.json and per_problem.csv into this directory")
    _add_common(e)
    e.set_defaults(func=_cmd_eval)

    w = sub.add_parser("sweep", help="AsymGRPO δ ∈ {0.5,1,2} and FADE from one SFT checkpoint + output-head table",
                       description="Trains one GRPO run per advantage (resuming unfinished ones), evaluates "
                                   "them and tabulates the output-head SVD of their weight changes.")
    w.add_argument("--init", required=True, help="the SFT checkpoint all runs start from")
    w.add_argument("--out", required=True, help="sweep directory (one sub-directory per run)")
    w.add_argument("--deltas", type=float, nargs="+", default=[0.5, 1.0, 2.0], help="AsymGRPO δ values [0.5 1 2]")
    w.add_argument("--no-fade", dest="fade", action="store_false", help="skip the FADE run")
    w.add_argument("--fade-param", action="append", default=None, metavar="NAME=VALUE",
                   help="FADESchedule parameter (e.g. H_target=0.3), repeatable")
    w.add_argument("--eval-problems", type=int, default=100, help="held-out problems for pass@1 (0: skip) [100]")
    w.add_argument("--eval-n", type=int, default=16, help="samples per problem for pass@1 [16]")
    w.add_argument("--diff-device", default="auto", help="device of the checkpoint diff [auto]")
    w.add_argument("--diff-layers", default="all", choices=["all", "head"],
                   help="SVD metrics for every matrix or the output head only [all]")
    _add_grpo_options(w, for_sweep=True)
    w.set_defaults(func=_cmd_sweep)
    return ap


# ------------------------------------------------------------------ commands
def _given(args: argparse.Namespace, names: Sequence[str]) -> dict[str, Any]:
    return {k: getattr(args, k) for k in names if getattr(args, k, None) is not None}


_GRPO_FIELDS = ("init", "preset", "task", "difficulty", "advantage", "schedule", "steps", "batch_size", "group_size",
                "max_new_tokens", "temperature", "top_p", "loss", "aggregation", "eps_low", "eps_high",
                "ppo_epochs", "minibatches", "lr", "weight_decay", "warmup_steps", "max_grad_norm", "kl_coef",
                "entropy_coef", "log_kl", "checkpoint_every", "log_every", "seed", "device", "threads",
                "quiet", "resume")


def _grpo_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    from .config import parse_params

    kw = _given(args, _GRPO_FIELDS)
    if getattr(args, "param", None) is not None:
        kw["params"] = parse_params(args.param)
    if args.reward_values is not None:
        kw["reward_values"] = tuple(args.reward_values)
    return kw


def _task_of_init(kw: dict[str, Any]) -> None:
    """Default task and difficulty: those of --init's task.json (an SFT checkpoint)."""
    init = kw.get("init")
    if init and "task" not in kw and (Path(init) / "task.json").is_file():
        spec = json.loads((Path(init) / "task.json").read_text())
        kw["task"] = spec["name"]
        for k in ("difficulty", "heldout_fraction", "split_seed"):
            if k in spec and k not in kw:
                kw[k] = spec[k]


def _cmd_sft(args: argparse.Namespace) -> int:
    from .sft import SFTConfig, train_sft

    kw = _given(args, ("task", "difficulty", "preset", "init", "target_solve_rate", "max_steps", "batch_size",
                       "lr", "warmup_steps", "eval_every", "eval_problems", "eval_samples", "seed", "device",
                       "threads", "quiet"))
    if kw.get("init"):
        kw.pop("preset", None)
    final = train_sft(SFTConfig(out=args.out, **kw))
    info = json.loads((final / "sft.json").read_text())
    print(f"{PROG}: sft: {info['steps']} steps, held-out solve rate {info['heldout_solve_rate']:.3f} -> {final}")
    return 0


def _cmd_grpo(args: argparse.Namespace) -> int:
    from .trainer import GRPOConfig, train

    kw = _grpo_kwargs(args)
    saved = Path(args.out) / "run_config.json"
    if kw.get("resume") and saved.is_file():  # a resumed run keeps its settings unless given again
        base = json.loads(saved.read_text())
        base["reward_values"] = tuple(base["reward_values"])
        base.update(kw)
        kw = base
        kw.pop("out", None)
    else:
        _task_of_init(kw)
    out = train(GRPOConfig(out=args.out, **kw))
    last = sorted(out.glob("checkpoint-*"))
    print(f"{PROG}: grpo: done -> {last[-1] if last else out}")
    return 0


def _cmd_eval(args: argparse.Namespace) -> int:
    from .evaluate import evaluate, load_task, write_result

    task = load_task(args.checkpoint, args.task, args.difficulty) if (args.task or args.difficulty) else None
    res = evaluate(args.checkpoint, task=task, k=args.k, n=args.n, problems=args.problems,
                   max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p,
                   seed=args.seed or 0, batch_size=args.batch_size, device=args.device or "auto",
                   threads=args.threads, progress=not args.quiet)
    print(f"checkpoint      {res.checkpoint}")
    print(f"task            {res.task['name']} (difficulty {res.task['difficulty']}), "
          f"{res.problems} held-out problems x {res.n} samples")
    for k, v in res.pass_at_k.items():
        print(f"pass@{k:<10d} {v:.4f}")
    print(f"answer entropy  {res.answer_entropy:.4f} nats")
    print(f"token entropy   {res.token_entropy:.4f} nats")
    if args.out:
        write_result(res, args.out)
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    from .config import parse_params
    from .sweep import run_sweep

    kw = _grpo_kwargs(args)
    kw.pop("resume", None)
    kw["init"] = args.init
    _task_of_init(kw)
    kw.pop("init")
    quiet = bool(kw.pop("quiet", False))
    res = run_sweep(args.init, args.out, deltas=args.deltas, fade=args.fade,
                    fade_params=parse_params(args.fade_param), eval_problems=args.eval_problems,
                    eval_n=args.eval_n, diff_device=args.diff_device, diff_layers=args.diff_layers,
                    quiet=quiet, **kw)
    print(res["summary"].to_string(index=False))
    if res["table"] is not None:
        print(res["table"].to_string(index=False))
    else:
        print(f"{PROG}: sweep: runs trained, output-head table skipped: {res['table_error']}", file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ValueError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2


def main_exit() -> None:  # console-script entry point
    sys.exit(main())


if __name__ == "__main__":  # pragma: no cover
    main_exit()
