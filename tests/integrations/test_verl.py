"""The verl plugin: registry families and schedules as verl advantage estimators.

Every test goes through verl's own ``ray_trainer.compute_advantage`` on CPU (no ``ray.init``),
the path verl's trainers take for an estimator that is not ``gae`` or ``grpo``.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import uuid
import zlib
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("verl")
torch = pytest.importorskip("torch")
ray_trainer = pytest.importorskip("verl.trainer.ppo.ray_trainer")

from omegaconf import DictConfig, OmegaConf  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402

from integrations import verl as rv  # noqa: E402
from rlvr_theory import advantages, masses, schedules  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FAMILIES = advantages.names()
L = 6  # tokens per response


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    monkeypatch.delenv(rv.ENV_PARAMS, raising=False)
    monkeypatch.delenv(rv.ENV_LOG_DIR, raising=False)
    rv.reset()
    yield
    rv.reset()


# ------------------------------------------------------------------ helpers
def make_batch(scores, uid, *, seed=0, dtype=torch.float32, lengths=None):
    """A DataProto as verl's trainer holds it: the score on the last valid token of each response."""
    scores = np.asarray(scores, dtype=float)
    n = scores.size
    rng = np.random.default_rng(seed)
    lens = rng.integers(1, L + 1, size=n) if lengths is None else np.asarray(lengths)
    mask = (np.arange(L)[None, :] < lens[:, None]).astype(np.float32)
    tlr = np.zeros((n, L))
    tlr[np.arange(n), lens - 1] = scores
    return DataProto.from_dict(
        tensors={"token_level_rewards": torch.tensor(tlr, dtype=dtype),
                 "response_mask": torch.tensor(mask, dtype=torch.int64)},
        non_tensors={"uid": np.array(list(uid), dtype=object)},
    )


def run(data, est, **config):
    """verl's compute_advantage; returns (advantages (bs, L), per-sequence advantage (bs,) float64)."""
    out = ray_trainer.compute_advantage(data, est, config=DictConfig({"gamma": 1.0, "lam": 1.0, **config}))
    adv = out.batch["advantages"]
    return adv, adv[:, 0].double().numpy()


def assert_masked(data, adv):
    """Zero outside the response mask, one value on every valid token of a row."""
    mask = data.batch["response_mask"].bool()
    assert torch.all(adv[~mask] == 0)
    first = adv[:, :1].expand_as(adv)
    assert torch.equal(adv[mask], first[mask])


def grouped(n_groups, G, *, seed=0, p=None):
    """Binary rewards (n_groups, G) with an all-wrong and an all-correct group, and uid strings."""
    rng = np.random.default_rng(seed)
    p = rng.uniform(0.1, 0.9, size=(n_groups, 1)) if p is None else p
    R = (rng.random((n_groups, G)) < p).astype(float)
    R[0] = 0.0
    R[1] = 1.0
    R[2, :2] = (1.0, 0.0)
    ids = np.array([str(uuid.UUID(int=int(rng.integers(2**62)))) for _ in range(n_groups)], dtype=object)
    return R, ids


def interleave(R, ids, *, seed=1, pad=0, pad_score=1.0):
    """Flat rows of the groups in a random order, then ``pad`` verl padding rows (uid ``pad<hex>``)."""
    n_groups, G = R.shape
    rng = np.random.default_rng(seed)
    order = rng.permutation(n_groups * G)
    scores = R.ravel()[order]
    uid = np.repeat(ids, G)[order]
    pad_uid = f"pad{uuid.uuid4().hex}"
    scores = np.concatenate([scores, np.full(pad, pad_score)])
    uid = np.concatenate([uid, np.array([pad_uid] * pad, dtype=object)])
    return scores, uid, order


def expected(adv, R, order, lengths=None):
    """The registry on (groups, G), laid out in the flat order of ``interleave``."""
    kw = {}
    if adv.uses_lengths:
        flat = np.empty(R.size)
        flat[order] = lengths[: R.size]
        kw["lengths"] = flat.reshape(R.shape)
    return adv(R, **kw).ravel()[order]


