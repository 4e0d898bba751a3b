"""`learnability.synth` (``python -m learnability synth``): the APPS+ schema of the bundled sample, determinism,
the mix of io modes, families and tests, the held-out / nodemo split rules, the quoted-literal encoding read back
by `mrgrpo.apps`, and the records going through the unchanged `mrgrpo data prepare` with every reference accepted
by the sandbox."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from mrgrpo.apps import Problem, read_problems

from learnability import python_path, synth
from learnability.synth import FAMILIES, HELDOUT_TEMPLATES, N_TEMPLATES, synth_split

REPO = Path(__file__).resolve().parents[3]
ENV = {**os.environ, "PYTHONPATH": python_path()}  # python -m learnability


def _shown(value, compact: bool) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":") if compact else None)


@pytest.fixture(scope="module")
def records() -> list[dict]:
    return synth.generate(200, seed=0)


@pytest.fixture(scope="module")
def problems(records, tmp_path_factory) -> list[Problem]:
    path = tmp_path_factory.mktemp("synth") / "synth.jsonl"
    synth.write_jsonl(records, path)
    items = list(read_problems(path))
    assert all(isinstance(p, Problem) for p in items), [str(p) for p in items if not isinstance(p, Problem)]
    return items


def test_schema_is_the_bundled_samples(records, sample_path):
    sample = [json.loads(line) for line in sample_path.read_text(encoding="utf-8").splitlines()]
    keys = set(sample[0])
    types = {k: type(sample[0][k]) for k in keys}
    for r in records:
        assert set(r) == keys | {"id"}
        assert {k: type(r[k]) for k in keys} == types and isinstance(r["id"], str)
        assert all(isinstance(s, list) and [type(v) for v in s] == [str, int, int] for s in r["scope"])
        assert r["difficulty"] in ("introductory", "interview", "competition")
        assert r["prompt"].startswith(r["starter_code"]) and r["prompt"].endswith('\n    """\n')


def test_same_seed_same_bytes_other_seed_other_bytes():
    a = synth.to_jsonl(synth.generate(60, seed=3))
    assert a == synth.to_jsonl(synth.generate(60, seed=3))
    assert a != synth.to_jsonl(synth.generate(60, seed=4))
    assert a.startswith(synth.to_jsonl(synth.generate(20, seed=3)))  # record i depends on (seed, i) only


def test_worker_processes_draw_the_same_records_as_one(monkeypatch):
    """generate() on worker processes (chunks of records drawn there, the repeat check here, in order) gives the
    bytes one process gives, also when many draws repeat an earlier record (a coarse content key: the reference
    solution, shared by many call-style problems) and are drawn again."""
    from learnability.synth.assemble import scopes

    one = synth.generate(600, seed=5, workers=1)
    assert synth.to_jsonl(synth.generate(600, seed=5, workers=2)) == synth.to_jsonl(one)
    assert all(r["scope"] == scopes(r["canonical_solution"]) for r in one)  # the remembered scopes are the code's
    monkeypatch.setattr(synth, "_content_key", lambda r: r["canonical_solution"])
    coarse = synth.generate(300, seed=5, workers=1)
    assert len({r["canonical_solution"] for r in coarse}) == 300 and coarse != one[:300]
    assert synth.to_jsonl(synth.generate(300, seed=5, workers=2)) == synth.to_jsonl(coarse)


