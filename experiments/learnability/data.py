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
    DIR/synth/val2.jsonl              a second held-out set's candidates, from generator seeds no other set uses
    DIR/prepared_val2/                `mrgrpo data prepare` on it, as above
    DIR/rl/val2.parquet               the second held-out set: same generator, same split rules, same cap as val
    DIR/sft_src/train.parquet         the demonstrated compositions' train part: the only rows SFT sees
    DIR/tokenizer/                    BPE trained on the RL train rows (never on validation rows)
    DIR/sft/                          SFT transcripts in the agent loop's exact format (learnability.transcripts)

The first `prepare` (the long one: every reference solution on all its tests) runs in the background while the
second set's candidates are drawn and prepared; both take their sandbox slots from the node's one budget.

The split of a row is a pure function of its synthetic id (`learnability.synth.synth_split`): held-out template
-> synth_unseen_template; nodemo -> 30% synth_nodemo (by index) else RL train; demonstrated -> every 10th index
synth_seen, else SFT and RL train. The model itself is built where it trains (``python -m learnability model``).

Generator seeds (`SEED_OFFSETS`, added to ``--seed``): the training file (seed) also gives the first set's seen and
nodemo rows, kept apart from training by index; the first set's unseen-template rows come from seed + 1; the second
set uses seed + 2 (training templates) and seed + 3 (held-out template), which nothing else uses.

Held-out check: a validation row (either set) whose statement equals a training statement (SFT source or RL train)
once every number is replaced by a placeholder and whitespace collapsed (`normalise_statement`) is dropped, and
the next row of its split takes its place. The stage prints how many rows were checked and dropped, and
``experiment.json`` records them (``heldout_check``: counts, the dropped ids with the training row each repeats)
next to the seeds (``seeds``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from mrgrpo.config import recipe_settings

from learnability import python_path

VAL_SOURCES = ("synth_seen", "synth_nodemo", "synth_unseen_template")
VAL_SETS = ("val", "val2")
# The generator seeds of each set, as offsets from --seed: training and the first set's seen / nodemo rows share
# the training file (kept apart by index, `split_of`); the first set's unseen-template rows come from seed + 1; the
# second set's from seeds nothing else uses. Per set: (training-template seeds, held-out-template seeds).
SEED_OFFSETS = {"train": ((0,), ()), "val": ((0,), (1,)), "val2": ((2,), (3,))}
VAL2_SPARE = 0.5  # extra candidates per split for the second set, so that dropped rows can be replaced
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def seed_ranges(seed: int) -> dict[str, dict[str, list[int]]]:
    """``{"train": {"train_templates": [...], "heldout_templates": [...]}, "val": ..., "val2": ...}`` for
    ``--seed``. Raises ValueError unless the second set's seeds are disjoint from every seed of training and of the
    first set, and the first set's held-out-template seeds are disjoint from training's."""
    ranges = {name: {"train_templates": [seed + o for o in tr], "heldout_templates": [seed + o for o in ho]}
              for name, (tr, ho) in SEED_OFFSETS.items()}

    def used(*names: str) -> set[int]:
        return {x for n in names for kind in ranges[n].values() for x in kind}

    if used("val2") & used("train", "val"):
        raise ValueError(f"the second held-out set's seeds overlap training or the first set: {ranges}")
    if set(ranges["val"]["heldout_templates"]) & used("train"):
        raise ValueError(f"the first held-out set's unseen-template seeds overlap training: {ranges}")
    return ranges


seed_ranges(0)  # the offsets above are checked on import


def normalise_statement(text: str) -> str:
    """The statement with every number (a maximal run of digits, optionally signed, optionally decimal) replaced
    by ``<N>`` and whitespace collapsed: two statements that differ only in numbers normalise to the same text."""
    return " ".join(_NUMBER.sub("<N>", text).split())


def _statement_key(row: dict) -> str:
    return normalise_statement(row["extra_info"]["statement"])


class HeldOutCheck:
    """Picks validation rows that repeat no training statement (`normalise_statement`) and counts what it did."""

    def __init__(self, training_rows: list[dict]):
        self.training: dict[str, str] = {}
        for row in training_rows:
            self.training.setdefault(_statement_key(row), row["extra_info"]["source_id"])
        self.checked = dict.fromkeys(VAL_SETS, 0)
        self.dropped: list[dict] = []

    def duplicate_of(self, row: dict) -> str | None:
        """The source id of the training row whose statement this row repeats, else None."""
        return self.training.get(_statement_key(row))

    def pick(self, name: str, groups: dict[str, list[dict]], n_eval: int) -> list[dict]:
        """Up to ``n_eval`` rows per split of ``VAL_SOURCES``, in order, skipping duplicates of training rows."""
        val = []
        for source in VAL_SOURCES:
            kept = 0
            for row in groups.get(source, []):
                if kept == n_eval:
                    break
                self.checked[name] += 1
                twin = self.duplicate_of(row)
                if twin is not None:
                    self.dropped.append({"set": name, "split": source, "id": row["extra_info"]["source_id"],
                                         "training_id": twin})
                    continue
                val.append({**row, "data_source": source})
                kept += 1
        return val

    def report(self) -> dict:
        return {"checked": dict(self.checked),
                "dropped": {n: sum(d["set"] == n for d in self.dropped) for n in VAL_SETS},
                "dropped_rows": list(self.dropped)}


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


class _Background:
    """`_run` of a command on a thread, so that the stage's next steps run beside it; `wait` re-raises its error."""

    def __init__(self, cmd: list[str]):
        import threading

        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._target, args=(cmd,), name="learnability-data", daemon=True)
        self.thread.start()

    def _target(self, cmd: list[str]) -> None:
        try:
            _run(cmd)
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            self.error = exc

    def wait(self) -> None:
        self.thread.join()
        if self.error is not None:
            raise self.error


