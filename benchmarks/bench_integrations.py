"""Benchmark: the trainer adapters' time per step, beside the trainer's own advantage computation.

Target: the adapter's extra work for 512 groups x 16 rollouts is under 5 ms per step on the
2-core CPU machine.  Each part runs in the environment of its trainer (``make test-integrations``
builds them) and is skipped where the trainer is not installed:

    PYTHONPATH=. /tmp/envtest/trl/bin/python benchmarks/bench_integrations.py [--groups 512] [--G 16]
    PYTHONPATH=. /tmp/envtest/verl/bin/python benchmarks/bench_integrations.py [--groups 512] [--G 16]

``--trl-step`` (TRL environment) times whole TRL steps of the ``examples/trl_grpo.py``
configuration with ``token_diagnostics`` on and off in the same run (target: ≤ 5 % of a step):

    PYTHONPATH=. /tmp/envtest/trl/bin/python benchmarks/bench_integrations.py --trl-step [--steps 40] [--runs 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a script: the repository root holds the packages
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _median_ms(fn, repeat: int) -> float:
    fn()  # warm-up (first call builds the policy)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def bench_verl(groups: int = 512, G: int = 16, length: int = 256, repeat: int = 20, seed: int = 0) -> dict[str, float]:
    """verl: ``integrations.verl`` estimators vs verl's built-in ``grpo`` on one batch.

    The batch is verl's layout: ``groups·G`` rows, the ``G`` rollouts of a prompt consecutive with
    one ``str(uuid4())`` uid, a (bs, ``length``) response mask of random lengths, the binary score
    on the last valid token, and 2% padding rows (uid ``pad<hex>``) appended.  Times are medians of
    ``repeat`` calls of the estimator function (what ``compute_advantage`` calls), in ms.  Prints the
    table and returns ``{row: ms}``.
    """
    if importlib.util.find_spec("verl") is None:
        print("bench_verl: verl is not installed here; skipped")
        return {}
    import torch
    from verl.trainer.ppo import core_algos

    from integrations import verl as rv

    rng = np.random.default_rng(seed)
    n = groups * G
    n_pad = max(1, n // 50)
    p = rng.uniform(0, 1, size=(groups, 1))
    scores = (rng.random((groups, G)) < p).astype(np.float32).ravel()
    uid = np.repeat(np.array([str(uuid.uuid4()) for _ in range(groups)], dtype=object), G)
    lens = rng.integers(1, length + 1, size=n)
    mask = torch.from_numpy((np.arange(length)[None, :] < lens[:, None]).astype(np.int64))
    tlr = torch.zeros(n, length)
    tlr[torch.arange(n), torch.from_numpy(lens - 1)] = torch.from_numpy(scores)
    pad_tlr = torch.cat([tlr, torch.zeros(n_pad, length)])
    pad_mask = torch.cat([mask, torch.ones(n_pad, length, dtype=mask.dtype)])
    pad_uid = np.concatenate([uid, np.array([f"pad{uuid.uuid4().hex}"] * n_pad, dtype=object)])

    def call(name, tl=tlr, m=mask, u=uid):  # what compute_advantage calls
        fn = core_algos.get_adv_estimator_fn(name)
        return lambda: fn(token_level_rewards=tl, response_mask=m, index=u, config=None)

    saved = {k: os.environ.get(k) for k in (rv.ENV_PARAMS, rv.ENV_LOG_DIR)}
    rows: dict[str, float] = {}
    try:
        os.environ.pop(rv.ENV_LOG_DIR, None)
        rows["verl grpo (built-in, Python loop)"] = _median_ms(call("grpo"), max(3, repeat // 4))
        rows["verl grpo_vectorized (built-in)"] = _median_ms(call("grpo_vectorized"), repeat)
        # what every outcome estimator of verl does: the score sum and the broadcast over the mask
        def common():
            return tlr.sum(-1).unsqueeze(-1) * mask

        rows["score sum + broadcast (common to all)"] = _median_ms(common, repeat)
        os.environ[rv.ENV_PARAMS] = "ddof=1,eps=1e-6"  # the same advantages as verl's grpo
        rv.reset()
        rows["rlvr_grpo ddof=1 eps=1e-6"] = _median_ms(call("rlvr_grpo"), repeat)
        os.environ[rv.ENV_PARAMS] = "delta=0.5"
        rv.reset()
        rows["rlvr_asym_grpo delta=0.5"] = _median_ms(call("rlvr_asym_grpo"), repeat)
        # the adapter's extra work: responses of one token make the score sum and the broadcast
        # (common to every outcome estimator) negligible, leaving uids, Policy.step and conversions
        tl1, m1 = tlr.sum(-1, keepdim=True), torch.ones(n, 1, dtype=mask.dtype)
        rows["rlvr_asym_grpo, 1-token responses"] = extra = _median_ms(call("rlvr_asym_grpo", tl1, m1), repeat)
        rows["verl grpo_vectorized, 1-token responses"] = _median_ms(call("grpo_vectorized", tl1, m1), repeat)
        rv.reset()
        rows[f"rlvr_asym_grpo, +{n_pad} padding rows"] = _median_ms(
            call("rlvr_asym_grpo", pad_tlr, pad_mask, pad_uid), repeat)
        with tempfile.TemporaryDirectory() as tmp:
            os.environ[rv.ENV_LOG_DIR] = tmp
            rv.reset()
            rows["rlvr_asym_grpo, RLVR_LOG_DIR set"] = _median_ms(call("rlvr_asym_grpo"), repeat)
            os.environ.pop(rv.ENV_LOG_DIR)
        os.environ[rv.ENV_PARAMS] = ""
        rv.reset()
        rows["rlvr_schedule_fade"] = _median_ms(call("rlvr_schedule_fade"), repeat)
        pol = rv.policy("rlvr_schedule_fade")
        s64 = scores.astype(np.float64)
        valid = np.ones(n, dtype=bool)
        rows["  Policy.step alone (string uids)"] = _median_ms(lambda: pol.step(s64, uid, valid=valid), repeat)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        rv.reset()
    ref = rows["verl grpo (built-in, Python loop)"]
    vec = rows["verl grpo_vectorized (built-in)"]
    print(f"verl {sys.modules['verl'].__version__}, torch {torch.__version__}, {torch.get_num_threads()} threads: "
          f"{groups} groups x {G} rollouts, responses of {length} tokens")
    print(f"{'estimator':44s} {'ms/call':>9s} {'/ grpo':>8s} {'/ grpo_vec':>10s}")
    for k, v in rows.items():
        print(f"{k:44s} {v:9.2f} {v / ref:8.3f} {v / vec:10.2f}")
    print(f"adapter's own work per step (rlvr_asym_grpo on 1-token responses): {extra:.2f} ms (target < 5 ms)")
    return rows


def bench_trl(groups: int = 512, G: int = 16, repeat: int = 20, seed: int = 0) -> dict[str, float]:
    """TRL: the adapter's extra work per generation batch vs TRL's own advantages on one batch.

    The batch is TRL's layout after ``_calculate_rewards``: ``groups·G`` rows (the ``G``
    completions of a prompt consecutive), one binary reward function, rewards gathered on one
    process.  "TRL's own" is the code of ``trl.GRPOTrainer._generate_and_score_completions``
    (1.16, ``scale_rewards="group"``) from the gathered rewards to the logged advantages; the
    adapter rows time ``integrations.trl.GRPOTrainer._rlvr_apply`` on a real trainer (tiny
    model, nothing generated): weighted sum, ``Policy.step`` (advantages and masses), the
    process slice, the completions-log replacement and the ``rlvr/*`` metrics.  That work comes
    on top of TRL's, which still runs.  Times are medians of ``repeat`` calls, in ms.  Prints the
    table and returns ``{row: ms}``.
    """
    if importlib.util.find_spec("trl") is None:
        print("bench_trl: trl is not installed here; skipped")
        return {}
    import torch
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, Qwen2Config
    from trl import GRPOConfig
    from trl.trainer.utils import nanstd

    from integrations.trl import GRPOTrainer
    from simulations.grpo.tokenizer import build_tokenizer

    n = groups * G
    rng = np.random.default_rng(seed)
    p = rng.uniform(0, 1, size=(groups, 1))
    rpf = torch.from_numpy((rng.random((groups, G)) < p).astype(np.float32).reshape(n, 1))
    weights = torch.ones(1)
    tok = build_tokenizer()
    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                      num_key_value_heads=1, intermediate_size=32, pad_token_id=tok.pad_token_id)

    def trainer(tmp, **kw):
        args = GRPOConfig(output_dir=tmp, use_cpu=True, per_device_train_batch_size=n, num_generations=G,
                          report_to=[], disable_tqdm=True, bf16=False)
        tr = GRPOTrainer(model=AutoModelForCausalLM.from_config(cfg), processing_class=tok, args=args,
                         reward_funcs=lambda completions, **k: [0.0] * len(completions),
                         train_dataset=Dataset.from_dict({"prompt": ["1+1="] * 4}), **kw)
        tr._logs["advantages"].extend([0.0] * n)  # what TRL logged before the adapter replaces it
        return tr

    logged: list[float] = []

    def trl_own():  # trl 1.16 GRPOTrainer._generate_and_score_completions, scale_rewards="group"
        unscorable = torch.isnan(rpf).all(dim=1)
        rewards = (rpf * weights.unsqueeze(0)).nansum(dim=1)
        rewards[unscorable] = torch.nan
        mean = torch.nanmean(rewards.view(-1, G), dim=1).repeat_interleave(G, dim=0)
        std = nanstd(rewards.view(-1, G), dim=1).repeat_interleave(G, dim=0)
        adv = torch.nan_to_num((rewards - mean) / (std + 1e-4), nan=0.0)
        torch.isclose(std, torch.zeros_like(std))
        all_adv = adv.clone()
        adv = adv[slice(0, n)]
        logged.clear()
        logged.extend(all_adv.tolist())

    rows: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        rows["TRL's own advantages (scale_rewards=group)"] = _median_ms(trl_own, repeat)
        for label, kw in (("adapter asym_grpo delta=0.5", dict(advantage="asym_grpo", advantage_params={"delta": 0.5})),
                          ("adapter grpo ddof=1 eps=1e-4 (= TRL's)", dict(advantage="grpo",
                                                                          advantage_params={"ddof": 1, "eps": 1e-4})),
                          ("adapter schedule fade", dict(schedule="fade"))):
            tr = trainer(tmp, **kw)
            out = {"advantages": torch.zeros(n)}
            rows[label] = _median_ms(lambda tr=tr, out=out: tr._rlvr_apply(out, rpf, "train"), repeat)
        pol = tr.rlvr_policy
        r64 = rpf[:, 0].double().numpy()
        rows["  of which Policy.step (fade, numpy)"] = _median_ms(lambda: pol.step(r64, group_size=G), repeat)
    ref = rows["TRL's own advantages (scale_rewards=group)"]
    print(f"trl {trl.__version__}, torch {torch.__version__}, {torch.get_num_threads()} threads: "
          f"{groups} groups x {G} rollouts ({n} completions), target: adapter < 5 ms per generation batch")
    print(f"{'per generation batch':44s} {'ms/call':>9s} {'/ TRL own':>10s}")
    for k, v in rows.items():
        print(f"{k:44s} {v:9.2f} {v / ref:10.2f}")
    return rows


def bench_trl_token_diagnostics(steps: int = 40, runs: int = 3, seed: int = 0) -> dict[str, float]:
    """TRL: a whole step of ``examples/trl_grpo.py``'s configuration (generation, rewards, loss,
    backward, optimizer; tiny 2-layer Qwen2, 4 prompts x 8 completions of 4 tokens, CPU) with the
    token diagnostics on vs off, in the same run.

    Each of ``runs`` runs of ``steps`` optimizer steps switches ``trainer.rlvr_token_diagnostics``
    at every step (on at odd steps in even runs, at even steps in odd runs), so that on and off
    steps alternate under the same machine load.  A step's time runs from ``on_step_begin`` to
    ``on_step_end`` (TRL's log of the step comes after it and is left out there); the first two
    steps of each run are left out (warm-up).  The diagnostics' own time (``_rlvr_token_metrics``
    in the loss and the log-time tracker ``_rlvr_track_entropy``) is also timed inside the on
    steps: the overhead free of step-to-step noise.  Prints and returns ``{row: value}``.
    """
    if importlib.util.find_spec("trl") is None:
        print("bench_trl_token_diagnostics: trl is not installed here; skipped")
        return {}
    import logging

    import torch
    import trl
    from datasets import Dataset
    from transformers import PrinterCallback, TrainerCallback
    from trl import GRPOConfig

    from integrations.trl import GRPOTrainer
    from simulations.grpo.tokenizer import build_tokenizer

    path = Path(__file__).resolve().parents[1] / "examples" / "trl_grpo.py"
    spec = importlib.util.spec_from_file_location("_rlvr_example_trl_grpo", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)

    class Alternate(TrainerCallback):
        def __init__(self, trainer, phase: int):
            self.trainer, self.phase = trainer, phase
            self.t0, self.times = 0.0, {True: [], False: []}

        def on_step_begin(self, args, state, control, **kw):
            self.trainer.rlvr_token_diagnostics = (state.global_step + self.phase) % 2 == 1
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            if state.global_step > 2:
                self.times[self.trainer.rlvr_token_diagnostics].append(time.perf_counter() - self.t0)

    def one_run(tmp: str, phase: int) -> tuple[dict[bool, list[float]], float]:
        tokenizer = build_tokenizer()
        rng = np.random.default_rng(seed)
        prompts = [f"{x}+{y}=" for x, y in rng.integers(0, 50, size=(64, 2))]
        args = GRPOConfig(output_dir=tmp, use_cpu=True, seed=seed, max_steps=steps, learning_rate=3e-3,
                          per_device_train_batch_size=32, num_generations=8, max_completion_length=4,
                          temperature=1.0, logging_steps=1, log_completions=False, report_to=[],
                          save_strategy="no", disable_tqdm=True, bf16=False)
        tr = GRPOTrainer(model=example.tiny_model(tokenizer, seed), processing_class=tokenizer,
                         reward_funcs=example.starts_with_digit, train_dataset=Dataset.from_dict({"prompt": prompts}),
                         args=args, advantage="asym_grpo", advantage_params={"delta": 0.5})
        spent = [0.0]
        for name in ("_rlvr_token_metrics", "_rlvr_track_entropy"):
            fn = getattr(tr, name)

            def timed(*a, _fn=fn, **k):
                t0 = time.perf_counter()
                try:
                    return _fn(*a, **k)
                finally:
                    spent[0] += time.perf_counter() - t0
            setattr(tr, name, timed)
        alt = Alternate(tr, phase)
        tr.remove_callback(PrinterCallback)  # TRL prints every log without tqdm
        tr.add_callback(alt)
        tr.train()
        return alt.times, spent[0] / (steps / 2)

    quiet = [logging.getLogger(n) for n in ("transformers", "trl")]
    levels = [lg.level for lg in quiet]
    for lg in quiet:
        lg.setLevel(logging.ERROR)
    times: dict[bool, list[float]] = {True: [], False: []}
    spent: list[float] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for r in range(runs):
                t, s = one_run(os.path.join(tmp, str(r)), r % 2)
                for k in times:
                    times[k].extend(t[k])
                spent.append(s)
    finally:
        for lg, lv in zip(quiet, levels):
            lg.setLevel(lv)
    off, on = statistics.median(times[False]), statistics.median(times[True])
    diag = statistics.median(spent)
    rows = {"step off (ms, median)": 1e3 * off, "step on (ms, median)": 1e3 * on, "ratio on / off": on / off,
            "diagnostics per on step (ms)": 1e3 * diag, "diagnostics / step off": diag / off}
    print(f"trl {trl.__version__}, torch {torch.__version__}, {torch.get_num_threads()} threads: "
          f"examples/trl_grpo.py configuration, {runs} runs x {steps} steps, on and off alternating "
          f"({len(times[True])} on / {len(times[False])} off steps timed)")
    for k, v in rows.items():
        print(f"{k:44s} {v:9.4f}")
    print(f"token diagnostics overhead: {100 * (on / off - 1):+.1f} % of a step (medians), "
          f"{100 * diag / off:.2f} % timed inside (target <= 5 %)")
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=int, default=512)
    ap.add_argument("--G", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--trl-step", action="store_true",
                    help="only the whole-step TRL timing of token_diagnostics on vs off")
    ap.add_argument("--steps", type=int, default=40, help="--trl-step: optimizer steps per run")
    ap.add_argument("--runs", type=int, default=3, help="--trl-step: runs (on and off alternate within each)")
    args = ap.parse_args()
    if args.trl_step:
        bench_trl_token_diagnostics(steps=args.steps, runs=args.runs)
        return 0
    given = {"groups": args.groups, "G": args.G, "repeat": args.repeat}
    for name in ("bench_trl", "bench_verl"):  # whichever parts this file holds
        fn = globals().get(name)
        if fn is not None:
            fn(**{k: v for k, v in given.items() if k in inspect.signature(fn).parameters})
    return 0


if __name__ == "__main__":
    sys.exit(main())
