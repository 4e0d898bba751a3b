"""`mrgrpo.data.build`: the public/hidden split in the parquet row, the stratified train/val split and the plan
rules, on hand-built problems (issue 17). Found by mutation testing (docs/testing.md)."""

from __future__ import annotations

import io
import json

import pyarrow.parquet as pq
import pytest

from mrgrpo import prompts
from mrgrpo.apps import Problem
from mrgrpo.data.build import BuildOptions, build_rows, make_row, parquet_bytes, stratified_split


def problem(sid="p:1", difficulty="interview", n=3, io_mode="stdio", **kw) -> Problem:
    call = io_mode == "call"
    fields = dict(
        source_id=sid, data_source="apps_plus", statement=f"Statement of {sid}.", io_mode=io_mode,
        fn_name="f" if call else None, class_name=None, starter_code="def f(x):\n    " if call else "",
        inputs=[[i] for i in range(n)] if call else [f"{i}\n" for i in range(n)],
        outputs=[i * i for i in range(n)] if call else [f"{i * i}\n" for i in range(n)],
        difficulty=difficulty, reference_solution="print(0)\n",
    )
    fields.update(kw)
    return Problem(**fields)


def prow(n_public=1, **kw) -> dict:
    return {"n_public": n_public, "special": [], "where": "problems.jsonl:1", **kw}


def test_the_ground_truth_holds_the_hidden_tests_and_extra_info_the_public_ones():
    p = problem(n=4)
    row = make_row(p, prow(n_public=1), "", "", "train", 0)
    assert json.loads(row["extra_info"]["public_tests"]) == {"inputs": ["0\n"], "outputs": ["0\n"]}
    assert json.loads(row["reward_model"]["ground_truth"]) == {"inputs": ["1\n", "2\n", "3\n"],
                                                                "outputs": ["1\n", "4\n", "9\n"]}
    assert row["extra_info"]["num_tests"] == 3
    assert row["reward_model"]["style"] == "rule"


def test_call_mode_rows_wrap_outputs_and_name_the_entry_point_in_both_halves():
    row = make_row(problem(n=3, io_mode="call"), prow(n_public=2), "", "", "train", 0)
    assert json.loads(row["extra_info"]["public_tests"]) == {"inputs": [[0], [1]], "outputs": [[0], [1]],
                                                              "fn_name": "f"}
    assert json.loads(row["reward_model"]["ground_truth"]) == {"inputs": [[2]], "outputs": [[4]], "fn_name": "f"}
    assert row["extra_info"]["io_mode"] == "call" and row["extra_info"]["fn_name"] == "f"


def test_zero_public_tests_leaves_every_test_hidden():
    row = make_row(problem(n=2), prow(n_public=0), "", "", "train", 0)
    assert json.loads(row["extra_info"]["public_tests"])["inputs"] == []
    assert row["extra_info"]["num_tests"] == 2


@pytest.mark.parametrize("n_public", [3, 4])
def test_a_row_without_a_hidden_test_is_an_error(n_public):
    with pytest.raises(ValueError, match=r"^p:1: no hidden test left after 3 public ones"):
        make_row(problem(n=3), prow(n_public=n_public), "", "", "train", 0)


def test_float_tol_travels_with_both_halves():
    row = make_row(problem(n=2), prow(float_tol=1e-6), "", "", "train", 0)
    assert json.loads(row["extra_info"]["public_tests"])["float_tol"] == 1e-6
    assert json.loads(row["reward_model"]["ground_truth"])["float_tol"] == 1e-6


def test_without_float_tol_neither_half_has_one():
    row = make_row(problem(n=2), prow(), "", "", "train", 0)
    assert "float_tol" not in json.loads(row["extra_info"]["public_tests"])
    assert "float_tol" not in json.loads(row["reward_model"]["ground_truth"])


def test_a_plan_goes_into_the_prompt_with_its_model():
    p = problem()
    row = make_row(p, prow(), "Sort, then sweep.", "qwen3-max", "val", 4)
    assert row["prompt"] == prompts.build_messages(p.statement, p.starter_code, "stdio", None, "Sort, then sweep.",
                                                   None)
    x = row["extra_info"]
    assert (x["plan"], x["plan_model"], x["split"], x["index"]) == ("Sort, then sweep.", "qwen3-max", "val", 4)