def _mrgrpo(*args: str) -> list[str]:
    return [sys.executable, "-m", "mrgrpo", *args]


def select_records(train_records: list[dict], heldout_records: list[dict], n_demo: int) -> list[dict]:
    from learnability.synth import synth_split

    nodemo = [r for r in train_records if synth_split(r["id"])["nodemo"]]
    demo = [r for r in train_records if not synth_split(r["id"])["nodemo"]][:n_demo]
    return nodemo + demo + list(heldout_records)


def select_val2(train_records: list[dict], heldout_records: list[dict], n_eval: int) -> list[dict]:
    """The second set's candidates: per validation split, the first ``n_eval`` records (plus `VAL2_SPARE` more,
    replacements for rows the held-out check drops) that the split rules (`split_of`) put there."""
    cap = n_eval + max(1, round(VAL2_SPARE * n_eval))
    taken: Counter = Counter()
    chosen = []
    for record in [*train_records, *heldout_records]:
        split = split_of(record["id"])
        if split in VAL_SOURCES and taken[split] < cap:
            taken[split] += 1
            chosen.append(record)
    return chosen


def write_splits(prepared: Path, out: Path, n_eval: int, rl_demo_ratio: float = 1.0,
                 prepared_val2: Path | None = None) -> dict:
    """The RL train/val[/val2] and SFT-source parquet files from the prepared rows (see the module docstring).
    ``counts["heldout_check"]`` says how many validation rows were checked and which were dropped."""
    import pyarrow.parquet as pq

    from mrgrpo.data.build import parquet_bytes

    rows = pq.read_table(prepared / "train.parquet").to_pylist()
    groups: dict[str, list[dict]] = {k: [] for k in ("sft_rl", "rl", *VAL_SOURCES)}
    for row in rows:
        groups[split_of(row["extra_info"]["source_id"])].append(row)
    n_demo = min(len(groups["sft_rl"]), round(rl_demo_ratio * len(groups["rl"])))
    train = groups["rl"] + groups["sft_rl"][:n_demo]
    check = HeldOutCheck(groups["sft_rl"] + train)
    sets = {"val": check.pick("val", groups, n_eval)}
    if prepared_val2 is not None:
        groups2: dict[str, list[dict]] = {k: [] for k in VAL_SOURCES}
        for row in pq.read_table(prepared_val2 / "train.parquet").to_pylist():
            split = split_of(row["extra_info"]["source_id"])
            if split in groups2:
                groups2[split].append(row)
        sets["val2"] = check.pick("val2", groups2, n_eval)
    for i, row in enumerate(train):
        row["extra_info"] = {**row["extra_info"], "index": i, "split": "train"}
    for val in sets.values():
        for i, row in enumerate(val):
            row["extra_info"] = {**row["extra_info"], "index": i, "split": "val"}
        left = [r["extra_info"]["source_id"] for r in val if check.duplicate_of(r) is not None]
        if left:  # pick() drops them: reaching this is a bug, never a silent pass
            raise RuntimeError(f"validation rows repeat training statements: {left}")
    (out / "rl").mkdir(parents=True, exist_ok=True)
    (out / "sft_src").mkdir(parents=True, exist_ok=True)
    (out / "rl" / "train.parquet").write_bytes(parquet_bytes(train))
    for name, val in sets.items():
        (out / "rl" / f"{name}.parquet").write_bytes(parquet_bytes(val))
    (out / "sft_src" / "train.parquet").write_bytes(parquet_bytes(groups["sft_rl"]))
    counts = {k: len(v) for k, v in groups.items()}
    counts.update(rl_train=len(train), sft=len(groups["sft_rl"]))
    for name, val in sets.items():
        counts[f"rl_{name}"] = dict(Counter(r["data_source"] for r in val))
    counts["heldout_check"] = check.report()
    return counts


