"""Curves of the learnability runs: verl's `file` logger JSONL (one line per step) -> CSV + PNG + a summary table.

    python experiments/learnability/learning_curves.py RUNS_DIR [--out DIR] [--baseline grpo_k2] [--val-n 300]

RUNS_DIR holds ``<run>.jsonl`` files written by the study's GRPO stages (``VERL_FILE_LOGGER_PATH``): one seed's folder
of the entry point run.py (OUT_DIR/seed_N, whose curves its ``table`` stage draws with these functions through
`learnability.seeds_table`), or the folder of an earlier run (docs/results/learning/). For each run it writes
``<run>.csv`` with the columns below (one row per logged step; empty where a step did not log that metric) and
``curves.png`` with held-out pass@1 per split, reward, attempts, fix rate, response length and step time against the
step. Validation metrics are verl's ``val-core/<data_source>/acc/mean@1`` (greedy pass@1 on that split) and
``val-aux/<data_source>/...``.

The SFT side: ``sft_eval/step_N/summary.json`` (the checkpoints' evaluations) and, in earlier runs' folders,
``sft_more_eval/summary.json`` (the control) (`mrgrpo eval`, greedy pass@1 per split) become ``sft_eval.csv``, a
plateau check of the curve (pass@1 of the last checkpoint within 2 points of the latest checkpoint at or before 2/3 of
its steps, i.e. flat over a further 50% of steps or more; the study's stopping rule is `learnability.plateau`'s) and
the headline table: the no-demonstration split's pass@1 after GRPO against the best SFT checkpoint evaluated (the
plateau, taken at its highest, which favours SFT: +10 points wanted) and against the SFT continuation control (+8
points wanted).
The control is an SFT checkpoint too: its step (``--control-step``, else ``sft_more_eval/step`` as
earlier runs wrote it) puts it on the SFT curve, so the plateau check reaches the last SFT step trained. With the
step GRPO started from (``--start-step``, else ``sft_more_eval/start``) the check is also made of that checkpoint
against the first one at 1.5x its steps or more: is the start itself at the plateau.

With several runs, each is compared with ``--baseline`` (default ``grpo_k2``) at their last common validation step
(`compare`): pass@1 per split with the difference's standard error, gains since step 0, first-attempt public pass,
and whether the two started from the same SFT model.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

SPLITS = ("synth_seen", "synth_nodemo", "synth_unseen_template")
COLUMNS = {
    "reward": "critic/score/mean",
    "train_acc": "mrgrpo/acc",
    "attempts": "mrgrpo/attempts/mean",
    "first_public_pass": "mrgrpo/first_public_pass",
    "fix_rate": "mrgrpo/fix_rate",
    "model_tokens": "mrgrpo/tokens/model/mean",
    "response_length": "response_length/mean",
    "step_time_s": "timing_s/step",
    "gen_time_s": "timing_s/gen",
    "sandbox_p50_s": "mrgrpo/sandbox/public_s/p50",
    "sandbox_p99_s": "mrgrpo/sandbox/public_s/p99",
    "sandbox_wait_max_s": "mrgrpo/sandbox/trajectory_s/max",
    "verdict_TLE": "mrgrpo/verdict/TLE",
    "verdict_INFRA": "mrgrpo/verdict/INFRA",
    "infra_rate": "mrgrpo/infra/rate",
}
for _split in SPLITS:
    COLUMNS[f"pass1_{_split}"] = f"val-core/{_split}/acc/mean@1"
    COLUMNS[f"val_fix_rate_{_split}"] = f"val-aux/{_split}/fixed/mean@1"
    COLUMNS[f"val_first_{_split}"] = f"val-aux/{_split}/first_public_pass/mean@1"


def read_run(path: Path) -> list[dict]:
    """Rows of (step, column -> value) from one verl JSONL; several lines of one step are merged."""
    by_step: dict[int, dict] = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{n}: not JSON: {exc}") from None
        step, data = int(item["step"]), item["data"]
        row = by_step.setdefault(step, {"step": step})
        for col, key in COLUMNS.items():
            # The recipe's trainer (use_v1=false) logs the mrgrpo dashboard as timing_s/mrgrpo/...
            for name in (key, f"timing_s/{key}") if key.startswith("mrgrpo/") else (key,):
                if data.get(name) is not None:
                    row[col] = float(data[name])
    return [by_step[s] for s in sorted(by_step)]


def write_csv(rows: list[dict], path: Path) -> None:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["step", *COLUMNS])
        w.writeheader()
        for row in rows:
            w.writerow(row)


def plot(runs: dict[str, list[dict]], path: Path, sft_rows: list[dict] = (), control: dict | None = None):
    """Writes the curves to `path`; returns the matplotlib figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("held-out pass@1 (greedy)", [f"pass1_{s}" for s in SPLITS]), ("train reward", ["reward"]),
              ("attempts / trajectory", ["attempts"]), ("fix rate (train)", ["fix_rate"]),
              ("model tokens / trajectory", ["model_tokens"]), ("step time (s)", ["step_time_s"])]
    fig, axes = plt.subplots(2, 4, figsize=(20, 8))
    sft_ax, nodemo_ax = axes.flat[-2:]
    for name, rows in runs.items():  # the split only RL can learn, one line per run
        pts = [(r["step"], r["pass1_synth_nodemo"]) for r in rows if "pass1_synth_nodemo" in r]
        if pts:
            nodemo_ax.plot(*zip(*pts, strict=True), marker="o", ms=3, label=name)
    # what SFT got on that split: its best checkpoint and the equal-wall-time control, as levels to beat
    best = (best_sft(sft_rows, "synth_nodemo") or {}).get("pass1_synth_nodemo")
    for level, style, label in ((best, ":", "best SFT checkpoint"),
                                ((control or {}).get("pass1_synth_nodemo"), "--", "SFT control (equal wall time)")):
        if level is not None:
            nodemo_ax.axhline(level, color="gray", ls=style, lw=1, label=f"{label} {100 * level:.1f}%")
    nodemo_ax.set_title("held-out pass@1, no-demonstration split")
    nodemo_ax.set_xlabel("step")
    nodemo_ax.grid(alpha=0.3)
    if nodemo_ax.get_legend_handles_labels()[0]:
        nodemo_ax.legend(fontsize=7)
    for split in SPLITS:  # the SFT warm start's plateau curve: held-out pass@1 of its checkpoints
        pts = [(r["step"], r[f"pass1_{split}"]) for r in sft_rows if f"pass1_{split}" in r]
        if pts:
            sft_ax.plot(*zip(*pts, strict=True), marker="o", ms=3, label=split.removeprefix("synth_"))
    sft_ax.set_title("SFT checkpoints: held-out pass@1 (greedy)")
    sft_ax.set_xlabel("SFT step")
    sft_ax.grid(alpha=0.3)
    if sft_rows:
        sft_ax.legend(fontsize=7)
    else:
        sft_ax.axis("off")
    for ax, (title, cols) in zip(list(axes.flat)[:-2], panels, strict=True):
        for name, rows in runs.items():
            for col in cols:
                pts = [(r["step"], r[col]) for r in rows if col in r]
                if pts:
                    label = name if len(cols) == 1 else f"{name} {col.removeprefix('pass1_synth_')}"
                    ax.plot(*zip(*pts, strict=True), marker="o" if len(pts) < 20 else None, ms=3, label=label)
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return fig


