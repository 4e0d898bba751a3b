"""The study's two held-out sets: disjoint generator seeds, and no validation statement that repeats a training
statement up to its numbers (the data stage drops such rows and says which)."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from learnability import data
from learnability.data import VAL_SOURCES, normalise_statement, seed_ranges, split_of
from learnability.synth import generate


def test_statements_that_differ_only_in_numbers_are_duplicates_and_a_changed_word_is_not():
    a = "Keep the values greater than 5, then add 3 to each.\nThe list has at most 10^5 elements."
    assert normalise_statement(a) == normalise_statement(
        "Keep the values greater than -12, then add 40 to each.  The list has at most 10^6 elements.")
    assert normalise_statement("Multiply by 2.5 and print 7") == normalise_statement("Multiply by 3 and print -1")
    assert normalise_statement(a) != normalise_statement(a.replace("greater", "smaller"))
    assert normalise_statement(a) != normalise_statement(a.replace("add", "subtract"))


@pytest.mark.parametrize("seed", [0, 1, 7, 1000])
def test_the_second_sets_seeds_are_disjoint_from_training_and_the_first_set(seed):
    r = seed_ranges(seed)
    used = {name: {x for kind in r[name].values() for x in kind} for name in r}
    assert used["val2"] and not used["val2"] & (used["train"] | used["val"])
    assert not set(r["val"]["heldout_templates"]) & used["train"]
    assert r["train"]["train_templates"] == [seed] and r["val"]["heldout_templates"] == [seed + 1]  # as before


def test_overlapping_seed_offsets_are_refused(monkeypatch):
    monkeypatch.setitem(data.SEED_OFFSETS, "val2", ((2,), (1,)))
    with pytest.raises(ValueError, match="second held-out set"):
        seed_ranges(0)


def _prepare_in_process(src: Path, out: Path, plant=None) -> None:
    """What `mrgrpo data prepare --plans none --val-fraction 0` writes, without running the references."""
    from mrgrpo.apps import Problem, read_problems
    from mrgrpo.data.build import make_row, parquet_bytes
    from mrgrpo.data.validate import public_tests_json

    rows = [make_row(p, {"public_tests": public_tests_json(p, 2), "n_public": 2, "special": []}, "", "", "train", i)
            for i, p in enumerate(x for x in read_problems(src) if isinstance(x, Problem))]
    if plant is not None:
        plant(rows)
    out.mkdir(parents=True, exist_ok=True)
    (out / "train.parquet").write_bytes(parquet_bytes(rows))


def _fake_run(plant=None):
    def run(cmd: list[str]) -> None:
        arg = dict(zip(cmd, cmd[1:], strict=False))
        if "prepare" in cmd:
            _prepare_in_process(Path(arg["--input"]), Path(arg["--out"]),
                                plant if Path(arg["--out"]).name == "prepared" else None)
        elif "tokenizer" in cmd:
            Path(arg["--out"]).mkdir(parents=True, exist_ok=True)
            (Path(arg["--out"]) / "tokenizer.json").write_text("{}")
        elif "sft-data" in cmd:
            Path(arg["--out"]).mkdir(parents=True, exist_ok=True)
            (Path(arg["--out"]) / "sft_train.parquet").write_bytes(b"")
    return run


TINY = data.ExperimentOptions(n_synth=800, n_demo=200, n_heldout=30, n_eval=12)


def _rows(path: Path) -> list[dict]:
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


def test_a_tiny_data_build_writes_both_sets_none_repeating_a_training_statement(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(data, "_run", _fake_run())
    manifest = data.build(tmp_path, TINY)
    train = _rows(tmp_path / "rl" / "train.parquet") + _rows(tmp_path / "sft_src" / "train.parquet")
    training = {normalise_statement(r["extra_info"]["statement"]) for r in train}
    sets = {name: _rows(tmp_path / "rl" / f"{name}.parquet") for name in ("val", "val2")}
    for name, rows in sets.items():
        assert {r["data_source"] for r in rows} == set(VAL_SOURCES), name
        assert all(split_of(r["extra_info"]["source_id"]) == r["data_source"] for r in rows)
        assert not {normalise_statement(r["extra_info"]["statement"]) for r in rows} & training, name
    # the second set is new problems, not the first set's again
    statements = {name: {r["extra_info"]["statement"] for r in rows} for name, rows in sets.items()}
    assert not statements["val"] & statements["val2"]
    written = json.loads((tmp_path / "experiment.json").read_text())
    assert written == json.loads(json.dumps(manifest))
    assert written["seeds"] == seed_ranges(0)
    check = written["heldout_check"]
    assert check["checked"] == {"val": len(sets["val"]) + check["dropped"]["val"],
                                "val2": len(sets["val2"]) + check["dropped"]["val2"]}
    assert written["counts"]["rl_val2"] == dict(Counter(r["data_source"] for r in sets["val2"]))
    assert "held-out check" in capsys.readouterr().out


def test_a_failed_prepare_beside_the_second_set_stops_the_stage(tmp_path, monkeypatch):
    """The first `prepare` runs in the background: its failure is the stage's, after the second set is prepared."""
    import subprocess

    fake = _fake_run()
    ran: list[str] = []

    def run(cmd: list[str]) -> None:
        out = Path(dict(zip(cmd, cmd[1:], strict=False)).get("--out", ""))
        ran.append(out.name)
        if out.name == "prepared":
            raise subprocess.CalledProcessError(1, cmd)
        fake(cmd)

    monkeypatch.setattr(data, "_run", run)
    with pytest.raises(subprocess.CalledProcessError):
        data.build(tmp_path, TINY)
    assert sorted(ran) == ["prepared", "prepared_val2"]  # nothing after them ran
    assert not (tmp_path / "rl").exists() and not (tmp_path / "experiment.json").exists()


