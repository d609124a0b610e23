"""analysis.hidden_states: perpendicular correlation and group residual norms (FADE App. 15.2).

References: brute-force numpy (pairwise loops, explicit outer products), an unpadded
one-sequence-at-a-time forward pass through transformers' own ``hidden_states`` output,
and a Monte Carlo check of the CLT baseline.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from analysis import hidden_states as hs
from rlvr_theory.rank1 import clt_residual_ratio
from tests.analysis import tiny_checkpoints as tc


def brute_rho(X: np.ndarray) -> float:
    X = X[np.linalg.norm(X, axis=1) > 0]
    n = len(X)
    tot = 0.0
    for i in range(n):
        for j in range(n):
            if i != j:
                tot += X[i] @ X[j] / (np.linalg.norm(X[i]) * np.linalg.norm(X[j]))
    return tot / (n * (n - 1))


def test_mean_pairwise_cosine_matches_brute_force():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((23, 7)) + 0.8       # correlated rows
    X[[4, 9]] = 0.0                              # zero rows are left out
    assert hs.mean_pairwise_cosine(X) == pytest.approx(brute_rho(X), rel=1e-12)
    same = np.tile(rng.standard_normal(5), (6, 1)) * rng.uniform(1, 3, (6, 1))
    assert hs.mean_pairwise_cosine(same) == pytest.approx(1.0, rel=1e-12)
    assert hs.mean_pairwise_cosine(np.eye(4)) == pytest.approx(0.0, abs=1e-15)
    with pytest.raises(ValueError, match=r"^X must have at least 2 non-zero rows"):
        hs.mean_pairwise_cosine(np.zeros((3, 2)))


def test_project_out_and_residual_norm_against_numpy():
    rng = np.random.default_rng(1)
    H = rng.standard_normal((30, 6))
    u = rng.standard_normal(6)
    P = hs.project_out(H, u)
    uh = u / np.linalg.norm(u)
    np.testing.assert_allclose(P @ uh, 0, atol=1e-14)
    np.testing.assert_allclose(P, H - np.outer(H @ uh, uh), atol=1e-14)
    V = rng.standard_normal((30, 9))             # the v_i
    S = V.T @ H                                  # Σ v_i h_iᵀ
    want = np.linalg.norm(sum(np.outer(V[i], P[i]) for i in range(30)) / 30)
    assert hs.residual_norm(S, 30, u) == pytest.approx(want, rel=1e-12)
    assert hs.residual_norm(torch.from_numpy(S), 30, u) == pytest.approx(want, rel=1e-12)


def test_clt_baseline_paper_number_and_monte_carlo():
    # FADE App. 15.2: N_S = 8,968, N_F = 54,700 -> sqrt(N_S/N_F) ≈ 0.40
    assert float(clt_residual_ratio(8968, 54700)) == pytest.approx(0.40, abs=0.005)
    # Monte Carlo under the null: v_i = e_y − π (y ~ π, so E[v] = 0), h ⊥ v, same law in both
    # groups; the ratio of residual norms is sqrt(N_S/N_F) up to sampling error.  ‖R‖² sums
    # V·d = 1500 entries: relative sd of one ratio ≈ sqrt(4/1500) ≈ 0.05; mean of 8 reps ±0.02.
    rng = np.random.default_rng(2)
    Vn, d, ns, nf = 50, 30, 600, 3658            # N_S/N_F as in the paper (0.164)
    u = rng.standard_normal(d)
    ratios = []
    for _ in range(8):
        norms = []
        for n in (ns, nf):
            pi = rng.dirichlet(np.ones(Vn), size=n)
            y = (pi.cumsum(1) > rng.uniform(size=(n, 1))).argmax(1)
            v = -pi
            v[np.arange(n), y] += 1.0
            h = rng.standard_normal((n, d))
            norms.append(hs.residual_norm(v.T @ h, n, u))
        ratios.append(norms[1] / norms[0])
    assert np.mean(ratios) == pytest.approx(float(clt_residual_ratio(ns, nf)), rel=0.06)


# ------------------------------------------------------------- on a real model
def _rollouts(seed: int = 3, n: int = 7) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        p = rng.integers(4, tc.VOCAB, size=int(rng.integers(2, 6))).tolist()
        c = rng.integers(4, tc.VOCAB, size=int(rng.integers(3, 9))).tolist()
        out.append({"prompt_ids": p, "completion_ids": c, "correct": bool(i % 3 == 0)})
    return out


def _reference(ckpt, rollouts, temperature=1.0):
    """Unpadded forward of one sequence at a time, transformers' hidden_states[-1], explicit loops."""
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32).eval()
    H, Y, P, G = [], [], [], []
    with torch.no_grad():
        for r in rollouts:
            ids = r["prompt_ids"] + r["completion_ids"]
            out = m(torch.tensor([ids]), output_hidden_states=True)
            h = out.hidden_states[-1][0].double().numpy()
            lg = out.logits[0].double().numpy() / temperature
            for t in range(len(r["prompt_ids"]) - 1, len(ids) - 1):
                H.append(h[t])
                Y.append(ids[t + 1])
                e = np.exp(lg[t] - lg[t].max())
                P.append(e / e.sum())
                G.append(r["correct"])
    H, Y, P, G = np.array(H), np.array(Y), np.array(P), np.array(G)
    u1 = np.linalg.svd(H, full_matrices=False)[2][0]
    Hp = H - np.outer(H @ u1, u1)
    res = {}
    for g in (True, False):
        idx = np.where(G == g)[0]
        R = np.zeros((P.shape[1], H.shape[1]))
        for i in idx:
            v = -P[i].copy()
            v[Y[i]] += 1
            R += np.outer(v, Hp[i])
        res[g] = (brute_rho(Hp[idx]), np.linalg.norm(R / len(idx)), len(idx))
    return res