def summary(runs: dict[str, list[dict]]) -> str:
    lines = ["| run | split | pass@1 first eval | pass@1 last eval | change (points) |", "|---|---|---|---|---|"]
    for name, rows in runs.items():
        for split in SPLITS:
            pts = [(r["step"], r[f"pass1_{split}"]) for r in rows if f"pass1_{split}" in r]
            if pts:
                (s0, a0), (s1, a1) = pts[0], pts[-1]
                lines.append(f"| {name} | {split} | {100 * a0:.1f} (step {s0}) | {100 * a1:.1f} (step {s1}) | "
                             f"{100 * (a1 - a0):+.1f} |")
    waits = [r["sandbox_wait_max_s"] / r["step_time_s"] for rows in runs.values() for r in rows
             if "sandbox_wait_max_s" in r and r.get("step_time_s")]
    if waits:
        waits.sort()
        lines.append(f"\nsandbox share of the step (bound: slowest trajectory's sandbox wait / step time): median "
                     f"{100 * waits[len(waits) // 2]:.1f}%, max {100 * waits[-1]:.1f}% over {len(waits)} steps")
    return "\n".join(lines)


def read_eval(path: Path) -> dict:
    """pass@1 (final and first attempt) per split from one `mrgrpo eval` summary.json."""
    try:
        summary_json = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a readable mrgrpo eval summary: {exc}") from None
    row = {}
    for split, block in summary_json.get("by_data_source", {}).items():
        if split in SPLITS:
            row[f"pass1_{split}"] = block["final"]["pass@1"]
            row[f"attempt1_pass1_{split}"] = block["attempt1"]["pass@1"]
    return row


def read_sft_evals(runs_dir: Path) -> list[dict]:
    """One row per evaluated SFT checkpoint (sft_eval/step_N/summary.json), by step."""
    rows = []
    for path in runs_dir.glob("sft_eval/step_*/summary.json"):
        rows.append({"step": int(path.parent.name.removeprefix("step_")), **read_eval(path)})
    return sorted(rows, key=lambda r: r["step"])


