"""Curves of the learnability runs: verl's `file` logger JSONL (one line per step) -> CSV + PNG + a summary table.

    python benchmarks/learning_curves.py RUNS_DIR [--out DIR]

RUNS_DIR holds ``<run>.jsonl`` files written by recipe/mrgrpo/learnability.sh (``VERL_FILE_LOGGER_PATH``). For
each run it writes ``<run>.csv`` with the columns below (one row per logged step; empty where a step did not log
that metric) and ``curves.png`` with held-out pass@1 per split, reward, attempts, fix rate, response length and
step time against the step. Validation metrics are verl's ``val-core/<data_source>/acc/mean@1`` (greedy pass@1
on that split) and ``val-aux/<data_source>/...``.
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
    "infra_rate": "mrgrpo/infra/rate",
}
for _split in SPLITS:
    COLUMNS[f"pass1_{_split}"] = f"val-core/{_split}/acc/mean@1"
    COLUMNS[f"val_fix_rate_{_split}"] = f"val-aux/{_split}/fixed/mean@1"


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
            if key in data and data[key] is not None:
                row[col] = float(data[key])
    return [by_step[s] for s in sorted(by_step)]


def write_csv(rows: list[dict], path: Path) -> None:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["step", *COLUMNS])
        w.writeheader()
        for row in rows:
            w.writerow(row)


def plot(runs: dict[str, list[dict]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("held-out pass@1 (greedy)", [f"pass1_{s}" for s in SPLITS]), ("train reward", ["reward"]),
              ("attempts / trajectory", ["attempts"]), ("fix rate (train)", ["fix_rate"]),
              ("model tokens / trajectory", ["model_tokens"]), ("step time (s)", ["step_time_s"])]
    fig, axes = plt.subplots(2, 3, figsize=(15, 8))
    for ax, (title, cols) in zip(axes.flat, panels, strict=True):
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


def summary(runs: dict[str, list[dict]]) -> str:
    lines = ["| run | split | pass@1 first eval | pass@1 last eval | change (points) |", "|---|---|---|---|---|"]
    for name, rows in runs.items():
        for split in SPLITS:
            pts = [(r["step"], r[f"pass1_{split}"]) for r in rows if f"pass1_{split}" in r]
            if pts:
                (s0, a0), (s1, a1) = pts[0], pts[-1]
                lines.append(f"| {name} | {split} | {100 * a0:.1f} (step {s0}) | {100 * a1:.1f} (step {s1}) | "
                             f"{100 * (a1 - a0):+.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs_dir", type=Path)
    ap.add_argument("--out", type=Path, default=None, help="where CSV/PNG go (default: RUNS_DIR)")
    args = ap.parse_args(argv)
    out = args.out or args.runs_dir
    out.mkdir(parents=True, exist_ok=True)
    runs = {p.stem: read_run(p) for p in sorted(args.runs_dir.glob("*.jsonl"))}
    if not runs:
        raise SystemExit(f"no *.jsonl in {args.runs_dir}")
    for name, rows in runs.items():
        write_csv(rows, out / f"{name}.csv")
    plot(runs, out / "curves.png")
    print(summary(runs))
    print(f"wrote {', '.join(f'{n}.csv' for n in runs)} and curves.png to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