def test_geometry_matches_an_unbatched_reference():
    ck = tc.qwen2_base()
    ro = _rollouts()
    doc = hs.geometry(str(ck), ro, batch_size=3, device="cpu", temperature=0.7, progress=False)
    ref = _reference(ck, ro, temperature=0.7)
    assert doc["n_tokens"] == {"success": ref[True][2], "failure": ref[False][2]}
    assert doc["n_trajectories"] == {"success": 3, "failure": 4}
    assert doc["rho_perp"]["success"] == pytest.approx(ref[True][0], rel=1e-5, abs=1e-7)
    assert doc["rho_perp"]["failure"] == pytest.approx(ref[False][0], rel=1e-5, abs=1e-7)
    assert doc["residual_norm"]["success"] == pytest.approx(ref[True][1], rel=1e-5)
    assert doc["residual_norm"]["failure"] == pytest.approx(ref[False][1], rel=1e-5)
    assert doc["residual_ratio"] == pytest.approx(ref[False][1] / ref[True][1], rel=1e-5)
    assert doc["clt_baseline"] == pytest.approx(math.sqrt(ref[True][2] / ref[False][2]), rel=1e-12)
    assert doc["ratio_over_baseline"] == pytest.approx(doc["residual_ratio"] / doc["clt_baseline"], rel=1e-12)
    assert doc["paper"]["clt_baseline"] == 0.40


def test_cuda_dtype_choice_runs_on_the_cpu():
    """On CUDA ``dtype="auto"`` loads the checkpoint in its stored dtype (usually bfloat16) instead
    of float32 (the CPU's choice): bfloat16 forced on the CPU gives the float32 numbers to
    bfloat16 precision (and differs from them: the choice is really exercised)."""
    ck = str(tc.qwen2_base())
    ro = _rollouts()
    f32 = hs.geometry(ck, ro, batch_size=3, device="cpu", progress=False)
    b16 = hs.geometry(ck, ro, batch_size=3, device="cpu", dtype="bfloat16", progress=False)
    assert b16["n_tokens"] == f32["n_tokens"]
    for key in ("rho_perp", "residual_norm"):
        for side in ("success", "failure"):
            assert b16[key][side] == pytest.approx(f32[key][side], rel=0.05, abs=5e-3)
    assert b16["residual_ratio"] == pytest.approx(f32["residual_ratio"], rel=0.05)
    assert b16["rho_perp"]["success"] != f32["rho_perp"]["success"]


def test_text_rollouts_jsonl_and_reward_field(tmp_path):
    ck = tc.qwen2_base()
    ro = _rollouts(seed=4, n=5)
    text = [{"prompt": " ".join(f"w{i - 4}" for i in r["prompt_ids"]),
             "completion": " ".join(f"w{i - 4}" for i in r["completion_ids"]),
             "reward": 1.0 if r["correct"] else 0.0} for r in ro]
    f = tmp_path / "rollouts.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in text) + "\n\n")
    a = hs.geometry(str(ck), str(f), progress=False)
    b = hs.geometry(str(ck), ro, progress=False)
    assert a["n_tokens"] == b["n_tokens"]
    assert a["residual_norm"]["failure"] == pytest.approx(b["residual_norm"]["failure"], rel=1e-12)
    assert a["rho_perp"]["success"] == pytest.approx(b["rho_perp"]["success"], rel=1e-12)