def close(a, b):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------ registration
def test_every_family_and_schedule_is_registered():
    names = set(rv.estimator_names())
    assert names == {f"rlvr_{n}" for n in FAMILIES} | {f"rlvr_schedule_{n.replace('-', '_')}" for n in schedules.names()}
    for est in names:
        assert core_algos.get_adv_estimator_fn(est).rlvr_estimator == est
    # verl's special cases stay verl's own
    assert core_algos.get_adv_estimator_fn("grpo") is core_algos.compute_grpo_outcome_advantage
    assert core_algos.get_adv_estimator_fn("gae") is core_algos.compute_gae_advantage_return
    assert rv.register_estimators() == []  # idempotent


def test_verl_use_external_modules_registers_the_estimators():
    env = {**os.environ, "VERL_USE_EXTERNAL_MODULES": "integrations.verl", "VERL_USE_EXTERNAL_PLUGINS": "none",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    code = ("import verl\nfrom verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY as R\n"
            "print(sorted(k for k in R if k.startswith('rlvr_')))")
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    found = eval(out.stdout.strip().splitlines()[-1])  # noqa: S307 - a list of names we printed
    assert "rlvr_asym_grpo" in found and "rlvr_schedule_fade" in found
    assert len(found) == len(FAMILIES) + len(schedules.names())


def _installed_distribution():
    """The installed rlvr-diagnostics, not metadata lying in the source tree (a stale egg-info)."""
    for dist in importlib.metadata.distributions(name="rlvr-diagnostics"):
        if Path(dist.locate_file("")).resolve() != ROOT:
            return dist
    return None


def test_entry_point_when_installed():
    dist = _installed_distribution()
    if dist is None:
        pytest.skip("rlvr-diagnostics is not installed here (run from the source tree)")
    eps = [ep for ep in dist.entry_points if ep.group == "verl.plugins"]
    assert [(ep.name, ep.value) for ep in eps] == [("rlvr_diagnostics", "integrations.verl")]
    assert any(ep.value == "integrations.verl" for ep in importlib.metadata.entry_points(group="verl.plugins"))
    env = {k: v for k, v in os.environ.items() if k not in ("VERL_USE_EXTERNAL_MODULES", "VERL_USE_EXTERNAL_PLUGINS")}
    code = "import verl\nfrom verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY as R\nprint('rlvr_asym_grpo' in R)"
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd="/", capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "True"


def test_pyproject_entry_point_loads_the_plugin(tmp_path):
    """The entry point declared in pyproject.toml, as an installed distribution would expose it
    (a dist-info on the path), is loaded by a plain ``import verl``."""
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    plugins = project.get("entry-points", {}).get("verl.plugins", {})
    assert plugins == {"rlvr_diagnostics": "integrations.verl"}
    info = tmp_path / "rlvr_diagnostics_probe-0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: rlvr-diagnostics-probe\nVersion: 0.0\n")
    (info / "entry_points.txt").write_text(
        "[verl.plugins]\n" + "".join(f"{k} = {v}\n" for k, v in plugins.items()))
    env = {k: v for k, v in os.environ.items() if k not in ("VERL_USE_EXTERNAL_MODULES", "VERL_USE_EXTERNAL_PLUGINS")}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT)])
    code = ("import verl\nfrom verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY as R\n"
            "print('rlvr_asym_grpo' in R, 'rlvr_schedule_fade_log' in R)")
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "True True"


_RAY_SCRIPT = """
import json, os, sys, numpy as np, ray
env_vars = json.loads(sys.argv[1])
ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": env_vars})

@ray.remote
class TaskRunner:  # where verl's trainer computes the advantages
    def run(self):
        import torch
        from omegaconf import DictConfig
        from verl import DataProto
        from verl.trainer.ppo.ray_trainer import compute_advantage
        data = DataProto.from_dict(
            tensors={"token_level_rewards": torch.tensor([[1.0], [0.0], [0.0], [0.0]]),
                     "response_mask": torch.ones(4, 1)},
            non_tensors={"uid": np.array(["a"] * 4, dtype=object)})
        out = compute_advantage(data, "rlvr_asym_grpo", config=DictConfig({}))
        return out.batch["advantages"][:, 0].tolist(), os.getpid()

print(json.dumps(ray.get(TaskRunner.remote().run.remote())))
ray.shutdown()
"""


