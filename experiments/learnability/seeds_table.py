"""The study's table over seeds: GRPO against SFT's plateau and against the equal-time SFT control, on both held-out
sets, with paired 95% confidence intervals, and whether the targets hold.

    python experiments/learnability/seeds_table.py OUT_DIR [--seeds 1,2,3] [--control-target 8] [--start-target 10]

OUT_DIR holds the ``seed_N/`` folders that run.py writes (`learnability.stages.SeedDir`): each seed's plateau decision
(``plateau.json``) and ``mrgrpo eval``'s per-problem records (``per_problem.csv``) of its three models, the plateau
checkpoint (*start*), the GRPO run's last checkpoint (*GRPO*) and the control (SFT continued from the plateau for
GRPO's training time), on ``val.parquet`` and ``val2.parquet``. Writes ``OUT_DIR/seeds_table.md`` (also printed),
``OUT_DIR/seeds_table.csv`` and, per seed, the curves of `learnability.learning_curves` (``seed_N/curves.png`` and a
CSV per GRPO run).

**Pairing.** A problem's pass (greedy pass@1: the final program passes the hidden tests) under model A and under
model B gives d_p = pass_A(p) - pass_B(p); differences are of the same problems (the intersection, which is every
problem unless a prompt was dropped as too long).

**Confidence intervals (95%).**

- One seed: mean(d) +- t(0.975, P-1) x sd(d) / sqrt(P) over its P problems: the paired t interval.
- Over S seeds: the seeds share the held-out problems, so the differences form a seeds x problems table d_sp (every
  problem under every seed), a two-way random-effects layout with one value a cell: d_sp = mu + seed_s + problem_p +
  residual_sp (the residual holds the seed x problem interaction). Its mean D has variance sigma_seed^2 / S +
  sigma_problem^2 / P + sigma_res^2 / (S P). From the mean squares MS_seed = P var(seed means), MS_problem =
  S var(problem means) and MS_res (the two-way residual, (S-1)(P-1) degrees of freedom), the ANOVA estimates are
  sigma_res^2 = MS_res, sigma_seed^2 = max(0, (MS_seed - MS_res) / P), sigma_problem^2 = max(0, (MS_problem -
  MS_res) / S); with both above zero Var(D) = (MS_seed + MS_problem - MS_res) / (S P). The interval is D +- t(0.975,
  df) sqrt(Var(D)), df by Satterthwaite from the mean squares that Var(D) is made of, rounded down. The seed term is
  the training randomness (S - 1 degrees of freedom: with 3 seeds and a real seed effect its t factor is large); the
  problem term is the draw of the held-out problems, which a mean of per-seed differences and its standard error
  alone would miss (the seeds share the problems).

**Targets** (no-demonstration split, the mean over seeds, on BOTH held-out sets): GRPO at least +8 points over the
control and at least +10 over the start, each with the interval's lower bound above zero; on the unseen statement
template GRPO's mean not below the start's. A seed that hit the SFT cap started from a checkpoint that is not at the
plateau: the target against the start is then not established.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the study is imported as `learnability`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from learnability import learning_curves as lc  # noqa: E402
from learnability.stages import HELDOUT, MODELS, SeedDir  # noqa: E402

NODEMO, UNSEEN = "synth_nodemo", "synth_unseen_template"
TABLE_MD, TABLE_CSV = "seeds_table.md", "seeds_table.csv"

Records = Mapping[str, Mapping[str, float]]  # split -> problem id -> pass (mean over its samples)


# ------------------------------------------------------------------ reading
def read_records(path: Path) -> dict[str, dict[str, float]]:
    """``mrgrpo eval``'s per_problem.csv -> split -> problem id -> pass (the final program's acc, averaged over the
    problem's samples)."""
    sums: dict[str, dict[str, list[float]]] = {}
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            sums.setdefault(row["data_source"], {}).setdefault(row["problem_id"], []).append(float(row["acc"]))
    return {split: {pid: sum(v) / len(v) for pid, v in by_id.items()} for split, by_id in sums.items()}