def best_sft(sft_rows: list[dict], split: str) -> dict | None:
    """The SFT checkpoint with the highest pass@1 on `split` (the plateau taken at its highest), or None."""
    col = f"pass1_{split}"
    return max((r for r in sft_rows if col in r), key=lambda r: r[col], default=None)


def with_control(sft_rows: list[dict], control: dict | None, control_step: int | None) -> list[dict]:
    """The SFT curve with the control on it as its checkpoint at `control_step` (when both are known)."""
    if not control or control_step is None:
        return sft_rows
    return sorted([r for r in sft_rows if r["step"] != control_step] + [{"step": control_step, **control}],
                  key=lambda r: r["step"])


def plateau(sft_rows: list[dict], split: str, tolerance: float = 0.02, start: int | None = None) -> dict | None:
    """Flat within `tolerance` over a further 50% of steps or more. Without `start`: the last checkpoint against the
    latest one at or before 2/3 of its steps (the first one if none is). With `start` (the SFT step GRPO started
    from): that checkpoint against the first one at or after 1.5x its steps, the issue's test of the start itself;
    None when either is not evaluated. `spread` is the largest minus the smallest pass@1 from the reference on."""
    pts = [(r["step"], r[f"pass1_{split}"]) for r in sft_rows if f"pass1_{split}" in r]
    if start is None:
        if len(pts) < 2:
            return None
        last_step, last = pts[-1]
        early = [p for p in pts[:-1] if 3 * p[0] <= 2 * last_step]
        ref_step, ref = early[-1] if early else pts[0]
    else:
        ref = dict(pts).get(start)
        later = [p for p in pts if 2 * p[0] >= 3 * start]
        if ref is None or not later:
            return None
        ref_step, (last_step, last) = start, later[0]
    after = [v for s, v in pts if s >= ref_step]
    return {"split": split, "ref_step": ref_step, "ref": ref, "last_step": last_step, "last": last,
            "flat": abs(last - ref) <= tolerance + 1e-9,  # 94/300 - 88/300 is 2 points, not 2.0000000000000018
            "spread": max(after) - min(after)}