@pytest.mark.slow
def test_ray_worker_reads_the_env_vars_of_runtime_env(tmp_path):
    """What ``+ray_kwargs.ray_init.runtime_env.env_vars.X=...`` gives verl's TaskRunner: the plugin
    (VERL_USE_EXTERNAL_MODULES), RLVR_PARAMS and RLVR_LOG_DIR, in a Ray actor of a local cluster."""
    pytest.importorskip("ray")
    env_vars = {"RLVR_PARAMS": "delta=0.5", "RLVR_LOG_DIR": str(tmp_path / "logs"),
                "VERL_USE_EXTERNAL_MODULES": "integrations.verl", "PYTHONPATH": str(ROOT)}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RLVR_", "VERL_USE_EXTERNAL"))}
    out = subprocess.run([sys.executable, "-c", _RAY_SCRIPT, json.dumps(env_vars)], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    adv, pid = json.loads(out.stdout.strip().splitlines()[-1])
    assert adv == [0.75, -0.5, -0.5, -0.5]  # asym_grpo with delta = 0.5
    (path,) = (tmp_path / "logs").iterdir()
    assert path.name.endswith(f"_{pid}.jsonl")
    rec = json.loads(path.read_text())
    assert rec["estimator"] == "rlvr_asym_grpo" and rec["params"]["delta"] == 0.5


# ------------------------------------------------------------------ every family
@pytest.mark.parametrize("name", FAMILIES)
def test_family_equals_registry_with_padding_and_mask(name):
    adv = advantages.get(name)
    G = max(8, adv.min_group_size())
    R, ids = grouped(6, G, seed=zlib.crc32(name.encode()))
    scores, uid, order = interleave(R, ids, pad=5)
    n = R.size
    lens = np.random.default_rng(3).integers(1, L + 1, size=n + 5)
    data = make_batch(scores, uid, lengths=lens)
    est = f"rlvr_{name}"
    tok, A = run(data, est)
    assert tok.dtype == torch.float32 and tok.shape == (n + 5, L)
    assert_masked(data, tok)
    close(A[:n], expected(adv, R, order, lens))
    assert np.all(A[n:] == 0)  # padding rows
    # the padding rows take no part in any statistic: the same batch without them gives the same
    rv.reset()
    _, A_nopad = run(make_batch(scores[:n], uid[:n], lengths=lens[:n]), est)
    np.testing.assert_array_equal(A[:n], A_nopad)


@pytest.mark.parametrize(("name", "params", "kw"), [
    ("asym_grpo", "delta=0.5", {"delta": 0.5}),
    ("grpo", "ddof=1, eps=1e-6", {"ddof": 1, "eps": 1e-6}),
    ("power_alpha", "alpha=3,normalize=true", {"alpha": 3, "normalize": True}),
    ("passk_chen", "k=2", {"k": 2}),
    ("agrae", "omega=None,alpha=2", {"alpha": 2.0}),
])
def test_params_from_the_environment(monkeypatch, name, params, kw):
    monkeypatch.setenv(rv.ENV_PARAMS, params)
    R, ids = grouped(5, 8, seed=7)
    scores, uid, order = interleave(R, ids, pad=3)
    _, A = run(make_batch(scores, uid), f"rlvr_{name}")
    close(A[: R.size], expected(advantages.get(name, **kw), R, order))
    assert np.all(A[R.size:] == 0)


def test_reward_values_param(monkeypatch):
    monkeypatch.setenv(rv.ENV_PARAMS, "reward_values=(-1, 1),delta=0.5")
    R, ids = grouped(4, 8)
    scores, uid, order = interleave(2 * R - 1, ids)
    _, A = run(make_batch(scores, uid), "rlvr_asym_grpo")
    close(A, expected(advantages.get("asym_grpo", delta=0.5, reward_values=(-1, 1)), 2 * R - 1, order))


def test_batch_level_statistics_exclude_padding():
    """reinforce_pp whitens over the batch, agrae reads the batch solve rate: padding rows with
    reward 1 would change both if they took part."""
    R, ids = grouped(6, 4, seed=11)
    scores, uid, order = interleave(R, ids, pad=6, pad_score=1.0)
    for name in ("reinforce_pp", "agrae"):
        rv.reset()
        _, A = run(make_batch(scores, uid), f"rlvr_{name}")
        close(A[: R.size], expected(advantages.get(name), R, order))


# ------------------------------------------------------------------ verl's own estimators
def _ragged():
    """Groups of sizes 5, 5, 1 (a singleton: verl gives it its raw reward) and 5, rows interleaved."""
    rng = np.random.default_rng(5)
    uid = np.array(list("aaaaabbbbbcddddd"), dtype=object)[rng.permutation(16)]
    scores = rng.integers(0, 2, size=16).astype(float)
    return scores, uid


@pytest.mark.parametrize(("est", "params", "verl_est", "norm"), [
    ("rlvr_grpo", "ddof=1,eps=1e-6,singleton=raw", "grpo", True),
    ("rlvr_grpo", "ddof=1,eps=1e-6,singleton=raw", "grpo_vectorized", True),
    ("rlvr_dr_grpo", "singleton=raw", "grpo", False),
    ("rlvr_rloo", "singleton=raw", "rloo", True),
])
def test_equals_verl_builtin(monkeypatch, est, params, verl_est, norm):
    monkeypatch.setenv(rv.ENV_PARAMS, params)
    scores, uid = _ragged()
    ours, _ = run(make_batch(scores, uid), est)
    theirs = ray_trainer.compute_advantage(make_batch(scores, uid), verl_est, norm_adv_by_std_in_grpo=norm,
                                           config=DictConfig({"norm_adv_by_std_in_grpo": norm}))
    torch.testing.assert_close(ours, theirs.batch["advantages"], rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------ dtype, device, contract
@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16, torch.float16])
def test_dtype_follows_the_rewards(dtype):
    R, ids = grouped(3, 4)
    scores, uid, order = interleave(R, ids)
    data = make_batch(scores, uid, dtype=dtype)
    tok, A = run(data, "rlvr_dr_grpo")
    assert tok.dtype == dtype and tok.device == data.batch["token_level_rewards"].device
    assert_masked(data, tok)
    np.testing.assert_allclose(A, expected(advantages.get("dr_grpo"), R, order), atol=1e-2 if dtype != torch.float64 else 1e-12)