def test_without_a_plan_the_prompt_has_none_and_no_plan_model_is_recorded():
    p = problem()
    row = make_row(p, prow(), "", "qwen3-max", "train", 0)
    assert row["prompt"] == prompts.build_messages(p.statement, p.starter_code, "stdio", None, None, None)
    assert row["extra_info"]["plan"] == "" and row["extra_info"]["plan_model"] == ""


def test_row_fields_copy_the_problem():
    p = problem(io_mode="call", class_name="Solution", difficulty="competition", reference_solution=None,
                starter_code="class Solution:\n    def f(self, x):\n        ")
    row = make_row(p, prow(special=["float_output"]), "", "", "train", 7)
    assert (row["data_source"], row["ability"], row["agent_name"]) == ("apps_plus", "code", "plan_code")
    x = row["extra_info"]
    assert (x["difficulty"], x["source_id"], x["class_name"], x["special"]) == (
        "competition", "p:1", "Solution", ["float_output"])
    assert x["reference_solution"] == "" and x["starter_code"] == p.starter_code
    assert x["statement"] == p.statement and x["prompt_version"] == prompts.PROMPT_VERSION
    assert make_row(problem(starter_code=None), prow(), "", "", "train", 0)["extra_info"]["starter_code"] == ""


def test_parquet_round_trip_keeps_rows_and_types():
    rows = [make_row(problem(f"p:{i}", n=3), prow(), "", "", "train", i) for i in range(3)]
    table = pq.read_table(io.BytesIO(parquet_bytes(rows)))
    assert table.to_pylist() == rows
    # fn_name is null in every row of an all-stdio split and still a string column
    assert str(table.schema.field("extra_info").type.field("fn_name").type) == "string"
    assert parquet_bytes(rows) == parquet_bytes(rows)


@pytest.mark.parametrize("fraction", [-0.01, 1.0, 1.5])
def test_val_fraction_must_be_in_zero_one(fraction):
    with pytest.raises(ValueError, match="val_fraction must be in"):
        BuildOptions(val_fraction=fraction)


def test_val_fraction_zero_is_allowed_and_puts_nothing_in_val():
    assert BuildOptions(val_fraction=0.0).val_fraction == 0.0
    assert stratified_split({"a": [f"k{i}" for i in range(10)]}, 0.0, 0) == set()


def test_stratified_split_rounds_each_difficulty_half_up():
    keys = {"a": [f"a{i}" for i in range(25)], "b": [f"b{i}" for i in range(15)], "c": [f"c{i}" for i in range(4)]}
    val = stratified_split(keys, 0.1, 0)
    # 2.5 -> 3, 1.5 -> 2, 0.4 -> 0
    assert [sum(k.startswith(d) for k in val) for d in "abc"] == [3, 2, 0]


def test_stratified_split_keeps_at_least_one_training_problem_per_difficulty():
    val = stratified_split({"a": ["a0", "a1"], "b": ["b0", "b1", "b2"]}, 0.9, 0)
    assert sum(k.startswith("a") for k in val) == 1 and sum(k.startswith("b") for k in val) == 2


def test_a_difficulty_with_one_problem_may_go_to_val_whole():
    assert stratified_split({"a": ["only"]}, 0.5, 0) == {"only"}
    assert stratified_split({"a": ["only"]}, 0.4, 0) == set()


def test_stratified_split_does_not_depend_on_input_order_and_follows_the_seed():
    keys = [f"k{i}" for i in range(40)]
    val = stratified_split({"a": keys}, 0.25, 3)
    assert val == stratified_split({"a": list(reversed(keys))}, 0.25, 3)
    assert len(val) == 10 and val <= set(keys)
    assert {frozenset(stratified_split({"a": keys}, 0.25, s)) for s in range(5)} != {frozenset(val)}


def test_stratified_split_draws_each_difficulty_with_its_own_stream():
    same = [f"k{i}" for i in range(20)]
    # the same keys under two difficulty names are shuffled by Random(f"{seed}:{difficulty}")
    a = stratified_split({"a": same}, 0.5, 0)
    b = stratified_split({"b": same}, 0.5, 0)
    assert a != b