def _check_line(report: dict) -> str:
    parts = []
    for name in VAL_SETS:
        if name in report["checked"] and report["checked"][name]:
            ids = [d["id"] for d in report["dropped_rows"] if d["set"] == name]
            parts.append(f"{name}: {report['checked'][name]} rows checked, {report['dropped'][name]} dropped"
                         + (f" ({', '.join(ids)})" if ids else ""))
    return "held-out check (no statement equal to a training one up to numbers): " + "; ".join(parts)


def build(out: Path, opts: ExperimentOptions) -> dict:
    from learnability.synth import generate, write_jsonl

    out.mkdir(parents=True, exist_ok=True)
    seeds = seed_ranges(opts.seed)
    print(f"generator seeds: {json.dumps(seeds)}", flush=True)
    synth = out / "synth"
    selected = synth / "selected.jsonl"
    if not selected.is_file():
        train = generate(opts.n_synth, seed=seeds["train"]["train_templates"][0], templates="train")
        heldout = generate(opts.n_heldout, seed=seeds["val"]["heldout_templates"][0], templates="heldout")
        write_jsonl(train, synth / "train_templates.jsonl")
        write_jsonl(heldout, synth / "heldout_templates.jsonl")
        write_jsonl(select_records(train, heldout, opts.n_demo), selected)
        print(f"wrote {synth}/train_templates.jsonl, heldout_templates.jsonl, selected.jsonl", flush=True)
    # The two `prepare` runs overlap: the first (the long one) runs in the background while the second set's
    # candidates are drawn and prepared; both share the node's sandbox slots (mrgrpo's admission).
    prepared = out / "prepared"
    first = None
    if not (prepared / "train.parquet").is_file():
        first = _Background(_mrgrpo("data", "prepare", "--input", str(selected), "--out", str(prepared), "--plans",
                                    "none", "--val-fraction", "0"))
    try:
        val2_src = synth / "val2.jsonl"
        if not val2_src.is_file():
            workers = 1 if first is not None else None  # beside `prepare`, one process draws them
            candidates = select_val2(
                generate(opts.n_synth, seed=seeds["val2"]["train_templates"][0], templates="train", workers=workers),
                generate(opts.n_heldout, seed=seeds["val2"]["heldout_templates"][0], templates="heldout",
                         workers=workers), opts.n_eval)
            write_jsonl(candidates, val2_src)
            print(f"wrote {val2_src} ({len(candidates)} candidates of the second held-out set)", flush=True)
        prepared_val2 = out / "prepared_val2"
        if not (prepared_val2 / "train.parquet").is_file():
            _run(_mrgrpo("data", "prepare", "--input", str(val2_src), "--out", str(prepared_val2), "--plans", "none",
                         "--val-fraction", "0", *(["--quiet"] if first is not None else [])))
    except BaseException:
        if first is not None:  # (a Ctrl-C reaches its process too) this error, not the background one, is reported
            first.thread.join()
        raise
    if first is not None:
        first.wait()
    counts = write_splits(prepared, out, opts.n_eval, opts.rl_demo_ratio, prepared_val2)
    check = counts.pop("heldout_check")
    print(f"splits: {json.dumps(counts)}", flush=True)
    print(_check_line(check), flush=True)
    if not (out / "tokenizer" / "tokenizer.json").is_file():
        _run([sys.executable, "-m", "learnability", "tokenizer", "--data", str(out / "rl" / "train.parquet"),
              "--out", str(out / "tokenizer"), "--vocab-size", str(opts.vocab_size)])
    if not (out / "sft" / "sft_train.parquet").is_file():
        _run([sys.executable, "-m", "learnability", "sft-data", "--data", str(out / "sft_src" / "train.parquet"),
              "--tokenizer", str(out / "tokenizer"), "--out", str(out / "sft"), "--plan-source", opts.plan_source,
              "--rounds", str(opts.rounds), "--max-prompt-length", str(opts.max_prompt_length),
              "--max-response-length", str(opts.max_response_length), "--seed", str(opts.seed)])
    manifest = {"options": asdict(opts), "seeds": seeds, "counts": counts, "heldout_check": check}
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