def test_direct_call_contract():
    """verl's keyword contract: extra keyword arguments are accepted, (advantages, returns) come back."""
    fn = core_algos.get_adv_estimator_fn("rlvr_rloo")
    r = torch.tensor([[0.0, 1.0], [0.0, 0.0], [1.0, 0.0], [0.0, 0.0]])
    mask = torch.tensor([[1, 1], [1, 0], [1, 0], [1, 1]])
    adv, ret = fn(token_level_rewards=r, response_mask=mask, index=np.array(["x", "x", "y", "y"], dtype=object),
                  config=None, reward_baselines=torch.zeros(4))
    assert torch.equal(adv, ret)
    torch.testing.assert_close(adv, torch.tensor([[1.0, 1.0], [-1.0, 0.0], [1.0, 0.0], [-1.0, -1.0]]))


def test_uid_types():
    """Object arrays of str (verl), fixed-width strings and integers group alike; padding is a
    string uid beginning with "pad"."""
    R, ids = grouped(4, 4, seed=2)
    scores, uid, order = interleave(R, ids, pad=2)
    fn = core_algos.get_adv_estimator_fn("rlvr_rloo")
    data = make_batch(scores, uid)
    tl, m = data.batch["token_level_rewards"], data.batch["response_mask"]
    ref, _ = fn(token_level_rewards=tl, response_mask=m, index=uid)
    _, codes = np.unique(uid, return_inverse=True)
    for index in (uid.astype(str), list(uid), np.where(np.char.startswith(uid.astype(str), "pad"), "pad", uid)):
        torch.testing.assert_close(fn(token_level_rewards=tl, response_mask=m, index=index)[0], ref, rtol=0, atol=0)
    # integer uids: no padding, the last two rows are one more group
    scores[-1] = 0.0
    data = make_batch(scores, uid)
    tl, m = data.batch["token_level_rewards"], data.batch["response_mask"]
    as_ints, _ = fn(token_level_rewards=tl, response_mask=m, index=codes)
    close(as_ints[: R.size, 0].double().numpy(), ref[: R.size, 0].double().numpy())
    close(as_ints[R.size:, 0].double().numpy(), [1.0, -1.0])
    as_str, _ = fn(token_level_rewards=tl, response_mask=m, index=uid)
    assert torch.all(as_str[R.size:] == 0)
    with pytest.raises(ValueError, match=r"rlvr_rloo: index must hold one uid per row \(18\), got shape \(17,\)"):
        fn(token_level_rewards=tl, response_mask=m, index=uid[:-1])
    with pytest.raises(ValueError, match=r"rlvr_rloo: the uids must be hashable"):
        fn(token_level_rewards=tl, response_mask=m, index=np.array([[1]] * 18 + [[1, 2]], dtype=object)[:18])