@dataclass(frozen=True)
class Seed:
    seed: int
    plateau: dict | None  # plateau.json, or None when the decision is not there
    records: dict[str, dict[str, Records]]  # heldout -> model -> records (only those found)


def read_seed(root: Path, seed: int) -> Seed:
    d = SeedDir(root, seed)
    plateau = json.loads(d.plateau_json.read_text()) if d.plateau_json.is_file() else None
    records: dict[str, dict[str, Records]] = {}
    for heldout in HELDOUT:
        for model in MODELS:
            if model == "start" and plateau is None:
                continue
            path = d.evaluation(model, heldout, plateau["step"] if plateau else None) / "per_problem.csv"
            if path.is_file():
                records.setdefault(heldout, {})[model] = read_records(path)
    return Seed(seed, plateau, records)


def seeds_in(out_dir: Path) -> list[int]:
    return sorted(int(m.group(1)) for p in out_dir.glob("seed_*") if p.is_dir()
                  and (m := re.fullmatch(r"seed_(\d+)", p.name)))


# ------------------------------------------------------------------ statistics
def _t_two_sided(t: float, nu: int) -> float:
    """P(|T| <= t) for Student's t with integer nu degrees of freedom (Abramowitz & Stegun 26.7.3-4)."""
    theta = math.atan(t / math.sqrt(nu))
    s, c = math.sin(theta), math.cos(theta)
    if nu % 2:
        if nu == 1:
            return 2 * theta / math.pi
        term = total = c
        for k in range(3, nu - 1, 2):
            term *= (k - 1) / k * c * c
            total += term
        return 2 / math.pi * (theta + s * total)
    term = total = 1.0
    for k in range(2, nu - 1, 2):
        term *= (k - 1) / k * c * c
        total += term
    return s * total


def t_quantile(df: float, level: float = 0.95) -> float:
    """The two-sided ``level`` quantile of Student's t (0.975 one-sided for 95%); ``df`` is rounded down (wider)."""
    nu = max(1, int(math.floor(df + 1e-9)))
    lo, hi = 0.0, 1e7
    for _ in range(64):  # 1e7 / 2^64: far below the 3 decimals shown
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _t_two_sided(mid, nu) < level else (lo, mid)
    return (lo + hi) / 2


def _var(xs: Sequence[float]) -> float:
    m = sum(xs) / len(xs)
    return sum((x - m) ** 2 for x in xs) / (len(xs) - 1)


@dataclass(frozen=True)
class Estimate:
    mean: float
    lo: float
    hi: float
    problems: int
    seeds: int
    df: float | None  # None: no spread at all (every difference the same)

    def shown(self) -> str:
        return f"{100 * self.mean:+.1f} [{100 * self.lo:+.1f}, {100 * self.hi:+.1f}]"


def paired(a: Mapping[str, float], b: Mapping[str, float]) -> Estimate:
    """A - B on the problems of both: the paired t interval over problems (one seed)."""
    return crossed([(a, b)])


