"""The study's data stage (CPU): synthetic problems -> prepared parquet -> splits -> tokenizer -> SFT data.

``python -m learnability data --out DIR`` builds, each step skipped when its output exists (re-runs are
cheap and resume after a kill):

    DIR/synth/train_templates.jsonl   learnability.synth, templates train   (n_synth records)
    DIR/synth/heldout_templates.jsonl learnability.synth, templates heldout (n_heldout records)
    DIR/synth/selected.jsonl          every nodemo record, the first n_demo others, the held-out-template ones
    DIR/prepared/                     the unchanged `mrgrpo data prepare --plans none --val-fraction 0` on it
    DIR/rl/train.parquet              what GRPO trains on: nodemo (train part) + rl_demo_ratio x as many
                                      demonstrated rows (train part), so RL time goes where SFT cannot help
    DIR/rl/val.parquet                held-out instances, data_source = the split (verl reports each separately):
                                      synth_seen (demonstrated compositions), synth_nodemo (compositions with NO
                                      demonstration), synth_unseen_template (a statement template never trained on)
    DIR/sft_src/train.parquet         the demonstrated compositions' train part: the only rows SFT sees
    DIR/tokenizer/                    BPE trained on the RL train rows (never on validation rows)
    DIR/sft/                          SFT transcripts in the agent loop's exact format (learnability.transcripts)

The split of a row is a pure function of its synthetic id (`learnability.synth.synth_split`): held-out template
-> synth_unseen_template; nodemo -> 30% synth_nodemo (by index) else RL train; demonstrated -> every 10th index
synth_seen, else SFT and RL train. The model itself is built where it trains (``python -m learnability model``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from mrgrpo.config import recipe_settings

from learnability import python_path

VAL_SOURCES = ("synth_seen", "synth_nodemo", "synth_unseen_template")


@dataclass(frozen=True)
class ExperimentOptions:
    seed: int = 0
    n_synth: int = 40000  # train-template records generated (nodemo ones are ~4% of them)
    n_demo: int = 6000  # demonstrated records kept from them
    n_heldout: int = 400  # held-out-template records
    n_eval: int = 300  # cap per validation split
    rl_demo_ratio: float = 1.0  # demonstrated rows in RL train per nodemo row (RL time goes where SFT cannot help)
    max_prompt_length: int = 768
    max_response_length: int = 1024
    rounds: int = field(default_factory=lambda: recipe_settings()["rounds"])  # the recipe's, their one home
    plan_source: str = field(default_factory=lambda: recipe_settings()["plan_source"])
    vocab_size: int = 6144


def split_of(source_id: str) -> str:
    """``sft_rl`` | ``rl`` | one of ``VAL_SOURCES`` for a synthetic record id."""
    from learnability.synth import synth_split

    s = synth_split(source_id)
    if s["heldout_template"]:
        return "synth_unseen_template"
    if s["nodemo"]:
        return "synth_nodemo" if s["index"] % 10 < 3 else "rl"
    return "synth_seen" if s["index"] % 10 == 0 else "sft_rl"


def _run(cmd: list[str]) -> None:
    print("+ " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, env={**os.environ, "PYTHONPATH": python_path()})


def _mrgrpo(*args: str) -> list[str]:
    return [sys.executable, "-m", "mrgrpo", *args]


def select_records(train_records: list[dict], heldout_records: list[dict], n_demo: int) -> list[dict]:
    from learnability.synth import synth_split

    nodemo = [r for r in train_records if synth_split(r["id"])["nodemo"]]
    demo = [r for r in train_records if not synth_split(r["id"])["nodemo"]][:n_demo]
    return nodemo + demo + list(heldout_records)


def write_splits(prepared: Path, out: Path, n_eval: int, rl_demo_ratio: float = 1.0) -> dict:
    """The RL train/val and SFT-source parquet files from the prepared rows (see the module docstring)."""
    import pyarrow.parquet as pq

    from mrgrpo.data.build import parquet_bytes

    rows = pq.read_table(prepared / "train.parquet").to_pylist()
    groups: dict[str, list[dict]] = {k: [] for k in ("sft_rl", "rl", *VAL_SOURCES)}
    for row in rows:
        groups[split_of(row["extra_info"]["source_id"])].append(row)
    val = []
    for source in VAL_SOURCES:
        for row in groups[source][:n_eval]:
            val.append({**row, "data_source": source})
    n_demo = min(len(groups["sft_rl"]), round(rl_demo_ratio * len(groups["rl"])))
    train = groups["rl"] + groups["sft_rl"][:n_demo]
    for i, row in enumerate(train):
        row["extra_info"] = {**row["extra_info"], "index": i, "split": "train"}
    for i, row in enumerate(val):
        row["extra_info"] = {**row["extra_info"], "index": i, "split": "val"}
    (out / "rl").mkdir(parents=True, exist_ok=True)
    (out / "sft_src").mkdir(parents=True, exist_ok=True)
    (out / "rl" / "train.parquet").write_bytes(parquet_bytes(train))
    (out / "rl" / "val.parquet").write_bytes(parquet_bytes(val))
    (out / "sft_src" / "train.parquet").write_bytes(parquet_bytes(groups["sft_rl"]))
    counts = {k: len(v) for k, v in groups.items()}
    counts.update(rl_train=len(train), rl_val=dict(Counter(r["data_source"] for r in val)), sft=len(groups["sft_rl"]))
    return counts


def build(out: Path, opts: ExperimentOptions) -> dict:
    from learnability.synth import generate, write_jsonl

    out.mkdir(parents=True, exist_ok=True)
    synth = out / "synth"
    selected = synth / "selected.jsonl"
    if not selected.is_file():
        train = generate(opts.n_synth, seed=opts.seed, templates="train")
        heldout = generate(opts.n_heldout, seed=opts.seed + 1, templates="heldout")
        write_jsonl(train, synth / "train_templates.jsonl")
        write_jsonl(heldout, synth / "heldout_templates.jsonl")
        write_jsonl(select_records(train, heldout, opts.n_demo), selected)
        print(f"wrote {synth}/train_templates.jsonl, heldout_templates.jsonl, selected.jsonl", flush=True)
    prepared = out / "prepared"
    if not (prepared / "train.parquet").is_file():
        _run(_mrgrpo("data", "prepare", "--input", str(selected), "--out", str(prepared), "--plans", "none",
                     "--val-fraction", "0"))
    counts = write_splits(prepared, out, opts.n_eval, opts.rl_demo_ratio)
    print(f"splits: {json.dumps(counts)}", flush=True)
    if not (out / "tokenizer" / "tokenizer.json").is_file():
        _run([sys.executable, "-m", "learnability", "tokenizer", "--data", str(out / "rl" / "train.parquet"),
              "--out", str(out / "tokenizer"), "--vocab-size", str(opts.vocab_size)])
    if not (out / "sft" / "sft_train.parquet").is_file():
        _run([sys.executable, "-m", "learnability", "sft-data", "--data", str(out / "sft_src" / "train.parquet"),
              "--tokenizer", str(out / "tokenizer"), "--out", str(out / "sft"), "--plan-source", opts.plan_source,
              "--rounds", str(opts.rounds), "--max-prompt-length", str(opts.max_prompt_length),
              "--max-response-length", str(opts.max_response_length), "--seed", str(opts.seed)])
    manifest = {"options": asdict(opts), "counts": counts}
    (out / "experiment.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"wrote the experiment's CPU side to {out} (experiment.json lists the counts)", flush=True)
    return manifest


def add_parser(sub) -> None:
    p = sub.add_parser("data", help="the study's data stage: synthetic problems, splits, tokenizer and SFT data",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--out", required=True, help="experiment directory")
    for name, default in asdict(ExperimentOptions()).items():
        p.add_argument("--" + name.replace("_", "-"), type=type(default), default=default)
    p.set_defaults(func=cmd_data)


def cmd_data(args) -> int:
    opts = ExperimentOptions(**{k: getattr(args, k) for k in asdict(ExperimentOptions())})
    build(Path(args.out), opts)
    return 0