def test_the_first_set_is_unchanged_when_nothing_is_dropped(tmp_path, monkeypatch):
    """Without duplicates the first set keeps the rows (and bytes) the stage wrote before the second set existed."""
    monkeypatch.setattr(data, "_run", _fake_run())
    manifest = data.build(tmp_path, TINY)
    if manifest["heldout_check"]["dropped"]["val"]:
        pytest.skip("this tiny build has a duplicate in the first set")
    from mrgrpo.data.build import parquet_bytes

    groups: dict[str, list[dict]] = {k: [] for k in VAL_SOURCES}
    for row in _rows(tmp_path / "prepared" / "train.parquet"):
        split = split_of(row["extra_info"]["source_id"])
        if split in groups:
            groups[split].append(row)
    old = [{**row, "data_source": s} for s in VAL_SOURCES for row in groups[s][:TINY.n_eval]]
    for i, row in enumerate(old):
        row["extra_info"] = {**row["extra_info"], "index": i, "split": "val"}
    assert (tmp_path / "rl" / "val.parquet").read_bytes() == parquet_bytes(old)


PLANTED: dict[str, str] = {}


def _plant_numbers_only_twin(rows: list[dict]) -> None:
    """Give the first synth_seen row the statement of an SFT source row with its numbers changed."""
    source = next(r for r in rows if split_of(r["extra_info"]["source_id"]) == "sft_rl"
                  and re.search(r"\d", r["extra_info"]["statement"]))
    target = next(r for r in rows if split_of(r["extra_info"]["source_id"]) == "synth_seen")
    statement = source["extra_info"]["statement"]
    target["extra_info"]["statement"] = re.sub(r"\d+", lambda m: str(int(m.group()) + 1), statement)
    PLANTED.update(id=target["extra_info"]["source_id"], twin=source["extra_info"]["source_id"])


def test_a_planted_duplicate_is_dropped_counted_and_named(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(data, "_run", _fake_run(_plant_numbers_only_twin))
    manifest = data.build(tmp_path, TINY)
    pid, twin = PLANTED["id"], PLANTED["twin"]
    check = manifest["heldout_check"]
    assert {"set": "val", "split": "synth_seen", "id": pid, "training_id": twin} in check["dropped_rows"]
    assert check["dropped"]["val"] >= 1
    val = _rows(tmp_path / "rl" / "val.parquet")
    assert pid not in {r["extra_info"]["source_id"] for r in val}
    # the next seen row took its place: the split keeps its size
    assert sum(r["data_source"] == "synth_seen" for r in val) == TINY.n_eval
    out = capsys.readouterr().out
    assert re.search(r"val: \d+ rows checked, \d+ dropped \(.*" + re.escape(pid), out)


def test_the_second_sets_candidates_follow_the_split_rules_with_spares():
    train, heldout = generate(600, seed=2), generate(20, seed=3, templates="heldout")
    chosen = data.select_val2(train, heldout, n_eval=5)
    kinds = [split_of(r["id"]) for r in chosen]
    assert set(kinds) <= set(VAL_SOURCES)
    cap = 5 + max(1, round(data.VAL2_SPARE * 5))
    assert all(kinds.count(s) <= cap for s in VAL_SOURCES) and kinds.count("synth_unseen_template") == cap