def test_missing_uid_is_refused():
    data = make_batch([1.0, 0.0], ["a", "a"])
    data.non_tensor_batch.pop("uid")
    with pytest.raises(ValueError, match=r"rlvr_grpo: .*group uids .*non_tensor_batch\['uid'\]"):
        run(data, "rlvr_grpo")


# ------------------------------------------------------------------ schedules
def _log_lines(folder):
    path = Path(folder) / f"rlvr_{socket.gethostname()}_{os.getpid()}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_fade_log_schedule_advances_per_call(monkeypatch, tmp_path):
    monkeypatch.setenv(rv.ENV_PARAMS, "steps=50, alpha0=2.5")
    monkeypatch.setenv(rv.ENV_LOG_DIR, str(tmp_path))
    ref = schedules.get("fade-log", steps=50, alpha0=2.5)
    for k in range(1, 4):
        R, ids = grouped(4, 8, seed=k)
        scores, uid, order = interleave(R, ids, pad=2)
        _, A = run(make_batch(scores, uid), "rlvr_schedule_fade_log")
        adv = ref.update()
        close(A[: R.size], expected(adv, R, order))
        rec = _log_lines(tmp_path)[-1]
        assert rec["estimator"] == "rlvr_schedule_fade_log" and rec["step"] == k
        assert rec["metrics"]["alpha"] == pytest.approx(adv.params["alpha"], abs=1e-12)
        assert rec["metrics"]["delta"] == pytest.approx(adv.params["delta"], abs=1e-12)
    assert rv.policy("rlvr_schedule_fade_log").state_dict()["state"]["step"] == 3


def test_fade_and_agrae_schedules_read_the_batch_solve_rate(monkeypatch):
    monkeypatch.setenv(rv.ENV_PARAMS, "H0=2.0")
    fade = schedules.get("fade", H0=2.0)
    for k in range(3):
        R, ids = grouped(4, 8, seed=20 + k)
        scores, uid, order = interleave(R, ids, pad=3, pad_score=1.0)
        _, A = run(make_batch(scores, uid), "rlvr_schedule_fade")
        adv = fade.update(reward_mean=R.mean(), entropy=2.0)  # padding rows are not in the solve rate
        close(A[: R.size], expected(adv, R, order))
    rv.reset()
    monkeypatch.setenv(rv.ENV_PARAMS, "alpha=2")
    R, ids = grouped(4, 8, seed=30)
    scores, uid, order = interleave(R, ids, pad=3, pad_score=1.0)
    _, A = run(make_batch(scores, uid), "rlvr_schedule_agrae")
    close(A[: R.size], expected(advantages.get("agrae", omega=R.mean(), alpha=2.0), R, order))


def test_fade_log_needs_steps():
    with pytest.raises(ValueError, match=r"RLVR_PARAMS='' is not valid for the verl estimator "
                                         r"'rlvr_schedule_fade_log': steps is required.*allowed keys: .*steps"):
        run(make_batch([1.0, 0.0], ["a", "a"]), "rlvr_schedule_fade_log")


# ------------------------------------------------------------------ RLVR_PARAMS
def test_params_are_read_at_the_first_call(monkeypatch):
    R, ids = grouped(3, 4)
    scores, uid, order = interleave(R, ids)
    monkeypatch.setenv(rv.ENV_PARAMS, "delta=0.5")
    _, A1 = run(make_batch(scores, uid), "rlvr_asym_grpo")
    monkeypatch.setenv(rv.ENV_PARAMS, "delta=2")
    _, A2 = run(make_batch(scores, uid), "rlvr_asym_grpo")
    np.testing.assert_array_equal(A1, A2)
    rv.reset()
    _, A3 = run(make_batch(scores, uid), "rlvr_asym_grpo")
    close(A3, expected(advantages.get("asym_grpo", delta=2), R, order))


