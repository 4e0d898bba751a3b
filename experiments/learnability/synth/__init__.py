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
import os
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


MAX_ATTEMPTS = 100  # draws of one record before generate() gives up
PARALLEL_MIN = 2000  # generate() uses worker processes only from this many records on


def _first_usable(seed: int, templates: str, index: int, start: int = 0) -> tuple[int, dict | None, str]:
    """(attempt, record, content key) of the first draw of record ``index`` from attempt ``start`` on whose tests are
    not weak (`assemble.degenerate`); (MAX_ATTEMPTS, None, "") when every draw up to MAX_ATTEMPTS is."""
    for attempt in range(start, MAX_ATTEMPTS):
        try:
            record = make_record(seed, templates, index, attempt)
        except Degenerate:
            continue
        return attempt, record, _content_key(record)
    return MAX_ATTEMPTS, None, ""


def _draw_chunk(args: tuple[int, str, int, int]) -> list[tuple[int, dict | None, str]]:
    seed, templates, lo, hi = args
    return [_first_usable(seed, templates, index) for index in range(lo, hi)]


def _first_draws(n: int, seed: int, templates: str, workers: int):
    """`_first_usable` of records 0..n-1 (from attempt 0), in order; on ``workers`` processes when more than one."""
    if workers <= 1:
        for index in range(n):
            yield _first_usable(seed, templates, index)
        return
    import multiprocessing

    chunk = 250
    tasks = [(seed, templates, lo, min(n, lo + chunk)) for lo in range(0, n, chunk)]
    # fork: the workers need nothing but this module (a spawned one would import the caller's main script again)
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        for part in pool.imap(_draw_chunk, tasks):
            yield from part


def default_workers(n: int) -> int:
    """Worker processes for ``generate(n)``: one per usable CPU from `PARALLEL_MIN` records on, else none."""
    if n < PARALLEL_MIN:
        return 1
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def generate(n: int, seed: int = 0, templates: str = "train", workers: int | None = None) -> list[dict]:
    """``n`` records. Record i depends only on (seed, templates, i), so a smaller ``n`` gives a prefix. A
    record with weak tests (`assemble.degenerate`) or whose statement and tests repeat an earlier one (the
    validator would drop it as a duplicate) is drawn again with the next attempt number.

    ``workers`` processes (default `default_workers`; forked, so pass 1 from a process with threads of its own) draw
    the records; the repeat check runs here, in order, so the result is the same for any number of workers."""
    if templates not in TEMPLATE_SETS:
        raise ValueError(f"templates must be one of {sorted(TEMPLATE_SETS)}, got {templates!r}")
    if n < 0:
        raise ValueError("n must be >= 0")
    records: list[dict] = []
    seen: set[str] = set()
    draws = _first_draws(n, seed, templates, default_workers(n) if workers is None else workers)
    for index, (attempt, record, key) in enumerate(draws):
        while record is not None and key in seen:  # a repeat: the next usable draw of the same record
            attempt, record, key = _first_usable(seed, templates, index, attempt + 1)
        if record is None:
            raise RuntimeError(f"record {index}: {MAX_ATTEMPTS} weak or duplicate draws in a row")
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