def crossed(pairs: Sequence[tuple[Mapping[str, float], Mapping[str, float]]]) -> Estimate:
    """Mean over seeds and problems of A - B, one (A, B) pair of records per seed, on the problems every pair has;
    the interval of the module docstring (one seed: the paired t interval)."""
    common = set.intersection(*(set(a) & set(b) for a, b in pairs)) if pairs else set()
    if len(common) < 2:
        raise ValueError(f"a paired interval needs at least 2 problems in common, got {len(common)}")
    ids = sorted(common)
    d = [[a[p] - b[p] for p in ids] for a, b in pairs]
    s, n = len(d), len(ids)
    mean = sum(map(sum, d)) / (s * n)
    problem_means = [sum(row[j] for row in d) / s for j in range(n)]
    if s == 1:
        terms = [(_var(problem_means) / n, n - 1)]  # (variance, its degrees of freedom): the paired t interval
    else:
        seed_means = [sum(row) / n for row in d]
        ms_seed, ms_problem = n * _var(seed_means), s * _var(problem_means)
        ms_res = sum((d[i][j] - seed_means[i] - problem_means[j] + mean) ** 2 for i in range(s) for j in range(n)) / (
            (s - 1) * (n - 1))
        # Var(D) = sigma_seed^2/S + sigma_problem^2/P + sigma_res^2/(SP) with each component's ANOVA estimate kept
        # >= 0: a signed sum of the mean squares over (S P); a component at 0 drops its mean square and one MS_res
        seed_on, problem_on = ms_seed > ms_res, ms_problem > ms_res
        terms = [((1 - seed_on - problem_on) * ms_res / (s * n), (s - 1) * (n - 1)),
                 (seed_on * ms_seed / (s * n), s - 1), (problem_on * ms_problem / (s * n), n - 1)]
    v = sum(x for x, _ in terms)
    if v <= 1e-15:
        return Estimate(mean, mean, mean, n, s, None)
    df = v * v / sum(x * x / k for x, k in terms)
    half = t_quantile(df) * math.sqrt(v)
    return Estimate(mean, mean - half, mean + half, n, s, df)


# ------------------------------------------------------------------ the table
@dataclass(frozen=True)
class Row:
    heldout: str
    split: str
    seed: str  # "1", "2", ... or "mean"
    seeds: tuple[int, ...]  # the seeds in it
    start: float | None
    grpo: float | None
    control: float | None
    grpo_vs_control: Estimate | None
    grpo_vs_start: Estimate | None


def _level(records: Records, split: str, ids: set[str]) -> float:
    return sum(records[split][p] for p in ids) / len(ids)


def rows_for(seeds: Sequence[Seed], heldout: str, split: str) -> list[Row]:
    """One row per seed with all three models on ``heldout`` (levels on the problems all three have), then the mean
    row over those seeds."""
    rows, complete = [], []
    for sd in seeds:
        models = sd.records.get(heldout, {})
        if not all(m in models and split in models[m] for m in MODELS):
            rows.append(Row(heldout, split, str(sd.seed), (sd.seed,), *(None,) * 5))
            continue
        start, grpo, control = (models[m][split] for m in MODELS)
        ids = set(start) & set(grpo) & set(control)
        complete.append((sd.seed, start, grpo, control))
        rows.append(Row(heldout, split, str(sd.seed), (sd.seed,), _level(models["start"], split, ids),
                        _level(models["grpo"], split, ids), _level(models["control"], split, ids),
                        paired(grpo, control), paired(grpo, start)))
    if complete:
        per_seed = [r for r in rows if r.start is not None]
        rows.append(Row(heldout, split, "mean", tuple(c[0] for c in complete),
                        *(sum(getattr(r, k) for r in per_seed) / len(per_seed) for k in ("start", "grpo", "control")),
                        crossed([(g, c) for _, _, g, c in complete]), crossed([(g, s) for _, s, g, _ in complete])))
    return rows


def table(seeds: Sequence[Seed]) -> list[Row]:
    return [row for heldout in HELDOUT for split in (NODEMO, UNSEEN) for row in rows_for(seeds, heldout, split)]


def _mean_row(rows: Sequence[Row], heldout: str, split: str) -> Row | None:
    return next((r for r in rows if (r.heldout, r.split, r.seed) == (heldout, split, "mean")), None)


