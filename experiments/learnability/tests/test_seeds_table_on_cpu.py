"""The table over seeds (learnability.seeds_table) on synthetic per-problem records: the t quantile, the paired
intervals (one seed, and crossed seeds x problems), the rows, the target lines and the files."""

from __future__ import annotations

import csv
import json
import math
import random

import pytest

from learnability import seeds_table as t
from learnability.stages import SeedDir

SPLITS = ("synth_seen", t.NODEMO, t.UNSEEN)


def test_t_quantiles_match_the_tables():
    for df, want in ((1, 12.706), (2, 4.303), (3, 3.182), (10, 2.228), (29, 2.045), (299, 1.968), (2.7, 4.303)):
        assert t.t_quantile(df) == pytest.approx(want, abs=1e-3), df


def test_one_seed_is_the_paired_t_interval():
    a = {"p1": 1, "p2": 1, "p3": 0, "p4": 1, "p5": 0, "only_a": 1}
    b = {"p1": 0, "p2": 1, "p3": 0, "p4": 0, "p5": 1, "only_b": 0}
    e = t.paired(a, b)
    d = [1, 0, 0, 1, -1]  # on the 5 problems of both
    mean = sum(d) / 5
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / 4)
    half = 2.776 * sd / math.sqrt(5)  # t(0.975, 4)
    assert (e.problems, e.seeds, e.df) == (5, 1, 4)
    assert e.mean == pytest.approx(mean) and e.lo == pytest.approx(mean - half, abs=1e-3)
    assert e.hi == pytest.approx(mean + half, abs=1e-3)


def test_no_spread_gives_a_point_and_too_few_problems_are_refused():
    e = t.paired({"a": 1, "b": 1}, {"a": 0, "b": 0})
    assert (e.mean, e.lo, e.hi, e.df) == (1, 1, 1, None)
    with pytest.raises(ValueError, match="at least 2 problems"):
        t.paired({"a": 1}, {"a": 0})


def _var(xs):
    m = sum(xs) / len(xs)
    return sum((x - m) ** 2 for x in xs) / (len(xs) - 1)


def test_over_seeds_the_variance_is_the_two_way_anova_one():
    """A seed effect and problems that gain under every seed: Var(D) = (MS_seed +
    MS_problem - MS_res) / (S P), Satterthwaite's degrees of freedom."""
    rng = random.Random(0)
    ids = [f"p{i}" for i in range(40)]
    pairs = []
    for s in range(3):  # the first 20 problems: A gains on most under every seed; the rest: A gains with the seed
        a = {p: float(i < 20 and rng.random() < 0.9 or rng.random() < 0.15 * s) for i, p in enumerate(ids)}
        b = {p: float(i >= 20 and rng.random() < 0.3) for i, p in enumerate(ids)}
        pairs.append((a, b))
    e = t.crossed(pairs)
    d = [[a[p] - b[p] for p in ids] for a, b in pairs]
    rows, cols = [sum(r) / 40 for r in d], [sum(r[j] for r in d) / 3 for j in range(40)]
    grand = sum(rows) / 3
    ms_seed, ms_problem = 40 * _var(rows), 3 * _var(cols)
    ms_res = sum((d[i][j] - rows[i] - cols[j] + grand) ** 2 for i in range(3) for j in range(40)) / (2 * 39)
    assert ms_seed > ms_res and ms_problem > ms_res  # both components present in this draw
    v = (ms_seed + ms_problem - ms_res) / 120
    df = v * v / ((ms_seed / 120) ** 2 / 2 + (ms_problem / 120) ** 2 / 39 + (ms_res / 120) ** 2 / 78)
    half = t.t_quantile(df) * math.sqrt(v)
    assert e.mean == pytest.approx(grand) and e.df == pytest.approx(df)
    assert (e.lo, e.hi) == (pytest.approx(grand - half), pytest.approx(grand + half))
    assert (e.problems, e.seeds) == (40, 3)


