"""The learnability study's splits and its curves: pure functions of ids and of verl's JSONL."""

from __future__ import annotations

import json

from learnability.data import VAL_SOURCES, select_records, split_of
from learnability.synth import generate, synth_split


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


def test_learning_curves_read_either_trainers_dashboard_names(tmp_path):
    from learnability import learning_curves as lc
    lines = [{"step": 1, "data": {"mrgrpo/fix_rate": 0.1}}, {"step": 2, "data": {"timing_s/mrgrpo/fix_rate": 0.2}}]
    (tmp_path / "run.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert [r["fix_rate"] for r in lc.read_run(tmp_path / "run.jsonl")] == [0.1, 0.2]


def test_learning_curves_read_verls_file_logger(tmp_path):
    from learnability import learning_curves as lc
    lines = [{"step": 0, "data": {"val-core/synth_nodemo/acc/mean@1": 0.25}},
             {"step": 1, "data": {"critic/score/mean": 0.5, "mrgrpo/fix_rate": 0.1}},
             {"step": 2, "data": {"critic/score/mean": 0.7, "val-core/synth_nodemo/acc/mean@1": 0.5}}]
    (tmp_path / "grpo_k2.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    rows = lc.read_run(tmp_path / "grpo_k2.jsonl")
    assert [r["step"] for r in rows] == [0, 1, 2] and rows[2]["pass1_synth_nodemo"] == 0.5
    assert "| grpo_k2 | synth_nodemo | 25.0 (step 0) | 50.0 (step 2) | +25.0 |" in lc.summary({"grpo_k2": rows})
    assert lc.main([str(tmp_path)]) == 0 and (tmp_path / "curves.png").stat().st_size > 0
    # the no-demonstration panel shows what SFT got as levels to beat: its best checkpoint and the control
    sft = [{"step": 1000, "pass1_synth_nodemo": 0.2}, {"step": 1500, "pass1_synth_nodemo": 0.3}]
    fig = lc.plot({"grpo_k2": rows}, tmp_path / "c.png", sft, {"pass1_synth_nodemo": 0.25})
    nodemo_ax = fig.axes[-1]
    levels = {line.get_label(): line.get_ydata()[0] for line in nodemo_ax.get_lines() if line.get_label() != "grpo_k2"}
    assert levels == {"best SFT checkpoint 30.0%": 0.3, "SFT control (equal wall time) 25.0%": 0.25}
    fig = lc.plot({"grpo_k2": rows}, tmp_path / "d.png")
    assert [line.get_label() for line in fig.axes[-1].get_lines()] == ["grpo_k2"]  # no SFT side: no levels


def test_rl_train_holds_every_nodemo_row_and_ratio_times_as_many_demonstrated(tmp_path):
    import pyarrow.parquet as pq

    from mrgrpo.apps import Problem, read_problems
    from mrgrpo.data.build import make_row, parquet_bytes
    from mrgrpo.data.validate import public_tests_json

    from learnability.data import write_splits
    from learnability.synth import write_jsonl

    src = write_jsonl(generate(400, seed=7), tmp_path / "s.jsonl")
    rows = []
    for i, p in enumerate(x for x in read_problems(src) if isinstance(x, Problem)):
        rows.append(make_row(p, {"public_tests": public_tests_json(p, 2), "n_public": 2, "special": []}, "", "",
                             "train", i))
    (tmp_path / "prepared").mkdir()
    (tmp_path / "prepared" / "train.parquet").write_bytes(parquet_bytes(rows))
    counts = write_splits(tmp_path / "prepared", tmp_path, n_eval=50, rl_demo_ratio=1.0)
    train = pq.read_table(tmp_path / "rl" / "train.parquet").to_pylist()
    kinds = [split_of(r["extra_info"]["source_id"]) for r in train]
    assert kinds.count("rl") == counts["rl"] > 0 and kinds.count("sft_rl") == counts["rl"]
    val = pq.read_table(tmp_path / "rl" / "val.parquet").to_pylist()
    assert {r["data_source"] for r in val} <= set(VAL_SOURCES)
    assert not {r["extra_info"]["source_id"] for r in val} & {r["extra_info"]["source_id"] for r in train}


def _eval_summary(nodemo: float, seen: float) -> dict:
    def block(p):
        return {"final": {"pass@1": p}, "attempt1": {"pass@1": p / 2}}

    return {"by_data_source": {"synth_nodemo": block(nodemo), "synth_seen": block(seen), "other": block(1.0)}}


def test_learning_curves_sft_plateau_and_headline(tmp_path):
    from learnability import learning_curves as lc
    for step, nodemo in ((200, 0.10), (800, 0.20), (1200, 0.21)):
        (tmp_path / f"sft_eval/step_{step}").mkdir(parents=True)
        (tmp_path / f"sft_eval/step_{step}/summary.json").write_text(json.dumps(_eval_summary(nodemo, 0.5)))
    rows = lc.read_sft_evals(tmp_path)
    assert [r["step"] for r in rows] == [200, 800, 1200]
    assert rows[1]["pass1_synth_nodemo"] == 0.20 and rows[1]["attempt1_pass1_synth_nodemo"] == 0.10
    assert "pass1_other" not in rows[0]
    p = lc.plateau(rows, "synth_nodemo")
    assert (p["ref_step"], p["last_step"], p["flat"]) == (800, 1200, True)
    assert lc.plateau(rows[:2], "synth_nodemo")["flat"] is False  # 10 -> 20: still rising
    exact = [{"step": 1000, "pass1_x": 88 / 300}, {"step": 1500, "pass1_x": 94 / 300}]
    assert lc.plateau(exact, "x")["flat"] is True  # exactly 2 points (float subtraction gives 2.0000000000000018)
    assert lc.plateau(exact[:1] + [{"step": 1500, "pass1_x": 95 / 300}], "x")["flat"] is False
    # from the GRPO start: that checkpoint against the first at >= 1.5x its steps, whatever comes after
    curve = [{"step": st, "pass1_x": v} for st, v in ((1500, 0.38), (2000, 0.40), (2500, 0.38), (3000, 0.39),
                                                       (3800, 0.47))]
    p = lc.plateau(curve, "x", start=2000)
    assert (p["ref_step"], p["last_step"], p["flat"]) == (2000, 3000, True) and abs(p["spread"] - 0.09) < 1e-9
    assert lc.plateau(curve, "x")["flat"] is False  # 2500 -> 3800: the late jump
    assert lc.plateau(curve, "x", start=2500)["last_step"] == 3800  # 3750 not evaluated: the next one
    assert lc.plateau(curve, "x", start=1000) is None and lc.plateau(curve, "x", start=3000) is None
    grpo = [{"step": 0, "pass1_synth_nodemo": 0.21}, {"step": 30, "pass1_synth_nodemo": 0.35}]
    table = lc.headline({"grpo_k2": grpo}, rows, {"pass1_synth_nodemo": 0.25})
    assert "| grpo_k2 | 35.0 | +14.0 | +10.0 |" in table
    assert "n/a" in lc.headline({"grpo_k2": grpo}, rows, None)
    # against the BEST SFT checkpoint, not the last one: a noisy high point in the middle counts for SFT
    bumpy = rows[:1] + [{"step": 800, "pass1_synth_nodemo": 0.27}] + rows[2:]
    table = lc.headline({"grpo_k2": grpo}, bumpy, None)
    assert "| grpo_k2 | 35.0 | +8.0 | n/a |" in table and "step 800 of 200, 800, 1200" in table


def test_learning_curves_put_the_control_on_the_sft_curve(tmp_path):
    """The control is the SFT run's last checkpoint: with its step known (sft_more_eval/step, or --control-step),
    the plateau check ends there and the control counts among the SFT checkpoints."""
    from learnability import learning_curves as lc
    for step, nodemo in ((1000, 0.20), (1500, 0.30)):
        (tmp_path / f"sft_eval/step_{step}").mkdir(parents=True)
        (tmp_path / f"sft_eval/step_{step}/summary.json").write_text(json.dumps(_eval_summary(nodemo, 0.5)))
    (tmp_path / "sft_more_eval").mkdir()
    (tmp_path / "sft_more_eval/summary.json").write_text(json.dumps(_eval_summary(0.31, 0.5)))
    (tmp_path / "sft_more_eval/step").write_text("2400\n")
    assert lc.main([str(tmp_path)]) == 0
    steps = [line.split(",")[0] for line in (tmp_path / "sft_eval.csv").read_text().splitlines()[1:]]
    assert steps == ["1000", "1500", "2400"]
    rows = lc.with_control(lc.read_sft_evals(tmp_path), lc.read_eval(tmp_path / "sft_more_eval/summary.json"), 2400)
    p = lc.plateau(rows, "synth_nodemo")  # 1500 is the latest at or before 2/3 of 2400: at least a further 50%
    assert (p["ref_step"], p["last_step"], p["flat"]) == (1500, 2400, True)
    p = lc.plateau(rows[:1] + rows[2:], "synth_nodemo")  # none at or before 1600 but 1000: from there
    assert (p["ref_step"], p["flat"]) == (1000, False)
    assert lc.main([str(tmp_path), "--control-step", "3000"]) == 0
    steps = [line.split(",")[0] for line in (tmp_path / "sft_eval.csv").read_text().splitlines()[1:]]
    assert steps == ["1000", "1500", "3000"]


def test_learning_curves_compare_runs_and_tell_whether_they_share_a_start(tmp_path):
    from learnability import learning_curves as lc

    def run(name, first0, nodemo0, nodemo20):
        lines = [{"step": 0, "data": {"val-core/synth_nodemo/acc/mean@1": nodemo0,
                                      "val-aux/synth_nodemo/first_public_pass/mean@1": first0}},
                 {"step": 10, "data": {"val-core/synth_nodemo/acc/mean@1": 0.3}},  # the other run has no step 10
                 {"step": 20, "data": {"val-core/synth_nodemo/acc/mean@1": nodemo20,
                                       "val-aux/synth_nodemo/first_public_pass/mean@1": 0.4}}]
        if name == "grpo_k2":
            del lines[1]
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
        return lc.read_run(tmp_path / f"{name}.jsonl")

    runs = {"grpo_k2": run("grpo_k2", 0.20, 0.25, 0.40), "grpo_k2_attempt": run("grpo_k2_attempt", 0.2033, 0.25, 0.5),
            "grpo_k0": run("grpo_k0", 0.30, 0.31, 0.45)}
    table = lc.compare(runs, "grpo_k2", n_val=300)
    # at the last common validation step (20), with the binomial SE of the difference over 300 problems a split
    assert "| grpo_k2_attempt | synth_nodemo | 20 | 50.0 | 40.0 | +10.0 ± 4.0 | +25.0 / +15.0 | 40.0 / 40.0 |" in table
    assert "grpo_k2_attempt: same start as grpo_k2" in table  # one problem of 300 flipped: the same SFT model
    assert "grpo_k0: NOT the same start as grpo_k2" in table and "compare gains, not levels" in table
    assert lc.compare(runs, "missing") == ""
    assert "no validation step in common" in lc.compare({**runs, "x": [{"step": 5, "pass1_synth_nodemo": 0.1}]},
                                                        "grpo_k2")
