"""rlvr-diff under faults: the output location is checked before any checkpoint is read, a
report appears whole or not at all, a write the system refuses is one line and exit 1, and
inputs that are not what they claim are refused naming the file.

CLI cases run ``diff_cli.main(argv)`` in-process (:func:`run_in_process`: the code the console
script runs before ``sys.exit``, its output captured), as do the faults that need a patch
(read-only place, full disk); a write to a full standard output runs the real console script
(``.venv/bin/rlvr-diff``, else ``python -m analysis``) in a subprocess."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from analysis import diff as weight_diff
from analysis import hidden_states
from analysis.diff import cli as diff_cli
from rlvr_plumbing import io
from tests.analysis import tiny_checkpoints as tc
from tests.in_process import run_in_process

ROOT = Path(__file__).resolve().parents[2]
_SCRIPT = Path(sys.executable).with_name("rlvr-diff")


def rlvr_diff(*args: str, stdout=subprocess.PIPE) -> subprocess.CompletedProcess:
    cmd = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "analysis"]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(cmd + [str(a) for a in args], stdout=stdout, stderr=subprocess.PIPE, text=True,
                          env=env, cwd=ROOT, timeout=300)


def rollouts(path: Path) -> Path:
    rows = [{"prompt_ids": [5, 6, 7], "completion_ids": [8, 9, 10, 11], "correct": True},
            {"prompt_ids": [12, 13], "completion_ids": [14, 15, 16], "correct": False},
            {"prompt_ids": [20], "completion_ids": [21, 22, 23], "correct": True},
            {"prompt_ids": [30, 31], "completion_ids": [32, 33], "correct": False}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def siblings(d: Path) -> list[str]:
    """Temporary leftovers (``.NAME.*.tmp`` / ``.old``) beside the outputs."""
    return sorted(p.name for p in d.iterdir() if p.name.startswith("."))


@pytest.fixture
def no_work(monkeypatch):
    """Fail the test if a checkpoint is read: the --out checks must come first."""
    def boom(*a, **k):
        raise AssertionError("work started before --out was checked")
    monkeypatch.setattr(weight_diff, "diff", boom)
    monkeypatch.setattr(hidden_states, "geometry", boom)


# ------------------------------------------------------- --out, before any work
@pytest.mark.parametrize("sub", ["weights", "hidden-states"])
def test_out_that_is_a_file_or_under_a_file_is_refused_before_reading_anything(tmp_path, no_work, sub):
    """The checkpoints do not even exist: the --out error comes first (nothing is read)."""
    f = tmp_path / "notes.txt"
    f.write_text("mine")
    head = ["hidden-states", tmp_path / "nock", "--rollouts", tmp_path / "no.jsonl"] if sub == "hidden-states" \
        else [tmp_path / "nobase", tmp_path / "nork"]
    p = run_in_process(diff_cli.main, *head, "--out", f)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr == f"rlvr-diff: error: --out: {str(f)!r} is an existing file; give a directory path\n"
    assert f.read_text() == "mine"
    p = run_in_process(diff_cli.main, *head, "--out", f / "rep")
    assert p.returncode == 2
    assert p.stderr == f"rlvr-diff: error: --out: {str(f / 'rep')!r} lies under the file {str(f)!r}\n"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["notes.txt"]


@pytest.mark.parametrize("sub", ["weights", "hidden-states"])
def test_unwritable_out_is_refused_before_any_work(tmp_path, monkeypatch, capsys, no_work, sub):
    def read_only(*a, **k):
        raise OSError(errno.EROFS, "Read-only file system")
    monkeypatch.setattr(io.tempfile, "mkstemp", read_only)
    out = tmp_path / "rep"
    head = ["hidden-states", "ck", "--rollouts", "r.jsonl"] if sub == "hidden-states" else ["base", "rl"]
    assert diff_cli.main(head + ["--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == f"rlvr-diff: error: --out: cannot write in {str(tmp_path)!r} (Read-only file system)\n"
    assert not out.exists()


@pytest.mark.parametrize("sub", ["weights", "hidden-states"])
def test_foreign_non_empty_directory_is_refused_before_any_work(tmp_path, capsys, no_work, sub):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("precious")
    head = ["hidden-states", "ck", "--rollouts", "r.jsonl"] if sub == "hidden-states" else ["base", "rl"]
    assert diff_cli.main(head + ["--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rlvr-diff: error: --out: {str(out)!r} exists and is not empty") and "--overwrite" in err
    assert (out / "thesis.tex").read_text() == "precious"


def test_another_command_s_report_is_not_replaced_without_overwrite(tmp_path, capsys, no_work):
    out = tmp_path / "audit"
    out.mkdir()
    (out / "report.json").write_text('{"source": {"format": "verl"}, "steps": []}')  # an rlvr-audit report
    assert diff_cli.main(["base", "rl", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "holds a report.json that is not an rlvr-diff report" in err and "--overwrite" in err
    assert (out / "report.json").read_text().startswith('{"source"')


def test_overwrite_accepts_a_foreign_directory_and_a_previous_report_is_replaced(tmp_path, cheap_png):
    base, (rl, _) = tc.qwen2_base(), tc.qwen2_planted()
    out = tmp_path / "rep"
    out.mkdir()
    (out / "old.txt").write_text("foreign")
    p = run_in_process(diff_cli.main, base, rl, "--out", out, "--layers", "head", "--quiet", "--overwrite")
    assert p.returncode == 0, p.stderr
    assert (out / "report.json").is_file() and not (out / "old.txt").exists()     # replaced whole
    first = json.loads((out / "report.json").read_text())
    assert "overwrite" not in first["run"]["settings"]
    (out / "report.md").write_text("stale")
    p = run_in_process(diff_cli.main, base, rl, "--out", out, "--layers", "head", "--quiet")  # our report: no flag needed
    assert p.returncode == 0, p.stderr
    assert (out / "report.md").read_text() != "stale"
    assert siblings(tmp_path) == []


def test_hidden_states_previous_report_replaced_and_foreign_accepted_with_overwrite(tmp_path, capsys):
    f = rollouts(tmp_path / "r.jsonl")
    out = tmp_path / "hs"
    out.mkdir()
    (out / "x.csv").write_text("1")
    argv = ["hidden-states", str(tc.qwen2_base()), "--rollouts", str(f), "--out", str(out), "--quiet"]
    assert diff_cli.main(argv) == 2
    assert diff_cli.main(argv + ["--overwrite"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["hidden_states.html", "hidden_states.json",
                                                     "hidden_states.md", "hidden_states.png"]
    assert diff_cli.main(argv) == 0                                                 # earlier output: replaced
    assert siblings(tmp_path) == []


# ------------------------------------------------------------ faults mid-write
def _full_disk(monkeypatch, victim: str):
    """Writing ``victim`` fails as on a full disk (an OSError that names no file)."""
    real = Path.write_text

    def write_text(self, *a, **k):
        if Path(self).name.startswith(f".{victim}."):  # atomic_write's temporary file
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, *a, **k)
    monkeypatch.setattr(Path, "write_text", write_text)


@pytest.mark.parametrize("previous", [False, True], ids=["new", "over-previous"])
def test_disk_full_mid_write_leaves_nothing_and_says_so_in_one_line(tmp_path, monkeypatch, capsys, previous, cheap_png):
    base, (rl, _) = tc.qwen2_base(), tc.qwen2_planted()
    out = tmp_path / "rep"
    argv = [str(base), str(rl), "--out", str(out), "--layers", "head", "--quiet"]
    if previous:
        assert diff_cli.main(argv) == 0
        before = {p.name: p.read_bytes() for p in out.iterdir()}
    _full_disk(monkeypatch, "report.html")
    capsys.readouterr()
    assert diff_cli.main(argv) == 1
    cap = capsys.readouterr()
    assert cap.err == f"rlvr-diff: error: No space left on device: {str(out / 'report.html')!r}\n"
    assert cap.out == ""
    if previous:   # the earlier report is intact
        assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    else:
        assert not out.exists()
    assert siblings(tmp_path) == []


def test_hidden_states_disk_full_leaves_nothing(tmp_path, monkeypatch, capsys):
    f = rollouts(tmp_path / "r.jsonl")
    out = tmp_path / "hs"
    base = tc.qwen2_base()
    capsys.readouterr()                                     # building the fixture is not ours
    _full_disk(monkeypatch, "hidden_states.json")
    rc = diff_cli.main(["hidden-states", str(base), "--rollouts", str(f), "--out", str(out), "--quiet"])
    assert rc == 1
    assert capsys.readouterr().err == f"rlvr-diff: error: No space left on device: {str(out / 'hidden_states.json')!r}\n"
    assert not out.exists() and siblings(tmp_path) == []


def test_json_to_a_full_stdout_is_one_line_exit_1(tmp_path):
    base, (rl, _) = tc.qwen2_base(), tc.qwen2_planted()
    with open("/dev/full", "w") as full:
        p = rlvr_diff(base, rl, "--out", tmp_path / "rep", "--layers", "head", "--json", "--quiet", stdout=full)
    assert p.returncode == 1
    assert p.stderr == "rlvr-diff: error: cannot write the output: No space left on device\n"


# -------------------------------------------------- inputs that are not what they claim
def _hs(tmp_path: Path, rollouts_file: Path, *extra: str) -> tuple[int, str]:
    proc = run_in_process(diff_cli.main, "hidden-states", tc.qwen2_base(), "--rollouts", rollouts_file,
                          "--out", tmp_path / "hs", "--quiet", *extra)
    assert not (tmp_path / "hs").exists()
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, proc.stderr


@pytest.mark.parametrize("content,msg", [
    (b"{not json\n", "--rollouts line 1 of {f!r} is not valid JSON"),
    (b"[1, 2]\n", "--rollouts line 1 of {f!r} must be a JSON object"),
    (b'{"prompt_ids": [1], "completion_ids": [2], "correct": true}\n\xff\xfe\x00garbage\n',
     "--rollouts line 2 of {f!r} is not UTF-8 text"),
    (b"", "--rollouts file {f!r} holds no rollouts"),
    (b'{"prompt_ids": [1], "completion_ids": [2], "correct": true}\n\n{"prompt_ids": [1], "completion_ids": [99999]'
     b', "correct": false}\n', "--rollouts line 3 of {f!r}: token id 99999 is outside the vocabulary"),
])
def test_corrupt_rollouts_are_refused_naming_the_file(tmp_path, content, msg):
    f = tmp_path / "r.jsonl"
    f.write_bytes(content)
    rc, err = _hs(tmp_path, f)
    assert rc == 2 and err.startswith("rlvr-diff: error: "), err
    assert msg.format(f=str(f)) in err and str(f) in err, err


def test_rollouts_that_are_missing_or_a_directory_are_refused(tmp_path):
    rc, err = _hs(tmp_path, tmp_path / "missing.jsonl")
    assert rc == 2 and str(tmp_path / "missing.jsonl") in err and "--rollouts" in err, err
    rc, err = _hs(tmp_path, tmp_path)
    assert rc == 2 and str(tmp_path) in err and "--rollouts" in err, err


def test_text_rollouts_with_a_tokenizer_beyond_the_model_are_refused(tmp_path):
    """A tokenizer with more ids than the model's embedding rows: refused naming the line, the
    file and the tokenizer."""
    tdir = tmp_path / "tok"
    tc.build_tokenizer(vocab=tc.VOCAB * 4).save_pretrained(tdir)
    f = tmp_path / "r.jsonl"
    text = f"w{tc.VOCAB * 4 - 5} w1"
    f.write_text("".join(json.dumps({"prompt": "w1", "completion": text, "correct": c}) + "\n" for c in (True, False)))
    rc, err = _hs(tmp_path, f, "--tokenizer", str(tdir))
    assert rc == 2
    assert err.startswith(f"rlvr-diff: error: --rollouts line 1 of {str(f)!r} (tokenized with {str(tdir)!r}): "
                          f"token id {tc.VOCAB * 4 - 1} is outside the vocabulary (size {tc.VOCAB})"), err


def test_corrupt_checkpoint_for_hidden_states_is_refused_naming_the_file(tmp_path):
    ck = tc.copy(tc.qwen2_base(), tmp_path / "ck")
    st = next(ck.glob("*.safetensors"))
    st.write_bytes(st.read_bytes()[: st.stat().st_size // 2])               # truncated
    proc = run_in_process(diff_cli.main, "hidden-states", ck, "--rollouts", rollouts(tmp_path / "r.jsonl"),
                          "--out", tmp_path / "hs")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("rlvr-diff: error: ") and str(st) in proc.stderr, proc.stderr
    assert not (tmp_path / "hs").exists()


# ------------------------------------------- ΔW of extreme magnitude (float64 checkpoints)
@pytest.fixture(scope="module")
def f64_base(tmp_path_factory):
    return tc.build(tmp_path_factory.mktemp("f64") / "base", dtype="float64", layers=1, vocab=64, hidden=16)


def _scaled_pair(base: Path, out: Path, scale: float, seeds=(0, 1)) -> tuple[Path, list[Path]]:
    """A base whose head is ``scale`` × the original, and RL runs adding ``scale`` × noise."""
    import torch

    head = tc.head_name(base)
    b = tc.copy(base, out / "base")
    tc.rewrite_tensor(b, head, lambda t: t * scale)
    rls = []
    for j in seeds:
        g = torch.Generator().manual_seed(j)
        rl = tc.copy(b, out / f"rl{j}")
        tc.rewrite_tensor(rl, head, lambda t, g=g: t + scale * (torch.randn(t.shape[0], 1, generator=g, dtype=t.dtype)
                                                              @ torch.randn(1, t.shape[1], generator=g, dtype=t.dtype)
                                                              + 0.1 * torch.randn(t.shape, generator=g, dtype=t.dtype)))
        rls.append(rl)
    return b, rls


@pytest.mark.parametrize("scale", [1e-200, 1e-310, 1e200])
def test_tiny_and_huge_delta_w_are_measured_not_zero_or_inf(tmp_path, f64_base, scale):
    """A ΔW whose squares leave the float64 range (only float64 checkpoints can hold one): the
    norms, singular values, ratios and cross-run cosines are those of the same ΔW at scale 1."""
    import numpy as np

    ref_b, ref_rls = _scaled_pair(f64_base, tmp_path / "one", 1.0)
    b, rls = _scaled_pair(f64_base, tmp_path / "x", scale)
    ref = weight_diff.diff(str(ref_b), [str(p) for p in ref_rls], layers="head", progress=False)
    doc = weight_diff.diff(str(b), [str(p) for p in rls], layers="head", progress=False)
    for c, r in zip(doc["checkpoints"], ref["checkpoints"]):
        assert c["notes"] == [] and c["output_head"]["density"]["0"] == 1.0
        h, rh = c["output_head"], r["output_head"]
        tol = 1e-9 if scale > 1e-300 else 1e-6          # subnormal entries keep fewer digits
        assert c["global_l2"] == pytest.approx(r["global_l2"] * scale, rel=tol)
        assert h["relative_l2"] == pytest.approx(rh["relative_l2"], rel=tol)
        assert h["s1"] == pytest.approx(rh["s1"] * scale, rel=tol)
        assert h["s1_s2"] == pytest.approx(rh["s1_s2"], rel=tol)
        assert h["rank1_fraction"] == pytest.approx(rh["rank1_fraction"], rel=tol)
        assert h["l2_share"] == pytest.approx(rh["l2_share"], rel=tol)
    np.testing.assert_allclose(doc["clustering"]["cosine_global"], ref["clustering"]["cosine_global"], rtol=1e-6)


def test_delta_w_beyond_float64_is_refused_naming_the_tensor(tmp_path, f64_base):
    import torch

    head = tc.head_name(f64_base)

    def one_entry(v):
        def f(t):
            t = torch.zeros_like(t)
            t[0, 0] = v
            return t
        return f
    b = tc.copy(f64_base, tmp_path / "base")
    tc.rewrite_tensor(b, head, one_entry(1e308))
    rl = tc.copy(b, tmp_path / "rl")
    tc.rewrite_tensor(rl, head, one_entry(-1e308))         # ΔW = -2e308: not a float64
    with pytest.raises(ValueError, match=rf"^checkpoints\[0\]: ΔW of tensor '{head}' is beyond the float64 range"):
        weight_diff.diff(str(b), [str(rl)], layers="head", progress=False)
    tc.rewrite_tensor(b, head, lambda t: torch.full_like(t, 1e308))       # ‖W_base‖ = 3e309
    with pytest.raises(ValueError, match=rf"^checkpoints\[0\]: the base weight of tensor '{head}' is beyond"):
        weight_diff.diff(str(b), [str(rl)], layers="head", progress=False)


# ------------------------------------------------------------ pass@k scale limits
def test_passk_counts_beyond_int64_are_refused_by_value():
    from analysis import passk

    with pytest.raises(ValueError, match=r"^n must be an integer <= 2\^63 - 1 = 9223372036854775807 \(int64\), "
                                         r"got 9223372036854775808$"):
        passk.pass_at_k(2**63, 1, 2)
    for bad in ([2**63, 5], [2**64 + 3, 1], [9.3e18, 1.0]):
        with pytest.raises(ValueError, match=r"^n must contain only integers <= 2\^63 - 1 = 9223372036854775807"):
            passk.pass_at_k(bad, 1, 2)
    assert float(passk.pass_at_k(2**62, 1, 2)) == pytest.approx(2 / 2**62, rel=1e-12)


def test_passk_huge_n_fits_in_o_problems_or_is_refused_with_the_memory():
    """The MLE needs no array over 0..n: n = 10^15 fits (its histogram MSE is not formed); the
    MSE fit and the m-out-of-n subsampling table would need petabytes: refused with the number."""
    from analysis import passk

    fit = passk.fit_beta_binomial([0, 1, 0, 0], [10**15] * 4)
    assert fit.method == "mle" and fit.mse == float("inf") and 0 < fit.a < fit.b
    mix = passk.fit_beta_mixture([0, 1, 0, 0, 3, 2], [10**15] * 6, starts=2)
    assert mix.mse == float("inf") and 0 < mix.w < 1
    with pytest.raises(ValueError, match=r"^method='mse' \(arrays over x = 0\.\.n, n = 1000000000000000\) needs about "
                                         r"28\.4 PiB of memory on cpu; .* available$"):
        passk.fit_beta_binomial([0, 1, 0, 0], [10**15] * 4, method="mse")
    with pytest.raises(ValueError, match=r"^the pass@k table over 0\.\.m \(m = 100000000000000, 1 values of k\) needs "
                                         r"about .* PiB of memory"):
        passk.subsample_pass_at_k([0, 1], [10**15] * 2, 1, 10**14, iterations=2)


def test_nan_weight_for_hidden_states_is_refused_naming_tensor_and_file(tmp_path, capsys):
    ck = tc.copy(tc.qwen2_base(), tmp_path / "ck")
    name = "model.layers.0.mlp.up_proj.weight"
    tc.rewrite_tensor(ck, name, lambda t: t.index_put_((t.new_zeros(1, dtype=int), t.new_zeros(1, dtype=int)),
                                                       t.new_full((1,), float("nan"))))
    capsys.readouterr()                                     # building the fixture is not ours
    rc = diff_cli.main(["hidden-states", str(ck), "--rollouts", str(rollouts(tmp_path / "r.jsonl")),
                        "--out", str(tmp_path / "hs"), "--quiet"])
    assert rc == 2
    assert capsys.readouterr().err == (f"rlvr-diff: error: CHECKPOINT: tensor {name!r} in file "
                                       f"{str(ck / 'model.safetensors')!r} holds non-finite values: 1 NaN and 0 Inf "
                                       f"(of {tc.load_state(ck)[name].numel()} entries)\n")
    assert not (tmp_path / "hs").exists()


def test_corrupt_tokenizer_is_refused_naming_the_directory(tmp_path, capsys):
    tdir = tmp_path / "tok"
    tdir.mkdir()
    (tdir / "tokenizer.json").write_text('{"model": ')
    f = tmp_path / "r.jsonl"
    f.write_text(json.dumps({"prompt": "w1", "completion": "w2", "correct": True}) + "\n")
    base = tc.qwen2_base()
    capsys.readouterr()
    rc = diff_cli.main(["hidden-states", str(base), "--rollouts", str(f), "--tokenizer", str(tdir),
                        "--out", str(tmp_path / "hs"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1
    assert err.startswith(f"rlvr-diff: error: --tokenizer: could not load a tokenizer from {str(tdir)!r}: "), err
    assert not (tmp_path / "hs").exists()


@pytest.mark.parametrize("sub", ["weights", "hidden-states"])
def test_out_holding_an_input_is_refused_even_with_overwrite(tmp_path, capsys, no_work, sub):
    """``--overwrite`` replaces ``--out`` whole: never when it is (or holds) an input."""
    runs = tmp_path / "runs"
    ck = runs / "sft"
    ck.mkdir(parents=True)
    (ck / "config.json").write_text("{}")
    head = ["hidden-states", str(ck), "--rollouts", str(tmp_path / "r.jsonl")] if sub == "hidden-states" \
        else [str(ck), str(tmp_path / "rl")]
    what = "CHECKPOINT" if sub == "hidden-states" else "BASE"
    for out in (ck, runs):
        assert diff_cli.main(head + ["--out", str(out), "--overwrite"]) == 2
        err = capsys.readouterr().err
        assert err == (f"rlvr-diff: error: --out: {str(out)!r} holds the input {what} {str(ck)!r}; the report "
                       "would replace it: choose another directory\n"), err
    assert (ck / "config.json").read_text() == "{}"