def test_seeds_that_agree_leave_only_the_problem_term():
    """Three identical seeds: the seeds add nothing; the interval is the one-seed interval's mean with the problem
    means' variance (the same numbers here)."""
    a = {f"p{i}": float(i % 3 == 0) for i in range(30)}
    b = {f"p{i}": float(i % 5 == 0) for i in range(30)}
    one, three = t.paired(a, b), t.crossed([(a, b)] * 3)
    assert three.mean == pytest.approx(one.mean) and three.lo == pytest.approx(one.lo)
    assert three.hi == pytest.approx(one.hi)


@pytest.mark.parametrize("seed_sd", [0.0, 0.05])
def test_the_crossed_interval_covers_the_truth_95_percent_of_the_time(seed_sd):
    """Simulated: a true gain of 10 points on average over problems and seeds, problems of varying difficulty (a
    new draw each time), a seed effect of sd 0 or 5 points; the interval over 3 seeds and 200 problems holds the
    true gain in 93-99% of 400 draws."""
    rng = random.Random(1)
    covered = 0
    for _ in range(400):
        base = [rng.uniform(0.1, 0.7) for _ in range(200)]
        pairs = []
        for _s in range(3):
            shift = 0.10 + rng.gauss(0, seed_sd) if seed_sd else 0.10
            a = {i: float(rng.random() < p + shift) for i, p in enumerate(base)}
            b = {i: float(rng.random() < p) for i, p in enumerate(base)}
            pairs.append((a, b))
        e = t.crossed(pairs)
        covered += e.lo <= 0.10 <= e.hi
    assert 0.93 <= covered / 400 <= 0.99


# ------------------------------------------------------------------ rows, targets, files
def _records(rng, level: float, n: int = 300) -> dict:
    """split -> problem -> pass: problem i of a split has a difficulty u_i shared by every model and seed (the same
    ids, the same draw), and a model of ``level`` (jittered by seed) passes the problems with u_i < its level."""
    jitter = rng.gauss(0, 0.02)
    return {split: {f"{split}-{i}": float(random.Random(f"{split}-{i}").random() < level + jitter) for i in range(n)}
            for split in SPLITS}


def _seed(n: int, start: float, grpo: float, control: float, status: str = "plateau", drop=()) -> t.Seed:
    rng = random.Random(n)
    records = {h: {m: _records(rng, level) for m, level in (("start", start), ("grpo", grpo), ("control", control))
                   if (h, m) not in drop} for h in ("val", "val2")}
    plateau = {"status": status, "step": 2000, "score": start, "decided_at": 3000, "why": "w"}
    return t.Seed(n, plateau, records)


def test_a_clear_gain_holds_every_target():
    seeds = [_seed(n, 0.30, 0.60, 0.35) for n in (1, 2, 3)]
    rows = t.table(seeds)
    mean = next(r for r in rows if (r.heldout, r.split, r.seed) == ("val2", t.NODEMO, "mean"))
    assert mean.seeds == (1, 2, 3) and 0.2 < mean.grpo_vs_control.mean < 0.3 and mean.grpo_vs_control.lo > 0
    assert mean.start == pytest.approx(sum(r.start for r in rows if (r.heldout, r.split) == ("val2", t.NODEMO)
                                           and r.seed != "mean") / 3)
    lines = t.targets(rows, seeds)
    assert len(lines) == 3 and all("**HOLDS**" in line for line in lines), lines


def test_a_small_gain_does_not_hold_and_a_capped_seed_is_not_established():
    seeds = [_seed(n, 0.30, 0.34, 0.32) for n in (1, 2, 3)]
    lines = t.targets(t.table(seeds), seeds)
    assert "**DOES NOT HOLD**" in lines[0] and "**DOES NOT HOLD**" in lines[1]
    seeds = [_seed(1, 0.30, 0.60, 0.35), _seed(2, 0.30, 0.60, 0.35, status="cap"), _seed(3, 0.30, 0.60, 0.35)]
    lines = t.targets(t.table(seeds), seeds)
    assert "**HOLDS**" in lines[0]  # against the control: the cap does not matter
    assert "**NOT ESTABLISHED**" in lines[1] and "seed(s) 2 hit the SFT cap" in lines[1]