def test_cli_writes_the_generated_bytes(tmp_path):
    out = tmp_path / "s.jsonl"
    cmd = [sys.executable, "-m", "learnability", "synth", "--n", "25", "--seed", "7", "--out", str(out)]
    r = subprocess.run(cmd, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"wrote 25 synthetic records (seed 7, templates train) to {out}" in r.stdout
    assert out.read_bytes() == synth.to_jsonl(synth.generate(25, seed=7))


def test_io_modes_families_depths(problems, records):
    modes = Counter(p.io_mode for p in problems)
    assert modes["stdio"] >= 0.3 * len(problems) and modes["call"] >= 0.3 * len(problems), modes
    assert any(p.class_name == "Solution" for p in problems) and any(p.io_mode == "call" and not p.class_name
                                                                      for p in problems)
    assert len(FAMILIES) >= 12 and all(len(f.phrases) == N_TEMPLATES >= 4 for f in FAMILIES)
    splits = [synth_split(r["id"]) for r in records]
    assert len({f for s in splits for f in s["families"]}) >= 12
    depth_of = {1: "introductory", 2: "interview", 3: "competition"}
    assert Counter(s["depth"] for s in splits).keys() == {1, 2, 3}
    assert all(depth_of[s["depth"]] == p.difficulty for s, p in zip(splits, problems, strict=True))


def test_tests_examples_and_sizes(problems, records):
    for p, r in zip(problems, records, strict=True):
        assert len(p.inputs) >= 10  # >= 2 examples (may become public) + >= 8 hidden
        keys = [json.dumps(x) for x in p.inputs]
        assert len(set(keys)) == len(keys), p.source_id
        if p.io_mode == "stdio":
            for x, y in zip(p.inputs[:2], p.outputs[:2], strict=True):
                assert f"Input\n{x}\nOutput\n{y}".rstrip() in p.statement, p.source_id  # the reader strips
            assert all(isinstance(o, str) and o.endswith("\n") and o.strip() for o in p.outputs)
        else:
            for x, y in zip(p.inputs[:2], p.outputs[:2], strict=True):
                if p.class_name:  # LeetCode: "Input: nums = [1,2]\nOutput: 3"
                    shown = f" = {_shown(x[0], True)}\nOutput: {_shown(y, True)}"
                else:  # Codewars: "name([1, 2]) == 3"
                    shown = f"{p.fn_name}({_shown(x[0], False)}) == {_shown(y, False)}"
                assert shown in p.statement, (p.source_id, shown)
        assert not any(isinstance(v, float) for o in p.outputs for v in (o if isinstance(o, list) else [o]))
        text = p.statement.split("-----Examples-----")[0].split("\n\nExample")[0]  # examples are not prose
        assert len(text.split()) < 120, (p.source_id, text)
        assert len(r["canonical_solution"].strip().splitlines()) <= 15, p.source_id


def test_held_out_templates_and_split_rules():
    train = [synth_split(r["id"]) for r in synth.generate(150, seed=1, templates="train")]
    held = [synth_split(r["id"]) for r in synth.generate(60, seed=1, templates="heldout")]
    assert train and not any(s["heldout_template"] for s in train)
    assert {s["template"] for s in train} == set(range(N_TEMPLATES)) - HELDOUT_TEMPLATES
    assert held and all(s["heldout_template"] and s["template"] in HELDOUT_TEMPLATES for s in held)
    every = {s["template"] for s in map(synth_split, (r["id"] for r in synth.generate(80, 2, "all")))}
    assert every == set(range(N_TEMPLATES))
    s = synth_split("synth-words.parity.sum-t4-d3-000017")
    assert s == {"family": "words.parity.sum", "families": ("words", "parity", "sum"), "template": 4, "depth": 3,
                 "index": 17, "heldout_template": True, "nodemo": True}
    assert synth_split("synth-parity-t0-d1-000001")["nodemo"] is False
    assert synth_split("synth-sum.digits-t1-d2-000002")["nodemo"] is False
    for bad in ("apps_plus_sample:3", "synth-nosuch-t0-d1-000001", "synth-sum-t0-d2-000001", "synth-sum-t9-d1-1"):
        with pytest.raises(ValueError):
            synth_split(bad)
    # every nodemo pair is a real composition and its families also occur, demonstrated, in other chains
    from learnability.synth.families import chains

    two = chains(2)
    for pair in synth.NODEMO_PAIRS:
        assert pair in two and any(c != pair and (pair[0] in c or pair[1] in c) for c in two)


def test_quoted_literals_round_trip_through_the_reader(problems, records):
    strings = 0
    for p, r in zip(problems, records, strict=True):
        assert p.source_id == r["id"] and p.statement and p.reference_solution
        if p.io_mode == "stdio":
            assert p.inputs == r["inputs"] and p.outputs == r["outputs"]
            assert p.reference_solution.rstrip().endswith(f"\n\n{r['starter_code'].split()[1].rstrip(':')}")
            continue
        assert p.fn_name and "undecoded_literal" not in p.notes
        for args, raw_args, out, raw_out in zip(p.inputs, r["inputs"], p.outputs, r["outputs"], strict=True):
            assert len(raw_args) == 1 and len(raw_out) == 1
            for value, raw in ((args[0], raw_args[0]), (out, raw_out[0])):
                if isinstance(value, str):
                    strings += 1
                    assert raw == json.dumps(value, ensure_ascii=False) and raw.startswith('"')
                else:
                    assert raw == value
    assert strings > 20


def test_prepare_keeps_every_record_and_every_reference_passes(tmp_path):
    """40 synthetic records through the unchanged `mrgrpo data prepare`: none quarantined, no special flag,
    every reference solution AC on all its tests in the sandbox."""
    data, out = tmp_path / "synth.jsonl", tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "learnability", "synth", "--n", "40", "--seed", "11", "--out",
                        str(data), "--templates", "all"], cwd=REPO, env=ENV, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    cmd = [sys.executable, "-m", "mrgrpo", "data", "prepare", "--input", str(data), "--out", str(out), "--plans",
           "none", "--quiet"]
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["counts"]["records"] == 40 and report["counts"]["quarantined"] == 0, report["quarantined"]
    assert report["counts"]["kept"] == 40 and report["special"] == {}
    rows = [json.loads(line) for line in (out / "problems.jsonl").read_text().splitlines()]
    assert len(rows) == 40
    for row in rows:
        ref = row["reference"]
        assert ref["verdict"] == "AC" and ref["passed"] == ref["total"] == len(row["inputs"]) >= 10, row["source_id"]
        assert row["source_id"].startswith("synth-") and row["n_public"] == 1
