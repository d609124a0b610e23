"""Benchmark: checkpoint diff of a Qwen2.5-shaped random bf16 pair.

    python benchmarks/bench_diff.py [--shape 0.5b|7b|tiny] [--device auto|cpu|cuda] [--top-k 64]
        [--workdir DIR] [--no-baseline] [--record] [--lora RANK] [--layers all|head] [--geometry] [--profile]

Builds (once, cached in ``--workdir``) a base and an "RL" checkpoint with the tensor names
and shapes of Qwen2.5-0.5B (24 layers, d = 896, vocab 151,936, tied head), Qwen2.5-7B
(28 layers, d = 3,584, vocab 152,064, untied head) or a tiny shape, random bfloat16
weights written directly with ``safetensors.torch.save_file`` (sharded, with an index
and a ``config.json`` that transformers can load).  The RL checkpoint is the base plus a
rank-1 spike and noise in the head and small noise everywhere.

Then, each in its own subprocess (so that the peak resident set, ``ru_maxrss``, is per
variant; page cache warm in both, as the checkpoints were just written or read):

* ``read``  — read every tensor of both checkpoints with ``safe_open`` (the disk-read floor);
* ``ours``  — ``analysis.diff.diff(base, [rl])``: head (full spectrum) + every
  2-D weight (top-k) metrics, norms and densities;
* ``transformers`` — what existing scripts do: load both models whole with
  ``AutoModelForCausalLM.from_pretrained`` (bfloat16), difference the state dicts in
  float32, and per 2-D weight ``torch.linalg.svdvals`` (float32) for s1/s2 and r1, plus
  norms and densities (skip with ``--no-baseline``).

Prints time, peak RSS and peak-RSS growth over the imports of each, and the ratios
transformers / ours.

``--lora RANK`` times a LoRA adapter instead: only the base is built, and a synthetic
rank-``RANK`` adapter on every linear layer of the blocks (q, k, v, o, gate, up, down;
``lora_alpha = 2·RANK``, bf16 factors, random nonzero ``B``) is written directly as
``adapter_config.json`` + ``adapter_model.safetensors`` (no peft needed); the variants are
``read`` (every tensor of the base) and ``lora`` (``analysis.diff.diff(base, [adapter])``),
recorded (``--record``, default for ``7b``) in ``bench_diff_lora<RANK>_<shape>_<device>.json``.  ``--record`` (default for ``--shape 7b``) writes the numbers with
the device into ``benchmarks/results/bench_diff_<shape>_<device>.json`` (``--layers head``:
``bench_diff_<shape>_head_<device>.json``), with the load average at start and end.
``--layers head`` times the head-only diff (SVD metrics of the output head only);
``--geometry`` adds the geometry pass (``diff(..., geometry=True)``: where every matrix's update
lies relative to the base; recorded as ``bench_diff_<shape>[_head]_geometry_<device>.json``);
``--profile`` prints the diff's time per phase (its ``timings_s``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

SHAPES = {
    # name: (hidden, intermediate, layers, heads, kv_heads, vocab, tied)
    "tiny": (64, 128, 2, 4, 2, 1024, True),
    "0.5b": (896, 4864, 24, 14, 2, 151936, True),
    "7b": (3584, 18944, 28, 28, 4, 152064, False),
}
ROOT = Path(__file__).resolve().parents[1]


def _rss_mb() -> float:
    """Peak resident set of this process (``ru_maxrss``, KiB on Linux), in MiB.  Linux keeps
    the pre-``exec`` value of a forked child, so the parent spawning the variants stays small
    (it imports neither torch nor numpy and builds the checkpoints in a child too)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _hwm_mb() -> float | None:
    """``VmHWM`` of /proc/self/status (peak RSS of this address space), MiB; None elsewhere."""
    try:
        for ln in open("/proc/self/status"):
            if ln.startswith("VmHWM:"):
                return int(ln.split()[1]) / 1024.0
    except OSError:
        pass
    return None


