"""Training on the truth: the reward sees hidden tests only, one test-JSON codec everywhere, the overlong filter
measures the prompt the agent loop really sends, and the length term counts the model's own tokens only."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from mrgrpo.apps import Problem
from mrgrpo.data.build import make_row, parquet_bytes
from mrgrpo.data.validate import public_tests_json
from mrgrpo.first_turn import PLAN_SOURCES, first_turn_messages
from mrgrpo.reward import build_job, compute_score, length_term
from mrgrpo.testset import TestSet, TestSetError

STDIO = Problem(
    source_id="p1", data_source="apps_plus", statement="Read n and print n squared.", io_mode="stdio", fn_name=None,
    class_name=None, starter_code="", inputs=["2\n", "3\n", "4\n", "5\n"], outputs=["4\n", "9\n", "16\n", "25\n"],
    difficulty="introductory", reference_solution="n = int(input())\nprint(n * n)\n",
)
CALL = Problem(
    source_id="p2", data_source="apps_plus", statement="Return the list doubled.", io_mode="call", fn_name="dbl",
    class_name=None, starter_code="def dbl(xs):\n", inputs=[[[1]], [[1, 2]], [[]]], outputs=[[2], [2, 4], []],
    difficulty="introductory", reference_solution="def dbl(xs):\n    return [2 * x for x in xs]\n",
)


def row_of(p: Problem, k: int, float_tol=None, plan: str = "") -> dict:
    prow = {"public_tests": public_tests_json(p, k, float_tol), "n_public": k, "special": [], "float_tol": float_tol}
    return make_row(p, prow, plan, "teacher-model" if plan else "", "train", 0)


# ------------------------------------------------------------------ 1. hidden-only reward
def test_ground_truth_holds_the_hidden_tests_only():
    row = row_of(STDIO, 2)
    gt = json.loads(row["reward_model"]["ground_truth"])
    public = json.loads(row["extra_info"]["public_tests"])
    assert gt["inputs"] == STDIO.inputs[2:] and public["inputs"] == STDIO.inputs[:2]
    assert row["extra_info"]["num_tests"] == 2


def test_hard_coding_the_public_answers_earns_nothing():
    row = row_of(STDIO, 2)
    cheat = "n = int(input())\nprint({2: 4, 3: 9}.get(n, 0))\n"
    r = compute_score("apps_plus", "", row["reward_model"]["ground_truth"], {"final_code": cheat},
                      partial_credit=True)
    assert (r["score"], r["acc"], r["num_passed"]) == (0.0, 0.0, 0)


def test_acc_is_a_hidden_test_accuracy():
    row = row_of(STDIO, 2)
    honest = compute_score("apps_plus", "", row["reward_model"]["ground_truth"],
                           {"final_code": STDIO.reference_solution})
    assert (honest["acc"], honest["num_tests"]) == (1.0, 2)


# ------------------------------------------------------------------ 2. one codec
@pytest.mark.parametrize("problem", [STDIO, CALL], ids=["stdio", "call"])
def test_both_halves_decode_to_the_problems_tests(problem):
    row = row_of(problem, 1, float_tol=1e-6)
    public = TestSet.from_json(row["extra_info"]["public_tests"])
    hidden = TestSet.from_json(row["reward_model"]["ground_truth"])
    assert public.outputs + hidden.outputs == problem.outputs
    assert public.inputs + hidden.inputs == problem.inputs
    assert public.float_tol == hidden.float_tol == 1e-6  # feedback and reward judge with the same tolerance


def test_call_outputs_that_are_one_element_lists_stay_lists():
    # The old reward unwrapped only when EVERY output was a one-element list; [[[5]]] must mean the list [5].
    tests = TestSet([[1]], [[5]], fn_name="f")
    assert TestSet.from_json(tests.to_json()).outputs == [[5]]
    assert build_job(tests.to_json(), "def f(x): return [5]").outputs == [[5]]


def test_unwrapped_call_output_is_its_value():
    # APPS's other convention (issue 34, finding 9; was: an error): a set with an output that is not a one-element
    # list is unwrapped, each such output the value itself.
    assert build_job({"inputs": [[1], [2]], "outputs": [5, [1, 2]], "fn_name": "f"}, "def f(x): return 5").outputs \
        == [5, [1, 2]]


def test_a_malformed_call_test_set_is_still_an_error_naming_the_place():
    with pytest.raises(TestSetError, match="ground_truth: call-mode input 0 is not an argument list"):
        build_job({"inputs": [1], "outputs": [5], "fn_name": "f"}, "def f(x): return 5")


def test_reward_takes_the_tolerance_from_the_ground_truth():
    gt = {"inputs": ["\n"], "outputs": ["0.3333333\n"], "float_tol": 1e-6}
    r = compute_score("apps_plus", "", gt, {"final_code": "print(1/3)"})
    assert r["acc"] == 1.0
    r = compute_score("apps_plus", "", {k: v for k, v in gt.items() if k != "float_tol"}, {"final_code": "print(1/3)"})
    assert r["acc"] == 0.0


# ------------------------------------------------------------------ 3. the filter measures the loop's prompt
def _prompt_len(tok, messages) -> int:
    return len(tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False,
                                       enable_thinking=False))


@pytest.mark.parametrize("plan_source", PLAN_SOURCES)
def test_kept_rows_fit_the_prompt_budget_as_the_loop_sends_them(plan_source, tiny_tokenizer, tmp_path):
    from mrgrpo.dataset import MrGRPODataset

    rows = [row_of(STDIO, 1, plan="Square it."), row_of(CALL, 1, plan="Double each element.")]
    path = tmp_path / "train.parquet"
    path.write_bytes(parquet_bytes(rows))
    limit = _prompt_len(tiny_tokenizer, rows[0]["prompt"]) + 10  # the parquet's own prompt is 10 tokens under
    cfg = OmegaConf.create({
        "prompt_key": "prompt", "max_prompt_length": limit, "filter_overlong_prompts": True,
        "filter_overlong_prompts_workers": 1, "return_raw_chat": True, "truncation": "error",
        "apply_chat_template_kwargs": {"enable_thinking": False}, "adjust_sys_prompt": None,
        "plan_source": plan_source, "cache_dir": str(tmp_path / "cache"),
    })
    ds = MrGRPODataset(str(path), tiny_tokenizer, cfg)
    for i in range(len(ds)):
        item = ds[i]
        sent = first_turn_messages(item["raw_prompt"], item["extra_info"], plan_source)  # what the loop sends
        assert sent == item["raw_prompt"]  # the dataset already rewrote it
        ids = tiny_tokenizer.apply_chat_template(sent, add_generation_prompt=True, tokenize=True, return_dict=False,
                                                 enable_thinking=False)
        assert len(ids) <= limit and ids[0] == tiny_tokenizer.convert_tokens_to_ids("<|im_start|>")


def test_teacher_source_without_plans_fails_at_launch_naming_rows(tiny_tokenizer, tmp_path):
    from mrgrpo.dataset import MrGRPODataset
    from mrgrpo.first_turn import MissingPlanError

    path = tmp_path / "train.parquet"
    path.write_bytes(parquet_bytes([row_of(STDIO, 1, plan="Square it."), row_of(CALL, 1)]))
    cfg = OmegaConf.create({
        "prompt_key": "prompt", "max_prompt_length": 4096, "filter_overlong_prompts": True,
        "filter_overlong_prompts_workers": 1, "return_raw_chat": True, "truncation": "error",
        "apply_chat_template_kwargs": {"enable_thinking": False}, "adjust_sys_prompt": None,
        "plan_source": "teacher", "cache_dir": str(tmp_path / "cache"),
    })
    with pytest.raises(MissingPlanError, match=r"1 of 2 rows .* p2 \(row 1\)"):
        MrGRPODataset(str(path), tiny_tokenizer, cfg)


# ------------------------------------------------------------------ 4. length term: the model's tokens only
def test_length_term_reads_model_tokens_not_the_response_text():
    gt = {"inputs": ["2\n"], "outputs": ["4\n"]}
    code = STDIO.reference_solution
    short = compute_score("apps_plus", "x" * 10, gt, {"final_code": code, "model_tokens": 100}, length_weight=0.1,
                          length_target_tokens=100)
    long_feedback = compute_score("apps_plus", "x" * 100000, gt, {"final_code": code, "model_tokens": 100},
                                  length_weight=0.1, length_target_tokens=100)
    assert short["score"] == long_feedback["score"] == pytest.approx(1.1)
    assert length_term(150, 100) == 0.5


def test_length_weight_without_model_tokens_is_an_error():
    with pytest.raises(ValueError, match="model_tokens"):
        compute_score("apps_plus", "", {"inputs": ["\n"], "outputs": ["1\n"]}, {"final_code": "print(1)"},
                      length_weight=0.1)
