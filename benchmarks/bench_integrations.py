"""Benchmark: the trainer adapters' time per step, beside the trainer's own advantage computation.

Target: the adapter's extra work for 512 groups x 16 rollouts is under 5 ms per step on the
2-core CPU machine.  Each part runs in the environment of its trainer (``make test-integrations``
builds them) and is skipped where the trainer is not installed:

    PYTHONPATH=. /tmp/envtest/trl/bin/python benchmarks/bench_integrations.py [--groups 512] [--G 16]
    PYTHONPATH=. /tmp/envtest/verl/bin/python benchmarks/bench_integrations.py [--groups 512] [--G 16]
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=int, default=512)
    ap.add_argument("--G", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    given = {"groups": args.groups, "G": args.G, "repeat": args.repeat}
    for name in ("bench_trl", "bench_verl"):  # whichever parts this file holds
        fn = globals().get(name)
        if fn is not None:
            fn(**{k: v for k, v in given.items() if k in inspect.signature(fn).parameters})
    return 0


if __name__ == "__main__":
    sys.exit(main())