def tensor_shapes(shape: str) -> dict[str, tuple[int, ...]]:
    """Qwen2 tensor names and shapes (q/k/v biases, RMSNorm weights, tied or untied head)."""
    d, f, L, h, kv, V, tied = SHAPES[shape]
    hd = d // h
    out: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (V, d)}
    for i in range(L):
        p = f"model.layers.{i}."
        out.update({p + "input_layernorm.weight": (d,), p + "post_attention_layernorm.weight": (d,),
                    p + "self_attn.q_proj.weight": (d, d), p + "self_attn.q_proj.bias": (d,),
                    p + "self_attn.k_proj.weight": (kv * hd, d), p + "self_attn.k_proj.bias": (kv * hd,),
                    p + "self_attn.v_proj.weight": (kv * hd, d), p + "self_attn.v_proj.bias": (kv * hd,),
                    p + "self_attn.o_proj.weight": (d, d),
                    p + "mlp.gate_proj.weight": (f, d), p + "mlp.up_proj.weight": (f, d),
                    p + "mlp.down_proj.weight": (d, f)})
    out["model.norm.weight"] = (d,)
    if not tied:
        out["lm_head.weight"] = (V, d)
    return out


def config(shape: str) -> dict:
    d, f, L, h, kv, V, tied = SHAPES[shape]
    return {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": d,
            "intermediate_size": f, "num_hidden_layers": L, "num_attention_heads": h, "num_key_value_heads": kv,
            "vocab_size": V, "tie_word_embeddings": tied, "max_position_embeddings": 32768,
            "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "hidden_act": "silu", "dtype": "bfloat16",
            "bos_token_id": 0, "eos_token_id": 1}