def headline(runs: dict[str, list[dict]], sft_rows: list[dict], control: dict | None,
             split: str = "synth_nodemo") -> str:
    """GRPO's last held-out pass@1 on `split` against the best SFT checkpoint and the SFT continuation control."""
    col = f"pass1_{split}"
    sft_pts = [r for r in sft_rows if col in r]
    best = best_sft(sft_rows, split)
    lines = [f"| run | {split} pass@1 (last eval) | vs best SFT checkpoint (want >= +10) | vs SFT control "
             "(want >= +8) |", "|---|---|---|---|"]
    for name, rows in runs.items():
        pts = [r[col] for r in rows if col in r]
        if not pts:
            continue
        cells = [f"{100 * pts[-1]:.1f}"]
        for ref in ((best or {}).get(col), (control or {}).get(col)):
            cells.append("n/a" if ref is None else f"{100 * (pts[-1] - ref):+.1f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    if best is not None:
        lines.append(f"| best SFT checkpoint (step {best['step']} of {', '.join(str(r['step']) for r in sft_pts)}) "
                     f"| {100 * best[col]:.1f} | | |")
    if control and col in control:
        lines.append(f"| SFT continuation control | {100 * control[col]:.1f} | | |")
    return "\n".join(lines)


def compare(runs: dict[str, list[dict]], baseline: str, n_val: int = 300) -> str:
    """Each run against `baseline` at their last common validation step, per split: held-out pass@1, the difference
    with its binomial standard error (n_val problems per split), the gain since step 0 of each, and the first
    attempt's public pass. Whether they share a start is read from step 0: the same model gives the same greedy
    first attempts up to batch numerics (a problem or two of a split was seen to flip), so first-attempt pass within
    2 problems on every split means one SFT model; otherwise only gains compare."""
    if baseline not in runs:
        return ""
    by_step = {name: {r["step"]: r for r in rows} for name, rows in runs.items()}
    lines = [f"| run vs {baseline} | split | step | pass@1 | {baseline} | difference (± SE) | gain since step 0 "
             f"(run / {baseline}) | first-attempt public pass (run / {baseline}) |",
             "|---|---|---|---|---|---|---|---|"]
    notes = []
    for name in runs:
        if name == baseline:
            continue
        common = sorted(step for step, r in by_step[name].items() if "pass1_synth_nodemo" in r
                        and "pass1_synth_nodemo" in by_step[baseline].get(step, {}))
        if not common:
            notes.append(f"{name}: no validation step in common with {baseline}")
            continue
        s0, s1 = common[0], common[-1]
        r0, b0, r1, b1 = by_step[name][s0], by_step[baseline][s0], by_step[name][s1], by_step[baseline][s1]
        firsts = [(r0[k], b0[k]) for k in (f"val_first_{sp}" for sp in SPLITS) if k in r0 and k in b0]
        gap = max((abs(a - b) for a, b in firsts), default=float("inf"))
        same = s0 == 0 and gap <= 2 / n_val + 1e-9
        notes.append(f"{name}: {'same start as' if same else 'NOT the same start as'} {baseline} (step-{s0} greedy "
                     f"first-attempt pass differs by at most {100 * gap:.1f} points)"
                     f"{'' if same else ': compare gains, not levels'}")
        for split in SPLITS:
            col, first = f"pass1_{split}", f"val_first_{split}"
            if col not in r1 or col not in b1:
                continue
            a, b = r1[col], b1[col]
            se = (a * (1 - a) / n_val + b * (1 - b) / n_val) ** 0.5
            gain = f"{100 * (a - r0[col]):+.1f} / {100 * (b - b0[col]):+.1f}" if col in r0 and col in b0 else "-"
            fp = f"{100 * r1[first]:.1f} / {100 * b1[first]:.1f}" if first in r1 and first in b1 else "-"
            lines.append(f"| {name} | {split} | {s1} | {100 * a:.1f} | {100 * b:.1f} | {100 * (a - b):+.1f} ± "
                         f"{100 * se:.1f} | {gain} | {fp} |")
    return "\n".join(lines + [""] + notes)


def _step(given: int | None, path: Path) -> int | None:
    """A step given on the command line, else the one the sft_more stage wrote to `path`, else None."""
    if given is None and path.is_file():
        return int(path.read_text())
    return given


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs_dir", type=Path)
    ap.add_argument("--out", type=Path, default=None, help="where CSV/PNG go (default: RUNS_DIR)")
    ap.add_argument("--baseline", default="grpo_k2", help="the run the others are compared with (default grpo_k2)")
    ap.add_argument("--val-n", type=int, default=300, help="problems per validation split, for standard errors")
    ap.add_argument("--control-step", type=int, default=None,
                    help="the SFT step of the continuation control (sft_more_eval), to put it on the SFT curve "
                    "(default: sft_more_eval/step if there)")
    ap.add_argument("--start-step", type=int, default=None,
                    help="the SFT step GRPO and the control started from: the plateau check of that checkpoint over a "
                    "further 50%% of steps (default: sft_more_eval/start if there)")
    args = ap.parse_args(argv)
    out = args.out or args.runs_dir
    out.mkdir(parents=True, exist_ok=True)
    runs = {p.stem: read_run(p) for p in sorted(args.runs_dir.glob("*.jsonl"))}
    sft_rows = read_sft_evals(args.runs_dir)
    control_path = args.runs_dir / "sft_more_eval/summary.json"
    control = read_eval(control_path) if control_path.is_file() else None
    control_step = _step(args.control_step, args.runs_dir / "sft_more_eval/step")
    sft_rows = with_control(sft_rows, control, control_step)
    start_step = _step(args.start_step, args.runs_dir / "sft_more_eval/start")
    if not runs and not sft_rows:
        raise SystemExit(f"no *.jsonl and no sft_eval/step_*/summary.json in {args.runs_dir}")
    written = []
    for name, rows in runs.items():
        write_csv(rows, out / f"{name}.csv")
        written.append(f"{name}.csv")
    if sft_rows:
        with (out / "sft_eval.csv").open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=["step", *sorted({k for r in sft_rows for k in r} - {"step"})])
            w.writeheader()
            w.writerows(sft_rows)
        written.append("sft_eval.csv")
        starts = [None] if start_step is None else [start_step, None]
        print("| SFT split | window | pass@1 at step | pass@1 at end of window | flat within 2 points | spread from "
              "there on (max - min) |\n|---|---|---|---|---|---|")
        for start in starts:
            for split in SPLITS:
                p = plateau(sft_rows, split, start=start)
                if p:
                    window = "GRPO start -> +50% steps" if start is not None else "2/3 of last step -> last"
                    print(f"| {split} | {window} | {100 * p['ref']:.1f} ({p['ref_step']}) | {100 * p['last']:.1f} "
                          f"({p['last_step']}) | {'yes' if p['flat'] else 'no'} | {100 * p['spread']:.1f} |")
    if runs:
        plot(runs, out / "curves.png", sft_rows, control)
        written.append("curves.png")
        print(summary(runs))
        print(headline(runs, sft_rows, control))
        if len(runs) > 1 and args.baseline in runs:
            print("\n" + compare(runs, args.baseline, args.val_n))
    print(f"wrote {', '.join(written)} to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
