"""The learnability experiment's splits and its curves: pure functions of ids and of verl's JSONL."""

from __future__ import annotations

import importlib.util
import json

from mrgrpo.data.synth import generate, synth_split
from mrgrpo.learn.experiment import VAL_SOURCES, select_records, split_of


def test_no_demonstrated_composition_reaches_sft_and_no_eval_row_reaches_training():
    records = generate(600, seed=3, templates="train") + generate(40, seed=4, templates="heldout")
    splits = {r["id"]: split_of(r["id"]) for r in records}
    for rid, split in splits.items():
        s = synth_split(rid)
        if split == "sft_rl":
            assert not s["nodemo"] and not s["heldout_template"]
        if s["nodemo"] and not s["heldout_template"]:
            assert split in ("rl", "synth_nodemo")
        if s["heldout_template"]:
            assert split == "synth_unseen_template"
    assert set(splits.values()) >= {"sft_rl", "rl", *VAL_SOURCES}


def test_selection_keeps_every_nodemo_record():
    train, heldout = generate(300, seed=5), generate(10, seed=6, templates="heldout")
    chosen = select_records(train, heldout, n_demo=20)
    nodemo = [r for r in train if synth_split(r["id"])["nodemo"]]
    assert all(r in chosen for r in nodemo) and len(chosen) == len(nodemo) + 20 + 10


def test_learning_curves_read_verls_file_logger(repo_root, tmp_path):
    spec = importlib.util.spec_from_file_location("learning_curves", repo_root / "benchmarks/learning_curves.py")
    lc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lc)
    lines = [{"step": 0, "data": {"val-core/synth_nodemo/acc/mean@1": 0.25}},
             {"step": 1, "data": {"critic/score/mean": 0.5, "mrgrpo/fix_rate": 0.1}},
             {"step": 2, "data": {"critic/score/mean": 0.7, "val-core/synth_nodemo/acc/mean@1": 0.5}}]
    (tmp_path / "grpo_k2.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    rows = lc.read_run(tmp_path / "grpo_k2.jsonl")
    assert [r["step"] for r in rows] == [0, 1, 2] and rows[2]["pass1_synth_nodemo"] == 0.5
    assert "| grpo_k2 | synth_nodemo | 25.0 (step 0) | 50.0 (step 2) | +25.0 |" in lc.summary({"grpo_k2": rows})
    assert lc.main([str(tmp_path)]) == 0 and (tmp_path / "curves.png").stat().st_size > 0