def build_pair(shape: str, workdir: Path, seed: int = 0, shard_bytes: int = 2 << 30,
               with_rl: bool = True) -> tuple[Path, Path]:
    """Write base and RL checkpoints (bf16, sharded, with index) unless already there
    (``with_rl=False``: the base only, as ``--lora`` needs)."""
    base, rl = workdir / f"{shape}_base", workdir / f"{shape}_rl"
    stamp = workdir / f"{shape}.done"
    if stamp.exists() and (base / "config.json").exists() and (rl / "config.json").exists():
        return base, rl
    base_stamp = workdir / f"{shape}_base.done"
    if not with_rl and base_stamp.exists() and (base / "config.json").exists():
        return base, rl
    import torch  # only when building: a reused pair costs no torch import
    from safetensors.torch import save_file

    gen = torch.Generator().manual_seed(seed)
    shapes = tensor_shapes(shape)
    head = "model.embed_tokens.weight" if SHAPES[shape][6] else "lm_head.weight"
    dirs = (base, rl) if with_rl else (base,)
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.json").write_text(json.dumps(config(shape), indent=1))
    size = 0
    n_shards_names: list[list[str]] = [[]]
    for name, shp in shapes.items():
        nbytes = 2 * int(torch.tensor(shp).prod()) if shp else 2
        if size + nbytes > shard_bytes and n_shards_names[-1]:
            n_shards_names.append([])
            size = 0
        n_shards_names[-1].append(name)
        size += nbytes
    total = len(n_shards_names)
    weight_map = {}
    for k, names in enumerate(n_shards_names, 1):
        fn = f"model-{k:05d}-of-{total:05d}.safetensors"
        tb, tr = {}, {}
        for name in names:
            shp = shapes[name]
            if len(shp) == 1:
                w = 1.0 + 0.02 * torch.randn(*shp, generator=gen)
            else:
                w = 0.02 * torch.randn(*shp, generator=gen)
            noise = 1e-3 * torch.randn(*shp, generator=gen)
            if name == head:  # rank-1 spike in the head update
                u = torch.randn(shp[0], 1, generator=gen)
                v = torch.randn(1, shp[1], generator=gen)
                noise += 0.05 * (u @ v) / (shp[1] ** 0.5)
            tb[name] = w.bfloat16()
            tr[name] = (w + noise).bfloat16()
            weight_map[name] = fn
        save_file(tb, str(base / fn), metadata={"format": "pt"})
        if with_rl:
            save_file(tr, str(rl / fn), metadata={"format": "pt"})
        del tb, tr
    for d in dirs:
        (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (stamp if with_rl else base_stamp).write_text("ok")
    return base, rl


LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def build_lora(shape: str, rank: int, workdir: Path, seed: int = 1) -> Path:
    """A PEFT-format LoRA adapter of rank ``rank`` on every linear layer of the blocks (bf16,
    ``lora_alpha = 2·rank``, ``A ~ N(0, 1/in)``, ``B ~ N(0, 1e-4)``), written with safetensors."""
    import torch
    from safetensors.torch import save_file

    out = workdir / f"{shape}_lora{rank}"
    if (out / "adapter_model.safetensors").exists() and (out / "adapter_config.json").exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator().manual_seed(seed)
    tensors = {}
    for name, shp in tensor_shapes(shape).items():
        if len(shp) == 2 and name.split(".")[-2] in LORA_TARGETS:
            mod = "base_model.model." + name[:-len(".weight")]
            fout, fin = shp
            tensors[mod + ".lora_A.weight"] = (torch.randn(rank, fin, generator=gen) / fin ** 0.5).bfloat16()
            tensors[mod + ".lora_B.weight"] = (1e-2 * torch.randn(fout, rank, generator=gen)).bfloat16()
    save_file(tensors, str(out / "adapter_model.safetensors"), metadata={"format": "pt"})
    (out / "adapter_config.json").write_text(json.dumps({
        "peft_type": "LORA", "r": rank, "lora_alpha": 2 * rank, "target_modules": list(LORA_TARGETS),
        "fan_in_fan_out": False, "use_rslora": False, "use_dora": False, "bias": "none", "rank_pattern": {},
        "alpha_pattern": {}, "modules_to_save": None, "base_model_name_or_path": str(workdir / f"{shape}_base"),
        "task_type": "CAUSAL_LM"}, indent=1))
    return out


# ------------------------------------------------------------------ variants
def run_read(base: str, rl: str) -> dict:
    from safetensors import safe_open

    t0 = time.perf_counter()
    nbytes = 0
    for d in (base, rl):
        for f in sorted(Path(d).glob("*.safetensors")):
            with safe_open(str(f), "pt") as h:
                for k in h.keys():
                    x = h.get_tensor(k).clone()  # get_tensor may map the file lazily: copy to read it
                    nbytes += x.numel() * x.element_size()
                    del x
    return {"time_s": time.perf_counter() - t0, "bytes": nbytes}


def run_ours(base: str, rl: str, device: str, top_k: int, layers: str = "all", geometry: bool = False) -> dict:
    from analysis import diff as checkpoint_diff

    t = time.perf_counter()
    doc = checkpoint_diff.diff(base, [rl], device=device, top_k=top_k, layers=layers, progress=False,
                               geometry=geometry)
    el = time.perf_counter() - t
    c = doc["checkpoints"][0]
    return {"time_s": el, "device": doc["device"], "threads": doc["run"]["threads"],
            "timings_s": doc.get("timings_s"), "global_l2": c["global_l2"],
            "head_s1_s2": c["output_head"]["s1_s2"], "head_rank1": c["output_head"]["rank1_fraction"],
            "inner_s1_s2_mean": c["inner_s1_s2_mean"]}


def run_lora(base: str, adapter: str, device: str, top_k: int) -> dict:
    from analysis import diff as checkpoint_diff

    t = time.perf_counter()
    doc = checkpoint_diff.diff(base, [adapter], device=device, top_k=top_k, progress=False)
    el = time.perf_counter() - t
    c = doc["checkpoints"][0]
    low = [r for r in c["layers"] if "low_rank" in r]
    return {"time_s": el, "device": doc["device"], "global_l2": c["global_l2"], "n_low_rank": len(low),
            "inner_s1_s2_mean": c["inner_s1_s2_mean"], "inner_rank1_fraction_mean": c["inner_rank1_fraction_mean"],
            "density_0": c["density"]["0"], "density_1e-05": c["density"]["1e-05"]}


def run_read_base(base: str) -> dict:
    """Read every tensor of the base alone (``--lora``: the adapter diff reads the base once)."""
    from safetensors import safe_open

    t0 = time.perf_counter()
    nbytes = 0
    for f in sorted(Path(base).glob("*.safetensors")):
        with safe_open(str(f), "pt") as h:
            for k in h.keys():
                x = h.get_tensor(k).clone()
                nbytes += x.numel() * x.element_size()
                del x
    return {"time_s": time.perf_counter() - t0, "bytes": nbytes}


def run_transformers(base: str, rl: str, device: str) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    dev = torch.device("cuda" if device in ("auto", "cuda") and torch.cuda.is_available() else "cpu")
    t = time.perf_counter()
    a = AutoModelForCausalLM.from_pretrained(base, dtype=torch.bfloat16).state_dict()
    b = AutoModelForCausalLM.from_pretrained(rl, dtype=torch.bfloat16).state_dict()
    tot = 0.0
    out = {}
    seen = set()
    for k in a:
        if a[k].data_ptr() in seen:  # tied head: the same tensor under two names
            continue
        seen.add(a[k].data_ptr())
        dW = b[k].to(dev).float() - a[k].to(dev).float()
        tot += float((dW.double() ** 2).sum())
        _ = [float((dW.abs() > tol).float().mean()) for tol in (0.0, 1e-5, 1e-4, 1e-3)]
        if dW.ndim == 2:
            s = torch.linalg.svdvals(dW)
            out[k] = (float(s[0] / s[1]), float(s[0] ** 2 / (s ** 2).sum()))
    el = time.perf_counter() - t
    head = "lm_head.weight" if "lm_head.weight" in out else "model.embed_tokens.weight"
    del a, b
    return {"time_s": el, "global_l2": tot ** 0.5, "head_s1_s2": out[head][0], "head_rank1": out[head][1]}


def _child(args: argparse.Namespace) -> None:
    if args.child == "build":
        b, r = build_pair(args.shape, Path(args.workdir), with_rl=not args.lora)
        if args.lora:
            r = build_lora(args.shape, args.lora, Path(args.workdir))
        print("RESULT " + json.dumps({"base": str(b), "rl": str(r)}))
        return
    rss0 = _rss_mb()
    import numpy  # noqa: F401  (imports counted in the baseline RSS)
    import torch  # noqa: F401

    if args.child in ("ours", "lora"):
        import analysis.diff  # noqa: F401
    if args.child == "transformers":
        import transformers  # noqa: F401
    rss_imports = _rss_mb()
    fn = {"read": lambda: run_read(args.base, args.rl),
          "ours": lambda: run_ours(args.base, args.rl, args.device, args.top_k, args.layers, args.geometry),
          "transformers": lambda: run_transformers(args.base, args.rl, args.device),
          "read_base": lambda: run_read_base(args.base),
          "lora": lambda: run_lora(args.base, args.rl, args.device, args.top_k)}[args.child]
    res = fn()
    res.update({"peak_rss_mb": _rss_mb(), "rss_after_imports_mb": rss_imports, "rss_start_mb": rss0,
                "vm_hwm_mb": _hwm_mb()})
    if args.device != "cpu":
        if torch.cuda.is_available():
            res["cuda_max_allocated_mb"] = torch.cuda.max_memory_allocated() / 2 ** 20
    print("RESULT " + json.dumps(res))


def _spawn(variant: str, base: Path | None, rl: Path | None, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, __file__, "--child", variant, "--base", str(base), "--rl", str(rl),
           "--device", args.device, "--top-k", str(args.top_k), "--shape", args.shape, "--workdir", args.workdir,
           "--layers", args.layers] + (["--geometry"] if args.geometry else [])
    if args.lora:
        cmd += ["--lora", str(args.lora)]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if p.returncode != 0 or line is None:
        raise SystemExit(f"{variant} failed (exit {p.returncode}):\n{p.stderr[-3000:]}")
    return json.loads(line[len("RESULT "):])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", choices=tuple(SHAPES), default="0.5b")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--top-k", type=int, default=64)
    ap.add_argument("--workdir", default=os.environ.get("TMPDIR", "/tmp") + "/rlvr_bench_diff")
    ap.add_argument("--no-baseline", action="store_true")
    ap.add_argument("--record", action="store_true")
    ap.add_argument("--lora", type=int, default=0, metavar="RANK",
                    help="time a synthetic rank-RANK LoRA adapter on all linear layers against the base")
    ap.add_argument("--layers", choices=("all", "head"), default="all",
                    help="SVD metrics of every 2-D weight (all, default) or of the output head only (head)")
    ap.add_argument("--geometry", action="store_true",
                    help="add the geometry pass (where every matrix's update lies relative to the base)")
    ap.add_argument("--profile", action="store_true",
                    help="print the diff's time per phase (timings_s: read, difference, norms and densities, "
                         "head spectrum, other spectra, ...)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--base", help=argparse.SUPPRESS)
    ap.add_argument("--rl", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        _child(args)
        return
    if args.lora:
        _main_lora(args)
        return
    t = time.perf_counter()
    built = _spawn("build", None, None, args)
    base, rl = Path(built["base"]), Path(built["rl"])
    print(f"checkpoints: {base} and {rl} (built or reused in {time.perf_counter() - t:.1f} s)")
    n_params = sum(int(__import__("math").prod(s)) for s in tensor_shapes(args.shape).values())
    largest = max(int(__import__("math").prod(s)) for s in tensor_shapes(args.shape).values())
    print(f"shape {args.shape}: {n_params / 1e6:.1f}M parameters per checkpoint; largest tensor "
          f"{largest / 1e6:.1f}M entries = {4 * largest / 2 ** 20:.0f} MiB in float32")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load average {load:.2f}")
    res = {"read": _spawn("read", base, rl, args)}
    res["ours"] = _spawn("ours", base, rl, args)
    if not args.no_baseline:
        res["transformers"] = _spawn("transformers", base, rl, args)
    print(f"{'variant':<14}{'time (s)':>10}{'peak RSS (MiB)':>16}{'VmHWM (MiB)':>13}{'growth (MiB)':>14}"
          f"{'growth / largest f32':>22}")
    for k, r in res.items():
        g = r["peak_rss_mb"] - r["rss_after_imports_mb"]
        print(f"{k:<14}{r['time_s']:>10.2f}{r['peak_rss_mb']:>16.0f}{r.get('vm_hwm_mb') or float('nan'):>13.0f}"
              f"{g:>14.0f}{g / (4 * largest / 2 ** 20):>22.2f}")
    o = res["ours"]
    load_after = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    if args.profile and o.get("timings_s"):
        print(f"{'phase':<18}{'time (s)':>10}{'share':>8}")
        for ph, v in o["timings_s"].items():
            print(f"{ph:<18}{v:>10.2f}{v / o['time_s']:>8.1%}")
        print(f"{'other':<18}{o['time_s'] - sum(o['timings_s'].values()):>10.2f}")
    print(f"ours: device {o['device']}; head s1/s2 = {o['head_s1_s2']:.4f}, r1 = {o['head_rank1']:.4f}, "
          f"‖ΔW‖ = {o['global_l2']:.6g}; time / read time = {o['time_s'] / res['read']['time_s']:.2f}; "
          f"load average {load:.2f} at start, {load_after:.2f} at end")
    if "transformers" in res:
        b = res["transformers"]
        gb = b["peak_rss_mb"] - b["rss_after_imports_mb"]
        go = o["peak_rss_mb"] - o["rss_after_imports_mb"]
        print(f"transformers: head s1/s2 = {b['head_s1_s2']:.4f}, r1 = {b['head_rank1']:.4f}, ‖ΔW‖ = "
              f"{b['global_l2']:.6g}")
        print(f"ratios transformers / ours: time {b['time_s'] / o['time_s']:.2f}x, peak RSS "
              f"{b['peak_rss_mb'] / o['peak_rss_mb']:.2f}x, RSS growth {gb / max(go, 1):.2f}x")
    if args.record or args.shape == "7b":
        out = ROOT / "benchmarks" / "results"
        out.mkdir(parents=True, exist_ok=True)
        dev = o["device"].split(" ")[0].replace(":", "")
        f = out / (f"bench_diff_{args.shape}{'_head' if args.layers == 'head' else ''}"
                   f"{'_geometry' if args.geometry else ''}_{dev}.json")
        rec = {"shape": args.shape, "device": o["device"], "cpus": os.cpu_count(), "load_average": load,
               "load_average_after": load_after, "layers": args.layers, "geometry": args.geometry,
               "top_k": args.top_k, "params_per_checkpoint": n_params, "results": res,
               "time_over_read": o["time_s"] / res["read"]["time_s"],
               "date": time.strftime("%Y-%m-%d %H:%M:%S")}
        sys.path.insert(0, str(ROOT))
        from rlvr_plumbing.io import atomic_write_text
        atomic_write_text(f, json.dumps(rec, indent=1))
        print(f"recorded: {f}")


def _main_lora(args: argparse.Namespace) -> None:
    """``--lora RANK``: base only, a synthetic adapter, the ``read_base`` and ``lora`` variants."""
    import math

    t = time.perf_counter()
    built = _spawn("build", None, None, args)
    base, ad = Path(built["base"]), Path(built["rl"])
    print(f"base {base} and adapter {ad} (built or reused in {time.perf_counter() - t:.1f} s)")
    shapes = tensor_shapes(args.shape)
    n_params = sum(int(math.prod(s)) for s in shapes.values())
    largest = max(int(math.prod(s)) for s in shapes.values())
    n_lora = sum(args.lora * sum(s) for n, s in shapes.items() if len(s) == 2 and n.split(".")[-2] in LORA_TARGETS)
    print(f"shape {args.shape}: {n_params / 1e6:.1f}M base parameters; rank-{args.lora} adapter on "
          f"{sum(1 for n, s in shapes.items() if len(s) == 2 and n.split('.')[-2] in LORA_TARGETS)} linear layers, "
          f"{n_lora / 1e6:.1f}M adapter parameters; largest tensor {4 * largest / 2 ** 20:.0f} MiB in float32")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load average {load:.2f}")
    res = {"read_base": _spawn("read_base", base, ad, args), "lora": _spawn("lora", base, ad, args)}
    load_after = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{'variant':<14}{'time (s)':>10}{'peak RSS (MiB)':>16}{'growth (MiB)':>14}")
    for k, r in res.items():
        print(f"{k:<14}{r['time_s']:>10.2f}{r['peak_rss_mb']:>16.0f}{r['peak_rss_mb'] - r['rss_after_imports_mb']:>14.0f}")
    o = res["lora"]
    print(f"lora: device {o['device']}; {o['n_low_rank']} low-rank updates, ‖ΔW‖ = {o['global_l2']:.6g}, Inner s1/s2 "
          f"= {o['inner_s1_s2_mean']:.4f}; time / base read time = {o['time_s'] / res['read_base']['time_s']:.2f}; "
          f"load average after {load_after:.2f}")
    if args.record or args.shape == "7b":
        out = ROOT / "benchmarks" / "results"
        out.mkdir(parents=True, exist_ok=True)
        dev = o["device"].split(" ")[0].replace(":", "")
        f = out / f"bench_diff_lora{args.lora}_{args.shape}_{dev}.json"
        rec = {"shape": args.shape, "lora_rank": args.lora, "device": o["device"], "cpus": os.cpu_count(),
               "load_average": load, "load_average_after": load_after, "top_k": args.top_k,
               "params_base": n_params, "params_adapter": n_lora, "results": res,
               "time_over_base_read": o["time_s"] / res["read_base"]["time_s"],
               "date": time.strftime("%Y-%m-%d %H:%M:%S")}
        sys.path.insert(0, str(ROOT))
        from rlvr_plumbing.io import atomic_write_text
        atomic_write_text(f, json.dumps(rec, indent=1))
        print(f"recorded: {f}")


if __name__ == "__main__":
    main()