@pytest.mark.parametrize(("est", "params", "why"), [
    ("rlvr_asym_grpo", "gamma=1", r"unknown parameter\(s\) gamma"),
    ("rlvr_asym_grpo", "delta=-1", r"delta must be a finite number > 0, got -1"),
    ("rlvr_asym_grpo", "delta", r"param must look like NAME=VALUE"),
    ("rlvr_asym_grpo", "singleton=maybe", r"singleton must be one of"),
    ("rlvr_asym_grpo", "success_threshold=high", r"success_threshold must be"),
    ("rlvr_asym_grpo", "steps=10", r"steps is read by schedules only"),
    ("rlvr_schedule_fade", "gamma=1", r"unknown parameter\(s\) gamma"),
])
def test_bad_params_are_refused(monkeypatch, est, params, why):
    monkeypatch.setenv(rv.ENV_PARAMS, params)
    allowed = ", ".join(rv.allowed_keys(est))
    pattern = rf"RLVR_PARAMS={re.escape(repr(params))} is not valid for the verl estimator '{est}': .*{why}"
    with pytest.raises(ValueError, match=pattern) as err:
        run(make_batch([1.0, 0.0], ["a", "a"]), est)
    assert str(err.value).endswith(f"allowed keys: {allowed}")


def test_allowed_keys():
    assert rv.allowed_keys("rlvr_asym_grpo") == ["delta", "reward_values", "success_threshold", "singleton"]
    assert rv.allowed_keys("rlvr_schedule_fade") == ["H0", "H_target", "alpha_max", "beta", "delta_min", "p0", "ema",
                                                     "reward_values", "success_threshold", "singleton", "steps"]
    with pytest.raises(ValueError, match="unknown rlvr estimator 'rlvr_nope'; allowed: rlvr_reinforce"):
        rv.allowed_keys("rlvr_nope")


# ------------------------------------------------------------------ diagnostics
def test_jsonl_metrics_equal_masses(monkeypatch, tmp_path, caplog):
    monkeypatch.setenv(rv.ENV_PARAMS, "delta=0.5")
    monkeypatch.setenv(rv.ENV_LOG_DIR, str(tmp_path / "logs"))
    R, ids = grouped(6, 8, seed=9)
    scores, uid, _ = interleave(R, ids, pad=4)
    with caplog.at_level("INFO", logger="rlvr_diagnostics.verl"):
        run(make_batch(scores, uid), "rlvr_asym_grpo")
        run(make_batch(scores, uid), "rlvr_asym_grpo")
    recs = _log_lines(tmp_path / "logs")
    assert [r["step"] for r in recs] == [1, 2]
    rec = recs[0]
    assert rec["estimator"] == "rlvr_asym_grpo" and rec["rows"] == R.size + 4 and rec["padding_rows"] == 4
    assert rec["params"] == {"delta": 0.5, "success_threshold": None, "singleton": "zero"}
    adv = advantages.get("asym_grpo", delta=0.5)
    m = masses.of_group(adv, R)
    met = rec["metrics"]
    assert met["n_groups"] == 6 and met["group_size"] == 8
    assert met["m_S"] == pytest.approx(m.m_S.mean(), abs=1e-12)
    assert met["m_F"] == pytest.approx(m.m_F.mean(), abs=1e-12)
    assert met["sign_ratio"] == pytest.approx(m.m_S.mean() / m.m_F.mean(), rel=1e-12)
    assert met["abs_adv_sum"] == pytest.approx(masses.abs_adv_sum(adv, R).mean(), abs=1e-12)
    assert met["solve_rate_mean"] == pytest.approx(R.mean(), abs=1e-12)
    assert met["frac_all_correct"] == pytest.approx(R.all(1).mean(), abs=1e-12)
    assert met["frac_all_wrong"] == pytest.approx((R == 0).all(1).mean(), abs=1e-12)
    assert "delta" not in met  # a fixed family: its parameters are in rec["params"]
    msgs = [r.getMessage() for r in caplog.records if r.name == "rlvr_diagnostics.verl"]
    assert len(msgs) == 2 and msgs[0].startswith("rlvr_asym_grpo step 1: {") and '"m_S"' in msgs[0]