def test_the_unseen_template_must_not_fall_below_the_start():
    seeds = [_seed(n, 0.30, 0.60, 0.35) for n in (1, 2)]
    for sd in seeds:  # GRPO worse than the start on the unseen template of val2
        sd.records["val2"]["grpo"][t.UNSEEN] = {p: 0.0 for p in sd.records["val2"]["start"][t.UNSEEN]}
    lines = t.targets(t.table(seeds), seeds)
    assert "**HOLDS**" in lines[0] and "**DOES NOT HOLD**" in lines[2] and "val2: GRPO - start" in lines[2]


def test_a_seed_without_all_models_is_shown_and_left_out_of_the_mean():
    seeds = [_seed(1, 0.30, 0.60, 0.35), _seed(2, 0.30, 0.60, 0.35, drop=[("val2", "control")])]
    rows = t.table(seeds)
    r2 = next(r for r in rows if (r.heldout, r.split, r.seed) == ("val2", t.NODEMO, "2"))
    assert r2.start is None and r2.grpo_vs_control is None
    mean = next(r for r in rows if (r.heldout, r.split, r.seed) == ("val2", t.NODEMO, "mean"))
    assert mean.seeds == (1,)
    lines = t.targets(rows, seeds)
    assert "incomplete (seeds with all three models: 1 of 2)" in lines[0] and "**DOES NOT HOLD**" in lines[0]
    text = t.markdown(rows, seeds, lines)
    assert "| 2 | - | - | - | - | - |" in text


def _write_eval(out, records):
    out.mkdir(parents=True)
    with (out / "per_problem.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["problem_id", "data_source", "sample", "acc"])
        w.writeheader()
        for split, by_id in records.items():
            for pid, acc in by_id.items():
                w.writerow({"problem_id": pid, "data_source": split, "sample": 0, "acc": acc})


def test_the_command_reads_the_seed_folders_and_writes_the_table(tmp_path, capsys):
    for n in (1, 2):
        sd, d = _seed(n, 0.30, 0.60, 0.35, status="cap" if n == 2 else "plateau"), SeedDir(tmp_path / f"seed_{n}", n)
        d.root.mkdir()
        d.plateau_json.write_text(json.dumps(sd.plateau))
        for heldout, models in sd.records.items():
            for model, records in models.items():
                _write_eval(d.evaluation(model, heldout, 2000), records)
        (d.root / "grpo_k2.jsonl").write_text(json.dumps(
            {"step": 0, "data": {"val-core/synth_nodemo/acc/mean@1": 0.3, "timing_s/step": 1.0}}) + "\n")
    assert t.main([str(tmp_path)]) == 0
    text = (tmp_path / "seeds_table.md").read_text()
    assert text in capsys.readouterr().out
    assert "## val2.parquet: no demonstration" in text and "| mean of 2 |" in text
    assert "| 2 | NOT AT PLATEAU (cap) | 2000, 30.0 |" in text and "2 (not at plateau)" in text
    rows = list(csv.DictReader((tmp_path / "seeds_table.csv").open()))
    assert {(r["heldout"], r["split"], r["seed"]) for r in rows} >= {("val", t.NODEMO, "mean"),
                                                                    ("val2", t.UNSEEN, "2")}
    assert (tmp_path / "seed_1/curves.png").is_file() and (tmp_path / "seed_2/grpo_k2.csv").is_file()
    assert t.main([str(tmp_path), "--seeds", "1"]) == 0  # the seeds asked for, not every folder
    assert "| mean of 1 |" in (tmp_path / "seeds_table.md").read_text()
    with pytest.raises(SystemExit, match="no folder for seed"):
        t.main([str(tmp_path), "--seeds", "1,5"])
    # per_problem.csv is read per problem: pass = the mean acc of its samples
    assert t.read_records(tmp_path / "seed_1/eval/grpo_val2/per_problem.csv")[t.NODEMO]