def test_single_outcome_gives_none_not_nan():
    ck = tc.qwen2_base()
    ro = [dict(r, correct=True) for r in _rollouts(seed=5, n=3)]
    doc = hs.geometry(str(ck), ro, progress=False)
    assert doc["n_tokens"]["failure"] == 0
    assert doc["rho_perp"]["failure"] is None and doc["rho_perp"]["ratio"] is None
    assert doc["residual_norm"]["failure"] is None
    assert doc["residual_ratio"] is None and doc["clt_baseline"] is None
    assert doc["rho_perp"]["success"] is not None and math.isfinite(doc["rho_perp"]["success"])


def test_refusals(tmp_path):
    ck = str(tc.qwen2_base())
    f = tmp_path / "bad.jsonl"
    f.write_text('{"prompt_ids": [5], "completion_ids": [6], "correct": true}\n{oops\n')
    with pytest.raises(ValueError, match=r"^rollouts line 2 of .* is not valid JSON"):
        hs.load_rollouts(f)
    f.write_text('{"prompt_ids": [5], "completion_ids": [6]}\n')
    with pytest.raises(ValueError, match=r"^rollouts line 1 of .* needs 'correct' \(true/false\) or 'reward'"):
        hs.load_rollouts(f)
    f.write_text('{"prompt": 5, "completion_ids": [6], "correct": true}\n')
    with pytest.raises(ValueError, match=r"completion_ids|prompt_ids"):
        hs.load_rollouts(f)
    with pytest.raises(ValueError, match=r"^rollouts must be a JSONL file"):
        hs.load_rollouts(tmp_path / "missing.jsonl")
    good = {"prompt_ids": [5, 6], "completion_ids": [7], "correct": False}
    with pytest.raises(ValueError, match=r"token id 9999 is outside the vocabulary \(size 384\)"):
        hs.geometry(ck, [dict(good, completion_ids=[9999])], progress=False)
    with pytest.raises(ValueError, match=r"exceeds the model's max_position_embeddings = 256"):
        hs.geometry(ck, [dict(good, completion_ids=[7] * 300)], progress=False)
    with pytest.raises(ValueError, match=r"^batch_size must be an integer >= 1"):
        hs.geometry(ck, [good], batch_size=0)
    with pytest.raises(ValueError, match=r"^temperature must be a finite number > 0"):
        hs.geometry(ck, [good], temperature=0.0)
    no_tok = tc.cached("llama_fp32", lambda p: tc.build(p, "llama", dtype="float32"))
    with pytest.raises(ValueError, match=r"^tokenizer: .* has text, not token ids"):
        hs.geometry(str(no_tok), [{"prompt": "w1", "completion": "w2", "correct": True}], progress=False)
    with pytest.raises(ValueError, match=r"^checkpoint: .* does not exist"):
        hs.geometry(str(tmp_path / "none"), [good])


def test_settings_follow_the_shared_checks_and_the_run_block_records_them():
    """batch_size: integral floats and numpy integers are integers, bool is not
    (rlvr_plumbing.checks); the document carries the run block of the arguments."""
    ck = str(tc.qwen2_base())
    ro = _rollouts(seed=5, n=4)
    docs = [hs.geometry(ck, ro, batch_size=b, progress=False) for b in (2, 2.0, np.int64(2))]
    for d in docs:
        assert d["settings"]["batch_size"] == 2 and type(d["settings"]["batch_size"]) is int
        assert d["rho_perp"] == docs[0]["rho_perp"]
    run = docs[1]["run"]
    assert sorted(run) == ["device", "package_version", "seed", "settings", "threads"]
    assert run["settings"]["rollouts"] == "4 records" and run["settings"]["batch_size"] == 2
    assert run["device"] == docs[1]["device"]
    with pytest.raises(ValueError, match=r"^batch_size must be an integer >= 1, got True"):
        hs.geometry(ck, ro, batch_size=True)
    with pytest.raises(ValueError, match=r"^temperature must be a finite number > 0, got nan"):
        hs.geometry(ck, ro, temperature=float("nan"))
    with pytest.raises(ValueError, match=r"^dtype must be one of 'auto', 'float32', 'bfloat16', 'float16'"):
        hs.geometry(ck, ro, dtype="int8")
    with pytest.raises(ValueError, match=r"^rollouts\[0\]: reward must be a finite number, got 'high'"):
        hs.geometry(ck, [{"prompt_ids": [5], "completion_ids": [6], "reward": "high"}])
    with pytest.raises(ValueError, match=r"^rollouts\[0\]: completion_ids must contain only integers >= 0"):
        hs.geometry(ck, [{"prompt_ids": [5], "completion_ids": [6.5], "correct": True}])