def targets(rows: Sequence[Row], seeds: Sequence[Seed], control_target: float = 0.08,
            start_target: float = 0.10) -> list[str]:
    """One plain line per target: whether it holds, with the numbers it rests on."""
    everyone = tuple(sd.seed for sd in seeds)
    capped = [sd.seed for sd in seeds if (sd.plateau or {}).get("status") == "cap"]
    lines = []

    def margin(what: str, attr: str, want: float, caveat: str = "") -> None:
        parts, ok = [], True
        for heldout in HELDOUT:
            row = _mean_row(rows, heldout, NODEMO)
            if row is None or row.seeds != everyone:
                have = ", ".join(map(str, row.seeds)) if row else "none"
                parts.append(f"{heldout}: incomplete (seeds with all three models: {have} of {len(everyone)})")
                ok = False
                continue
            est: Estimate = getattr(row, attr)
            good = est.mean >= want - 1e-9 and est.lo > 0
            ok = ok and good
            parts.append(f"{heldout}: {est.shown()} ({'yes' if good else 'no'})")
        verdict = "HOLDS" if ok and not caveat else ("NOT ESTABLISHED" if ok else "DOES NOT HOLD")
        lines.append(f"- GRPO >= +{100 * want:g} points over {what} on no-demo, mean of {len(everyone)} seed(s), "
                     f"lower bound > 0, both sets: **{verdict}** ({'; '.join(parts)}){caveat}")

    margin("the equal-time SFT control", "grpo_vs_control", control_target)
    margin("the SFT plateau (start)", "grpo_vs_start", start_target,
           f"; seed(s) {', '.join(map(str, capped))} hit the SFT cap: their start is NOT at the plateau" if capped
           else "")
    parts, ok = [], True
    for heldout in HELDOUT:
        row = _mean_row(rows, heldout, UNSEEN)
        if row is None or row.seeds != everyone:
            parts.append(f"{heldout}: incomplete")
            ok = False
            continue
        good = row.grpo_vs_start.mean >= 0
        ok = ok and good
        parts.append(f"{heldout}: GRPO - start {row.grpo_vs_start.shown()} ({'yes' if good else 'no'})")
    lines.append(f"- Unseen statement template: GRPO's mean not below the start's, both sets: "
                 f"**{'HOLDS' if ok else 'DOES NOT HOLD'}** ({'; '.join(parts)})")
    return lines


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def _est(e: Estimate | None) -> str:
    return "-" if e is None else e.shown()


def markdown(rows: Sequence[Row], seeds: Sequence[Seed], target_lines: Sequence[str]) -> str:
    plateau = {str(sd.seed): sd.plateau for sd in seeds}
    out = ["# GRPO against SFT's plateau and the equal-time SFT control, over seeds", "",
           "Greedy held-out pass@1 (%) of the plateau checkpoint (start), GRPO's last checkpoint and the control; "
           "differences in points with paired 95% intervals (per seed: over problems; mean: over seeds and problems, "
           "seeds_table.py says how).", "", "## Targets", "", *target_lines, "", "## SFT plateau per seed", "",
           "| seed | status | plateau checkpoint (step, no-demo pass@1 on val) | decided at step | why |",
           "|---|---|---|---|---|"]
    for sd in seeds:
        p = sd.plateau
        out.append(f"| {sd.seed} | not decided | | | |" if p is None else
                   f"| {sd.seed} | {'plateau' if p['status'] == 'plateau' else 'NOT AT PLATEAU (cap)'} | "
                   f"{p['step']}, {_pct(p['score'])} | {p['decided_at']} | {p['why']} |")
    for heldout in HELDOUT:
        out += ["", f"## {heldout}.parquet: no demonstration (beside it: unseen statement template)", "",
                "| seed | start | GRPO | control | GRPO - control | GRPO - start | unseen: start | unseen: GRPO | "
                "unseen: control | unseen: GRPO - start |", "|---|---|---|---|---|---|---|---|---|---|"]
        nodemo = [r for r in rows if (r.heldout, r.split) == (heldout, NODEMO)]
        unseen = {r.seed: r for r in rows if (r.heldout, r.split) == (heldout, UNSEEN)}
        for r in nodemo:
            u = unseen.get(r.seed)
            name = f"mean of {len(r.seeds)}" if r.seed == "mean" else r.seed
            if r.seed != "mean" and (plateau.get(r.seed) or {}).get("status") == "cap":
                name += " (not at plateau)"
            cells = [_pct(r.start), _pct(r.grpo), _pct(r.control), _est(r.grpo_vs_control), _est(r.grpo_vs_start)]
            cells += ([_pct(u.start), _pct(u.grpo), _pct(u.control), _est(u.grpo_vs_start)] if u else ["-"] * 4)
            out.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


