"""Seeded synthetic APPS+ problems for the learnability study (``python -m learnability synth``).

Each record is a small program family composition ("keep the even numbers, then add them up") stated in
natural language, with a reference solution and 12 tests, in exactly the APPS+ schema of the bundled
sample (``prompt, canonical_solution, inputs, outputs, starter_code, scope, difficulty``) plus ``id``,
so it goes through ``mrgrpo data prepare`` unchanged. 16 families (`families.FAMILIES`) over ints, lists
and strings; depth 1/2/3 = introductory/interview/competition; 5 statement templates, template 4 held
out of training; about half standard-input problems, half call-based (Codewars and LeetCode style).
The same seed gives the same bytes. Layout: `families` (operations and phrasings), `text` (statement
templates), `assemble` (tests, code, one record), `split` (id scheme, held-out and nodemo rules).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from learnability.synth.assemble import N_TESTS, Degenerate, make_record
from learnability.synth.families import FAMILIES, N_TEMPLATES
from learnability.synth.split import HELDOUT_TEMPLATES, NODEMO_PAIRS, TEMPLATE_SETS, TRAIN_TEMPLATES, synth_split

__all__ = [
    "FAMILIES", "HELDOUT_TEMPLATES", "NODEMO_PAIRS", "N_TEMPLATES", "N_TESTS", "TEMPLATE_SETS", "TRAIN_TEMPLATES",
    "generate", "io_style", "summarize", "synth_split", "to_jsonl", "write_jsonl",
]


def _content_key(record: dict) -> str:
    return json.dumps([record["prompt"], record["inputs"], record["outputs"]], ensure_ascii=False)


def generate(n: int, seed: int = 0, templates: str = "train") -> list[dict]:
    """``n`` records. Record i depends only on (seed, templates, i), so a smaller ``n`` gives a prefix. A
    record with weak tests (`assemble.degenerate`) or whose statement and tests repeat an earlier one (the
    validator would drop it as a duplicate) is drawn again with the next attempt number."""
    if templates not in TEMPLATE_SETS:
        raise ValueError(f"templates must be one of {sorted(TEMPLATE_SETS)}, got {templates!r}")
    if n < 0:
        raise ValueError("n must be >= 0")
    records: list[dict] = []
    seen: set[str] = set()
    for index in range(n):
        for attempt in range(100):
            try:
                record = make_record(seed, templates, index, attempt)
            except Degenerate:
                continue
            key = _content_key(record)
            if key not in seen:
                break
        else:
            raise RuntimeError(f"record {index}: 100 weak or duplicate draws in a row")
        seen.add(key)
        records.append(record)
    return records


def to_jsonl(records: list[dict]) -> bytes:
    """One JSON object a line, UTF-8, as the bundled sample is written."""
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode("utf-8")


def write_jsonl(records: list[dict], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(to_jsonl(records))
    return path


def io_style(record: dict) -> str:
    """The io style of a record from its starter code: "stdio", "codewars" or "leetcode"."""
    start = record["starter_code"]
    if "class Solution" in start:
        return "leetcode"
    return "stdio" if "():" in start else "codewars"


def summarize(records: list[dict]) -> dict:
    """Counts by io style, depth, family chain head, held-out template and nodemo."""
    splits = [synth_split(r["id"]) for r in records]
    return {
        "records": len(records),
        "io": dict(sorted(Counter(io_style(r) for r in records).items())),
        "depth": dict(sorted(Counter(s["depth"] for s in splits).items())),
        "templates": dict(sorted(Counter(s["template"] for s in splits).items())),
        "families": len({f for s in splits for f in s["families"]}),
        "nodemo": sum(s["nodemo"] for s in splits),
    }