def plans_for(*sids, status="ok"):
    return {s: {"source_id": s, "status": status, "model": "m1", "plan": f"plan of {s}" if status == "ok" else "",
                "reason": "" if status == "ok" else "api_error: x"} for s in sids}


def test_build_rows_uses_ok_plans_and_numbers_rows_per_split():
    probs = [(problem(f"p:{i}", difficulty="interview" if i % 2 else "introductory"), prow()) for i in range(10)]
    res = build_rows(probs, plans_for(*(f"p:{i}" for i in range(10))), BuildOptions(val_fraction=0.2, seed=0))
    assert len(res.train) == 8 and len(res.val) == 2 and res.dropped == []
    assert [r["extra_info"]["index"] for r in res.train] == list(range(8))
    assert [r["extra_info"]["index"] for r in res.val] == [0, 1]
    assert {r["extra_info"]["split"] for r in res.val} == {"val"}
    assert {r["extra_info"]["split"] for r in res.train} == {"train"}
    for r in res.train + res.val:
        x = r["extra_info"]
        assert x["plan"] == f"plan of {x['source_id']}" and x["plan_model"] == "m1"
        assert "plan_failed" not in x["special"]
    val_ids = {r["extra_info"]["source_id"] for r in res.val}
    by_diff = {"introductory": [f"p:{i}" for i in range(0, 10, 2)], "interview": [f"p:{i}" for i in range(1, 10, 2)]}
    assert val_ids == stratified_split(by_diff, 0.2, 0)


def test_build_rows_without_plans_ignores_the_plan_file():
    probs = [(problem("p:1"), prow())]
    res = build_rows(probs, plans_for("p:1"), BuildOptions(val_fraction=0.0, use_plans=False))
    x = res.train[0]["extra_info"]
    assert x["plan"] == "" and x["plan_model"] == "" and x["special"] == []


@pytest.mark.parametrize("plans", [plans_for("p:1", status="failed"), {}])
def test_a_problem_without_an_ok_plan_is_built_plan_less_and_flagged(plans):
    res = build_rows([(problem("p:1"), prow(special=["z_flag", "float_output"]))], plans,
                     BuildOptions(val_fraction=0.0))
    x = res.train[0]["extra_info"]
    assert x["plan"] == "" and x["special"] == ["float_output", "plan_failed", "z_flag"]
    assert res.dropped == []


def test_the_plan_failed_flag_is_not_doubled():
    res = build_rows([(problem("p:1"), prow(special=["plan_failed"]))], {}, BuildOptions(val_fraction=0.0))
    assert res.train[0]["extra_info"]["special"] == ["plan_failed"]


@pytest.mark.parametrize("plans,detail", [(plans_for("p:1", status="failed"), "api_error: x"),
                                          ({}, "no plan stage output")])
def test_require_plans_quarantines_a_problem_without_a_plan(plans, detail):
    res = build_rows([(problem("p:1"), prow()), (problem("p:2"), prow())], {**plans, **plans_for("p:2")},
                     BuildOptions(val_fraction=0.0, require_plans=True))
    assert [r["extra_info"]["source_id"] for r in res.train] == ["p:2"] and res.val == []
    assert res.dropped == [{"where": "problems.jsonl:1", "source_id": "p:1", "reason": "plan_failed",
                            "detail": detail, "raw": "", "stage": "plans"}]


def test_parquet_files_are_zstd_compressed():
    rows = [make_row(problem("p:1"), prow(), "", "", "train", 0)]
    meta = pq.ParquetFile(io.BytesIO(parquet_bytes(rows))).metadata
    assert {meta.row_group(0).column(i).compression for i in range(meta.num_columns)} == {"ZSTD"}


def test_a_problem_row_without_special_flags_gets_plan_failed_alone():
    row = {"n_public": 1, "where": "problems.jsonl:1"}
    res = build_rows([(problem("p:1"), row)], {}, BuildOptions(val_fraction=0.0))
    assert res.train[0]["extra_info"]["special"] == ["plan_failed"]


def test_a_call_mode_prompt_shows_the_starter_code():
    p = problem(io_mode="call", starter_code="def f(x):\n    # starter marker\n    ")
    row = make_row(p, prow(), "", "", "train", 0)
    assert row["prompt"] == prompts.build_messages(p.statement, p.starter_code, "call", "f", None, None)
    assert "# starter marker" in row["prompt"][1]["content"]