CSV_COLUMNS = ("heldout", "split", "seed", "seeds", "plateau_step", "plateau_status", "start", "grpo", "control",
               "grpo_minus_control", "grpo_minus_control_lo", "grpo_minus_control_hi", "grpo_minus_start",
               "grpo_minus_start_lo", "grpo_minus_start_hi", "problems", "df")


def write_csv(rows: Sequence[Row], seeds: Sequence[Seed], path: Path) -> None:
    plateau = {str(sd.seed): sd.plateau or {} for sd in seeds}
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(CSV_COLUMNS)
        for r in rows:
            p = plateau.get(r.seed, {})
            e1, e2 = r.grpo_vs_control, r.grpo_vs_start
            w.writerow([r.heldout, r.split, r.seed, " ".join(map(str, r.seeds)), p.get("step", ""),
                        p.get("status", ""), r.start, r.grpo, r.control,
                        *((e1.mean, e1.lo, e1.hi) if e1 else ("", "", "")),
                        *((e2.mean, e2.lo, e2.hi) if e2 else ("", "", "")),
                        e1.problems if e1 else "", "" if e1 is None or e1.df is None else f"{e1.df:.1f}"])


def curves(seed_root: Path, seed: int) -> list[str]:
    """learning_curves' CSV per GRPO run and curves.png for one seed (its SFT checkpoints' evaluations, its GRPO
    runs, the control on val.parquet); the files written."""
    d = SeedDir(seed_root, seed)
    runs = {p.stem: lc.read_run(p) for p in sorted(d.root.glob("*.jsonl"))}
    if not runs:
        return []
    for name, rows in runs.items():
        lc.write_csv(rows, d.root / f"{name}.csv")
    control = d.evaluation("control", "val") / "summary.json"
    lc.plot(runs, d.root / "curves.png", lc.read_sft_evals(d.root),
            lc.read_eval(control) if control.is_file() else None)
    return [*(f"{name}.csv" for name in runs), "curves.png"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", type=Path, help="the study's OUT_DIR, with its seed_N/ folders")
    ap.add_argument("--seeds", default=None, help="comma-separated: the seeds of the table (default: every seed_N/)")
    ap.add_argument("--control-target", type=float, default=8, help="points over the control (default: 8)")
    ap.add_argument("--start-target", type=float, default=10, help="points over the start (default: 10)")
    args = ap.parse_args(argv)
    found = seeds_in(args.out_dir) if args.seeds is None else [int(x) for x in args.seeds.split(",")]
    missing = [n for n in found if not (args.out_dir / f"seed_{n}").is_dir()]
    if not found or missing:
        raise SystemExit(f"no seed_N/ folder in {args.out_dir}" if not found else
                         f"no folder for seed(s) {', '.join(map(str, missing))} in {args.out_dir}")
    seeds = [read_seed(args.out_dir / f"seed_{n}", n) for n in found]
    rows = table(seeds)
    text = markdown(rows, seeds, targets(rows, seeds, args.control_target / 100, args.start_target / 100))
    (args.out_dir / TABLE_MD).write_text(text)
    write_csv(rows, seeds, args.out_dir / TABLE_CSV)
    written = [TABLE_MD, TABLE_CSV]
    for n in found:
        written += [f"seed_{n}/{f}" for f in curves(args.out_dir / f"seed_{n}", n)]
    print(text)
    print(f"wrote {', '.join(written)} to {args.out_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
