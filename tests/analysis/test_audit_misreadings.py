"""Two silent misreadings of ``rlvr-audit`` found on first use (issue 27, part 4), reproduced:

* a verl dump whose ``uid`` is shared by the rollouts of a prompt (verl's own uid: one uuid4
  per prompt, repeated ``rollout.n`` times) was read as multi-turn duplicates: 504 of 582 rows
  dropped, groups of 1, 100 % zero-signal, exit 0;
* "which advantage" named ``rloo`` for an AsymGRPO δ = 0.5 log, also with the matching
  ``--advantage asym_grpo --param delta=0.5`` and a ``run_config.json`` beside the log;

and the guards added: a read that drops many rows or finds only groups of one is refused (exit
2) unless ``--allow-suspect-read``, and a family is called "the closest" only when it is close.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from analysis import audit_cli
from analysis.audit import metrics, readers
from analysis.audit import report as audit_report
from analysis.report import Page
from rlvr_theory import advantages

ROOT = Path(__file__).resolve().parents[2]
VERL = ROOT / "examples" / "audit_logs" / "verl" / "rollout_data"
UID = re.compile(r"^(?P<prompt>.+)_(?P<rollout>\d+)_(?P<output>\d+)$")


def copy_verl(dest: Path, uid) -> Path:
    """The example verl dump with each row's uid rewritten by ``uid(match)`` (a ``UID`` match)."""
    if not VERL.is_dir():
        pytest.skip(f"{VERL} not written")
    dest.mkdir(parents=True)
    for f in sorted(VERL.glob("*.jsonl")):
        rows = [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
        for row in rows:
            row["uid"] = uid(UID.match(row["uid"]))
        (dest / f.name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return dest


def cli(argv: list, capsys) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = audit_cli.main([str(a) for a in argv])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


@pytest.fixture
def no_files(monkeypatch):
    """``rlvr-audit`` without writing the report (its files are tested elsewhere): the document
    that would be written is kept in the list yielded."""
    docs: list[dict] = []

    def keep(doc, steps_frame, out, *, overwrite=False):
        docs.append(doc)
        return Path(out)

    monkeypatch.setattr(audit_report, "write_report", keep)
    return docs


# ------------------------------------------------------------------ 1. a shared verl uid is a group
def test_a_shared_verl_uid_is_one_group_as_the_suffixed_uids_are(tmp_path):
    shared = readers.read(copy_verl(tmp_path / "shared", lambda m: m["prompt"]))
    suffixed = readers.read(copy_verl(tmp_path / "suffixed", lambda m: m.group(0)))
    # before the fix: 504 of the 582 rows dropped as "multi-turn duplicates", 72 groups of 1
    assert shared.source["n_duplicate_rows_dropped"] == 0 and shared.source["n_earlier_outputs_dropped"] == 0
    assert shared.group_size == 8 == suffixed.group_size
    assert shared.source["n_padding_rows_dropped"] == 6 and shared.source["n_rows_read"] == 582
    assert shared.source["grouping"] == "shared-uid" and suffixed.source["grouping"] == "uid"
    assert any("shared by the rollouts of a prompt" in n for n in shared.source["notes"])
    pd.testing.assert_frame_equal(shared.frame, suffixed.frame)
    g_shared = metrics.group_table(shared, advantage="grpo")
    g_suffixed = metrics.group_table(suffixed, advantage="grpo")
    pd.testing.assert_frame_equal(g_shared, g_suffixed)
    assert len(g_shared) == 72 and set(g_shared["group_size"]) == {8}
    assert readers.suspect_read(shared) == []


def test_multi_output_rollouts_are_still_deduplicated_and_counted(tmp_path):
    """What the de-duplication guards: a uid "{prompt}_{rollout}_{output}" whose rollouts wrote
    several outputs keeps the last output of each rollout (unchanged by the fix)."""
    rows = [{"input": "q", "output": f"o{o}", "score": float(o == 2 and i == 0), "step": 1, "uid": f"p_{i}_{o}"}
            for i in range(2) for o in range(3)]
    (tmp_path / "1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = readers.read(tmp_path)
    assert r.frame["reward"].tolist() == [1.0, 0.0] and r.group_size == 2
    assert r.source["n_earlier_outputs_dropped"] == 4 == r.source["n_duplicate_rows_dropped"]
    problems = readers.suspect_read(r)
    assert len(problems) == 1 and "dropped 4 of the 6 rows" in problems[0] and "earlier outputs" in problems[0]


# ------------------------------------------------------------------ 2. no quiet exit 0 on a misread
@pytest.mark.parametrize("kind", ["groups-of-one", "dropped"])
def test_a_suspect_read_is_refused_and_audited_with_the_flag(tmp_path, capsys, no_files, kind):
    if kind == "groups-of-one":  # "{prompt}_{rollout}": every uid its own group
        logs = copy_verl(tmp_path / "logs", lambda m: f"{m['prompt']}_{m['rollout']}")
        expected = "every group of the verl log has 1 rollout (576 groups of 1 row"
    else:  # every rollout logged with three outputs: two thirds are dropped as earlier outputs
        logs = tmp_path / "logs"
        logs.mkdir()
        rows = [{"input": f"q{b}", "output": "o", "score": float((b + i) % 2), "step": 1, "uid": f"u{b}_{i}_{o}"}
                for b in range(4) for i in range(4) for o in range(3)]
        (logs / "1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        expected = "the verl reader dropped 32 of the 48 rows it read (66.7 %, more than 5 %)"
    rc, out, err = cli([logs, "--out", tmp_path / "rep", "--advantage", "grpo"], capsys)
    assert rc == 2 and out == "" and not no_files
    line = err.strip()
    assert "\n" not in line and line.startswith("rlvr-audit: error: PATH: ") and expected in line, err
    assert "pass --allow-suspect-read" in line
    rc, out, err = cli([logs, "--out", tmp_path / "rep", "--advantage", "grpo", "--allow-suspect-read"], capsys)
    assert rc == 0, err
    doc = no_files[0]
    assert doc["suspect_read"]["allowed"] is True and expected in doc["suspect_read"]["problems"][0]
    assert doc["notes"][0].startswith("Suspect read, audited anyway (--allow-suspect-read)")
    assert out.startswith("suspect read, audited anyway (--allow-suspect-read)")
    page = Page()                                                 # the report's first section
    audit_report._verdict(page, doc, audit_report._steps(doc, None))
    assert page.blocks[0] == ("h2", "Verdict")
    verdict = page.blocks[1][1]
    assert verdict.startswith("Suspect read, audited anyway (--allow-suspect-read): ") and expected in verdict


def test_groups_of_one_given_with_group_size_1_are_not_suspect(tmp_path, capsys, no_files):
    logs = copy_verl(tmp_path / "logs", lambda m: f"{m['prompt']}_{m['rollout']}")
    rc, _, err = cli([logs, "--out", tmp_path / "rep", "--group-size", "1", "--quiet"], capsys)
    assert rc == 0, err
    assert no_files[0]["suspect_read"] == {"problems": [], "allowed": False,
                                           "max_dropped_share": readers.MAX_DROPPED_SHARE}


# ------------------------------------------------------------------ 3. which advantage
def rlvr_run(run: Path, adv, *, steps: int = 4, B: int = 12, G: int = 8, seed: int = 0, length_term: float = 0.0
             ) -> Path:
    """An ``rlvr-train grpo`` rollout log ``RUN/rollouts/step_XXXXXX.parquet`` whose advantages
    are the registry family ``adv``'s on random binary rewards (plus ``length_term`` times the
    standardised lengths: an advantage of no registry family)."""
    rng = np.random.default_rng(seed)
    (run / "rollouts").mkdir(parents=True)
    for step in range(1, steps + 1):
        R = (rng.random((B, G)) < rng.uniform(0.1, 0.9, (B, 1))).astype(float)
        L = rng.integers(5, 60, (B, G))
        A = adv(R) + length_term * (L - L.mean()) / L.std()
        pq.write_table(pa.table({
            "step": pa.array(np.full(B * G, step, np.int64)), "prompt": [f"q{b}" for b in range(B) for _ in range(G)],
            "group": pa.array(np.repeat(np.arange(B), G).astype(np.int64)),
            "rollout": pa.array(np.tile(np.arange(G), B).astype(np.int64)), "reward": R.ravel(),
            "advantage": A.ravel(), "length": pa.array(L.ravel().astype(np.int64))}),
            run / "rollouts" / f"step_{step:06d}.parquet")
    return run


ASYM = advantages.get("asym_grpo", delta=0.5)


def test_asym_grpo_delta_half_is_found_with_delta_fitted(tmp_path):
    r = readers.read(rlvr_run(tmp_path / "run", ASYM))
    assert r.source["trainer_config"] is None
    info = metrics.which_advantage(r, detail=True)
    m = info["match"]          # before the fix: none within tolerance, "closest rloo" (deviation 0.75)
    assert m is not None, info
    assert m["name"] == "asym_grpo" and m["params"]["delta"] == pytest.approx(0.5, abs=1e-9)
    assert m["fitted"] == ["delta"] and m["from"] == "search" and m["max_rel_error"] <= metrics.DEFAULT_RTOL


def test_asym_grpo_is_named_by_run_config_json_and_the_trl_adapter_state(tmp_path):
    run = rlvr_run(tmp_path / "run", ASYM)
    (run / "run_config.json").write_text(json.dumps({"kind": "grpo", "package_version": "x", "settings": {
        "advantage": "asym_grpo", "schedule": None, "params": {"delta": 0.5}, "group_size": 8}}))
    doc = metrics.audit(readers.read(run))
    m = doc["advantage"]
    assert (m["name"], m["params"], m["from"], m["fitted"]) == ("asym_grpo", {"delta": 0.5}, "trainer", [])
    assert doc["advantage_search"]["trainer"]["file"] == str(run / "run_config.json")
    assert any("run_config.json names the advantage asym_grpo (delta=0.5)" in n for n in doc["notes"])
    # the TRL adapter's checkpoint-N/rlvr_state.json names the family, not its parameters: δ is fitted
    (run / "run_config.json").unlink()
    for n in (2, 4):
        (run / f"checkpoint-{n}").mkdir()
        (run / f"checkpoint-{n}" / "rlvr_state.json").write_text(json.dumps(
            {"policy": {}, "name": "asym_grpo", "generation_batches": n, "entropy_pending": []}))
    r = readers.read(run)
    assert r.source["trainer_config"]["file"] == str(run / "checkpoint-4" / "rlvr_state.json")
    m = metrics.which_advantage(r)
    assert (m["name"], m["from"], m["fitted"]) == ("asym_grpo", "trainer", ["delta"])
    assert m["params"]["delta"] == pytest.approx(0.5, abs=1e-9)


def test_the_users_matching_advantage_is_reported_as_reproduced(tmp_path, capsys, no_files):
    run = rlvr_run(tmp_path / "run", ASYM)
    rc, out, err = cli([run, "--out", tmp_path / "rep", "--advantage", "asym_grpo", "--param", "delta=0.5"], capsys)
    assert rc == 0, err
    doc = no_files[0]
    search = doc["advantage_search"]
    assert search["option"]["reproduced"] is True and search["option"]["label"] == "asym_grpo(delta=0.5)"
    assert (doc["advantage"]["name"], doc["advantage"]["from"]) == ("asym_grpo", "option")
    assert "reproduced by asym_grpo(delta=0.5) (--advantage)" in out
    text = audit_report._advantage_text(doc)
    assert "reproduced by asym_grpo(delta=0.5) (--advantage, reproduced)" in text and "rloo" not in text
    # a --advantage that does not reproduce the log says so, and the log's family is still found
    info = metrics.which_advantage(readers.read(run), advantage="rloo", detail=True)
    assert info["option"]["reproduced"] is False and info["option"]["max_abs_error"] > 0.1
    assert info["match"]["name"] == "asym_grpo"


def test_an_advantage_of_no_registry_family_is_not_called_closest(tmp_path):
    run = rlvr_run(tmp_path / "run", advantages.get("dr_grpo"), length_term=0.3)
    doc = metrics.audit(readers.read(run))
    search = doc["advantage_search"]
    assert doc["advantage"] is None and search["closest"] is None
    assert search["best"]["max_rel_error"] > metrics.CLOSE_RTOL and search["n_fitted"] > 0
    note = next(n for n in doc["notes"] if n.startswith("No registry advantage"))
    assert "none comes close" in note and "closest" not in note
    text = audit_report._advantage_text(doc)
    assert "No registry family comes close" in text and "closest" not in text
    assert not any(isinstance(v, float) and np.isnan(v) for v in search["best"].values())


def test_fit_parameter_recovers_a_one_parameter_family_and_refuses_others():
    r = np.array([[1.0, 0, 0, 1, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0, 1, 0]])
    for name, key, value in (("asym_grpo", "delta", 0.37), ("power_alpha", "alpha", 3.0), ("fgrpo", "gamma", 2.5)):
        target = advantages.get(name, **{key: value})(r)
        adv, err = metrics.fit_parameter(advantages.get(name), lambda a, t=target: float(np.abs(a(r) - t).max()))
        assert adv.params[key] == pytest.approx(value, rel=1e-9) and err < 1e-9, (name, adv, err)
    assert metrics.fittable(advantages.get("fade")) is None           # two parameters: not fitted
    assert metrics.fittable(advantages.get("grpo")) is None           # ddof and eps: conventions
    assert metrics.fit_parameter(advantages.get("rloo"), lambda a: 0.0) is None