def test_no_log_file_without_log_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run(make_batch([1.0, 0.0], ["a", "a"]), "rlvr_grpo")
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ real-valued rewards
def test_real_valued_rewards(monkeypatch, tmp_path):
    rng = np.random.default_rng(4)
    R = rng.integers(0, 65, size=(5, 8)) / 64  # exact in float32
    ids = np.array([f"q{i}" for i in range(5)], dtype=object)
    scores, uid, order = interleave(R, ids, pad=3, pad_score=0.7)
    # a graded family uses them as they are; no masses without a threshold
    monkeypatch.setenv(rv.ENV_LOG_DIR, str(tmp_path))
    _, A = run(make_batch(scores, uid), "rlvr_grpo")
    close(A[: R.size], advantages.get("grpo").graded_call(R).ravel()[order])
    assert "m_S" not in _log_lines(tmp_path)[-1]["metrics"]
    # a binary family needs the threshold, and names the family and the parameter
    with pytest.raises(ValueError, match=r"^rlvr_asym_grpo: success_threshold is required by 'asym_grpo'.*"
                                         r"set it in RLVR_PARAMS, e.g. RLVR_PARAMS='success_threshold=0.5'$"):
        run(make_batch(scores, uid), "rlvr_asym_grpo")
    rv.reset()
    monkeypatch.setenv(rv.ENV_PARAMS, "delta=0.5,success_threshold=0.5")
    _, A = run(make_batch(scores, uid), "rlvr_asym_grpo")
    adv = advantages.get("asym_grpo", delta=0.5)
    B = (R >= 0.5).astype(float)
    close(A[: R.size], expected(adv, B, order))
    met = _log_lines(tmp_path)[-1]["metrics"]
    assert met["m_S"] == pytest.approx(masses.of_group(adv, B).m_S.mean(), abs=1e-12)
    assert met["m_F"] == pytest.approx(masses.of_group(adv, B).m_F.mean(), abs=1e-12)
    # a graded family with a threshold: the rewards as they are, the masses split at the threshold
    rv.reset()
    monkeypatch.setenv(rv.ENV_PARAMS, "success_threshold=0.5")
    _, A = run(make_batch(scores, uid), "rlvr_grpo")
    G = advantages.get("grpo").graded_call(R)
    close(A[: R.size], G.ravel()[order])
    met = _log_lines(tmp_path)[-1]["metrics"]
    assert met["m_S"] == pytest.approx(np.where(R >= 0.5, G, 0).sum(-1).mean() / 8, abs=1e-12)


# ------------------------------------------------------------------ the example script
def _script_overrides():
    text = (ROOT / "examples" / "verl_grpo.sh").read_text()
    cmd = text[text.index("verl.trainer.main_ppo"):]
    cmd = re.sub(r"\\\n", " ", cmd.split("\n\n")[0])
    overrides = [tok for tok in shlex.split(cmd, comments=True)[1:] if "=" in tok]
    assert overrides, "no overrides found in examples/verl_grpo.sh"
    return overrides


def test_example_script_overrides_exist_in_verl_config():
    import verl
    from hydra import compose, initialize_config_dir

    overrides = _script_overrides()
    keys = [o.split("=", 1)[0] for o in overrides]
    assert "algorithm.adv_estimator" in keys
    assert "+ray_kwargs.ray_init.runtime_env.env_vars.RLVR_PARAMS" in keys
    config_dir = str(Path(verl.__file__).parent / "trainer" / "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        base = compose(config_name="ppo_trainer")
        for key in keys:
            if key.startswith("+"):
                continue
            parent, _, leaf = key.rpartition(".")
            node = OmegaConf.select(base, parent) if parent else base
            # keys() also lists the values verl leaves to the user ("???", e.g. rollout.name)
            assert node is not None and leaf in node.keys(), f"{key} is not in verl's ppo_trainer config"
        # the overrides parse as hydra overrides (shell variables replaced by sample values)
        sample = [re.sub(r"\$\{?(\w+)\}?", "x", o) for o in overrides]
        sample = [o.replace("RLVR_PARAMS='x'", "RLVR_PARAMS='delta=0.5,alpha=2'") for o in sample]
        cfg = compose(config_name="ppo_trainer", overrides=sample)
    assert cfg.algorithm.adv_estimator == "rlvr_asym_grpo"
    assert cfg.ray_kwargs.ray_init.runtime_env.env_vars.RLVR_PARAMS == "delta=0.5,alpha=2"
