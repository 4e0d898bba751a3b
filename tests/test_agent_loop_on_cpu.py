"""PlanCodeAgentLoop driven by a scripted fake rollout server and a fake sandbox, through every path.

The fakes (`tests/fakes/loop_fakes.py`) behave as the real things where the loop can tell: the server "generates"
by encoding scripted text (the loop itself never encodes generated text), stops at an end token, at its cap, at the
model's context limit or on an abort, and returns distinct per-token logprobs; the sandbox runs the program and
judges it as `mrgrpo.sandbox` does (first failing test, SE, TLE, RE, float_tol; INFRA injected per program), which
`test_fake_sandbox_judges_as_the_real_one` checks against the real sandbox. Every test checks the exact token
stream: prompt ids equal the chat template's rendering, mask-1 positions hold exactly the generated tokens with
their logprob values, and everything else is the template's rendering of injected turns (logprob 0.0).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json

import hydra
import pytest
from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap
from verl.utils.dataset.rl_dataset import RLHFDataset

import mrgrpo.agent_loop as al
from mrgrpo import prompts
from mrgrpo.data.build import AGENT_NAME
from mrgrpo.sandbox import ExecResult, Limits, TestResult, Verdict
from mrgrpo.testset import TestSet

from loop_fakes import (
    BAD,
    CRASH,
    GEN,
    GOOD,
    PLAN,
    PUBLIC,
    STATEMENT,
    FakeSandbox,
    FakeServer,
    check_accounting,
    decoded_response,
    initial_ids,
    make_config,
    make_loop,
    make_row,
    recipe_loop_settings,
)
from loop_fakes import run_loop as run


@pytest.fixture
def sandbox(monkeypatch):
    box = FakeSandbox()
    monkeypatch.setattr(al.PlanCodeAgentLoop, "judge", box)
    return box


# ------------------------------------------------------------------ paths
def test_pass_first_try_teacher_plan(tiny_tokenizer, sandbox):
    tok = tiny_tokenizer
    server = FakeServer(tok, [GOOD])
    row = make_row(plan=PLAN)
    out = run(make_loop(tok, server, plan_source="teacher"), row)
    check_accounting(tok, out, server)
    assert out.prompt_ids == initial_ids(tok, row["raw_prompt"])
    assert out.response_mask == [1] * len(out.response_ids)
    assert decoded_response(tok, out) == GOOD + "<|im_end|>"
    ef = out.extra_fields
    assert (ef["stop_reason"], ef["attempts"], ef["public_pass"]) == ("passed", 1, [True])
    assert ef["final_code"] == "print(int(input()) + 1)"
    assert ef["plan"] == PLAN and ef["plan_source"] == "teacher"
    assert out.num_turns == 2
    assert len(sandbox.jobs) == 1 and sandbox.jobs[0].inputs == PUBLIC["inputs"]
    assert sandbox.jobs[0].stop_on_first_failure is True and sandbox.jobs[0].fn_name is None


def test_fail_then_fix_gives_bounded_feedback(tiny_tokenizer, sandbox):
    tok = tiny_tokenizer
    server = FakeServer(tok, [BAD, GOOD])
    out = run(make_loop(tok, server, plan_source="none"), make_row())
    check_accounting(tok, out, server)
    ef = out.extra_fields
    assert (ef["stop_reason"], ef["attempts"], ef["public_pass"]) == ("passed", 2, [False, True])
    assert ef["final_code"] == "print(int(input()) + 1)" and ef["plan"] == "" and ef["plan_source"] == "none"
    text = decoded_response(tok, out)
    head = BAD + "<|im_end|>\n<|im_start|>user\n"
    assert text.startswith(head)
    feedback, tail = text[len(head) :].split("<|im_end|>\n", 1)
    assert tail == GEN + GOOD + "<|im_end|>"
    # BAD fails public test 0 (input 1, expected 2, printed 1), as the real sandbox reports it.
    assert feedback == prompts.build_feedback_prompt(
        [{"verdict": "WA (wrong answer)", "input": "1\n", "expected": "2\n", "got": "1\n", "stderr": ""}],
        n_shown=1,
        max_chars=400,
    )
    # The injected turn and the boundary newline are mask 0; the two generations are mask 1.
    assert out.response_mask.count(0) == len(out.response_ids) - sum(len(t) for t in server.outputs)
    assert out.num_turns == 4
    # one request id per trajectory
    assert len({c["request_id"] for c in server.calls}) == 1


def test_runtime_error_feedback_shows_stderr_tail(tiny_tokenizer, sandbox):
    tok = tiny_tokenizer
    server = FakeServer(tok, [CRASH, GOOD])
    out = run(make_loop(tok, server, plan_source="none"), make_row())
    text = decoded_response(tok, out)
    assert "RE (runtime error)" in text and "ZeroDivisionError" in text
    assert out.extra_fields["public_pass"] == [False, True]


def test_rounds_exhausted(tiny_tokenizer, sandbox):
    tok = tiny_tokenizer
    server = FakeServer(tok, [BAD, BAD])
    cfg = make_config(rounds=1, plan_source="none")
    out = run(make_loop(tok, server, cfg=cfg), make_row())
    check_accounting(tok, out, server)
    ef = out.extra_fields
    assert (ef["stop_reason"], ef["attempts"], ef["public_pass"]) == ("rounds", 2, [False, False])
    assert ef["final_code"] == "print(int(input()))"
    assert not server.script


def test_zero_rounds_is_single_turn(tiny_tokenizer, sandbox):
    tok = tiny_tokenizer
    server = FakeServer(tok, [BAD])
    out = run(make_loop(tok, server, rounds=0, plan_source="none"), make_row())
    check_accounting(tok, out, server)
    assert out.extra_fields["stop_reason"] == "rounds" and out.response_mask == [1] * len(out.response_ids)


def test_budget_exhausted_mid_generation(tiny_tokenizer, sandbox):
    tok = tiny_tokenizer
    long_answer = ("Let me think about this problem carefully. " * 40) + GOOD
    server = FakeServer(tok, [("cut", long_answer)])
    cfg = make_config(response_length=64, plan_source="none")
    out = run(make_loop(tok, server, cfg=cfg), make_row())
    check_accounting(tok, out, server)
    assert len(out.response_ids) == 64 and server.calls[0]["params"]["max_tokens"] == 64
    ef = out.extra_fields
    assert (ef["stop_reason"], ef["attempts"], ef["public_pass"], ef["final_code"]) == ("budget", 1, [False], "")
    assert not sandbox.jobs


def test_budget_too_small_for_feedback(tiny_tokenizer, sandbox):
    tok = tiny_tokenizer
    server = FakeServer(tok, [BAD])
    n_bad = len(tok.encode(BAD)) + 1
    cfg = make_config(response_length=n_bad + 40, plan_source="none", min_turn_tokens=32)
    out = run(make_loop(tok, server, cfg=cfg), make_row())
    check_accounting(tok, out, server)
    ef = out.extra_fields
    assert (ef["stop_reason"], ef["attempts"], ef["public_pass"]) == ("budget", 1, [False])
    assert out.response_mask == [1] * n_bad  # the feedback turn was not appended
    assert len(server.calls) == 1


def test_later_turns_get_the_remaining_budget(tiny_tokenizer, sandbox):
    tok = tiny_tokenizer
    server = FakeServer(tok, [BAD, GOOD])
    out = run(make_loop(tok, server, plan_source="none"), make_row())
    used_before_second = len(server.calls[1]["prompt_ids"]) - len(out.prompt_ids)
    assert server.calls[1]["params"]["max_tokens"] == 512 - used_before_second


def test_teacher_plan_missing_from_prompt_is_inserted(tiny_tokenizer, sandbox):
    tok = tiny_tokenizer
    server = FakeServer(tok, [GOOD])
    row = make_row(plan=PLAN, plan_in_prompt=False)
    out = run(make_loop(tok, server, plan_source="teacher"), row)
    check_accounting(tok, out, server)
    expected = [
        row["raw_prompt"][0],
        {"role": "user", "content": prompts.build_user_prompt(STATEMENT, "", "stdio", None, PLAN)},
    ]
    assert out.prompt_ids == initial_ids(tok, expected)


def test_teacher_without_plan_is_a_counted_error_outcome(tiny_tokenizer, sandbox):
    # Was: the exception escaped run(), and verl 0.9.1's v1 trainer dropped the trajectory with one log line.
    # Now it is a typed outcome: stop_reason "error", nothing trained (mask all 0), the reason kept.
    tok = tiny_tokenizer
    server = FakeServer(tok, [GOOD])
    row = make_row()
    out = run(make_loop(tok, server, plan_source="teacher"), row)
    ef = out.extra_fields
    assert ef["stop_reason"] == "error" and "has no extra_info.plan" in ef["error"]
    assert set(out.response_mask) == {0} and ef["model_tokens"] == 0 and not server.calls
    assert out.prompt_ids == initial_ids(tok, row["raw_prompt"])
    assert set(ef) >= set(al.EXTRA_FIELD_KEYS)


def test_error_outcome_keeps_generated_tokens_masked(tiny_tokenizer, sandbox):
    tok = tiny_tokenizer
    server = FakeServer(tok, [BAD])  # one scripted turn: the feedback round's generation fails
    out = run(make_loop(tok, server, plan_source="none", rounds=1), make_row())
    ef = out.extra_fields
    assert ef["stop_reason"] == "error" and "more turns than scripted" in ef["error"]
    assert len(out.response_ids) > len(server.outputs[0]) and set(out.response_mask) == {0}
    assert out.response_logprobs == [0.0] * len(out.response_ids)


def test_consecutive_errors_raise(tiny_tokenizer, sandbox, monkeypatch):
    monkeypatch.setattr(al, "_consecutive_errors", al.MAX_CONSECUTIVE_ERRORS - 1)
    loop = make_loop(tiny_tokenizer, FakeServer(tiny_tokenizer, [GOOD]), plan_source="teacher")
    with pytest.raises(RuntimeError, match="in a row failed"):
        run(loop, make_row())


def test_no_plan_removes_a_plan_from_the_prompt(tiny_tokenizer, sandbox):
    tok = tiny_tokenizer
    server = FakeServer(tok, [GOOD])
    row = make_row(plan=PLAN)
    out = run(make_loop(tok, server, plan_source="none"), row)
    check_accounting(tok, out, server)
    assert PLAN not in tok.decode(out.prompt_ids)
    assert out.prompt_ids == initial_ids(tok, prompts.build_messages(STATEMENT, "", "stdio", None, None))
    assert out.extra_fields["plan"] == "" and out.extra_fields["plan_source"] == "none"


def test_self_plan_then_code(tiny_tokenizer, sandbox):
    tok = tiny_tokenizer
    plan_turn = "<think>\ndraft: ```python\nprint(0)\n```\n</think>\n\nPlan: read n, print n + 1."
    server = FakeServer(tok, [plan_turn, GOOD])
    out = run(make_loop(tok, server, plan_source="self"), make_row(plan=PLAN))  # the row's plan is not used
    check_accounting(tok, out, server)
    first_user = prompts.build_plan_turn_prompt(STATEMENT, "", "stdio", None)
    assert out.prompt_ids == initial_ids(
        tok, [{"role": "system", "content": prompts.SYSTEM_PROMPT}, {"role": "user", "content": first_user}]
    )
    text = decoded_response(tok, out)
    assert text == (
        plan_turn
        + "<|im_end|>\n<|im_start|>user\n"
        + prompts.CODE_AFTER_PLAN_PROMPT
        + "<|im_end|>\n"
        + GEN
        + GOOD
        + "<|im_end|>"
    )
    ef = out.extra_fields
    assert ef["plan"] == "Plan: read n, print n + 1." and ef["plan_source"] == "self"
    assert (ef["stop_reason"], ef["attempts"], ef["public_pass"]) == ("passed", 1, [True])
    assert out.num_turns == 4


def test_self_plan_cut_by_plan_cap_still_gets_the_code_turn(tiny_tokenizer, sandbox):
    """A plan that hits plan_max_tokens is closed with an injected end-of-turn token (mask 0), then the code
    is asked for: the cap bounds the plan, it does not end the trajectory."""
    tok = tiny_tokenizer
    server = FakeServer(tok, [("cut", "Plan: " + "step " * 100), GOOD])
    out = run(make_loop(tok, server, plan_source="self", plan_max_tokens=16), make_row())
    check_accounting(tok, out, server)
    assert server.calls[0]["params"]["max_tokens"] == 16 and len(server.outputs[0]) == 16
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    assert out.response_ids[16] == im_end and out.response_mask[16] == 0 and out.response_logprobs[16] == 0.0
    plan_text = tok.decode(server.outputs[0], skip_special_tokens=False)
    assert decoded_response(tok, out) == (
        plan_text
        + "<|im_end|>\n<|im_start|>user\n"
        + prompts.CODE_AFTER_PLAN_PROMPT
        + "<|im_end|>\n"
        + GEN
        + GOOD
        + "<|im_end|>"
    )
    ef = out.extra_fields
    assert ef["plan"] == plan_text.strip()
    assert (ef["stop_reason"], ef["attempts"], ef["public_pass"]) == ("passed", 1, [True])


def test_plan_cut_by_the_response_budget_ends_the_trajectory(tiny_tokenizer, sandbox):
    tok = tiny_tokenizer
    server = FakeServer(tok, [("cut", "Plan: " + "step " * 400)])
    out = run(make_loop(tok, server, cfg=make_config(response_length=40), plan_source="self"), make_row())
    check_accounting(tok, out, server)
    assert len(out.response_ids) == 40 and all(m == 1 for m in out.response_mask)
    ef = out.extra_fields
    assert (ef["stop_reason"], ef["attempts"], ef["public_pass"], ef["final_code"]) == ("budget", 0, [], "")


def test_no_code_gets_feedback_without_running(tiny_tokenizer, sandbox):
    tok = tiny_tokenizer
    server = FakeServer(tok, ["I think the answer is to add one.", GOOD])
    out = run(make_loop(tok, server, plan_source="none"), make_row())
    check_accounting(tok, out, server)
    assert "NO_CODE" in decoded_response(tok, out)
    assert out.extra_fields["public_pass"] == [False, True] and len(sandbox.jobs) == 1


def test_row_plan_source_overrides_config(tiny_tokenizer, sandbox):
    tok = tiny_tokenizer
    server = FakeServer(tok, [GOOD])
    out = run(make_loop(tok, server, plan_source="self"), make_row(plan_source="none"))
    assert out.extra_fields["plan_source"] == "none" and len(server.calls) == 1


def test_no_public_tests(tiny_tokenizer, sandbox):
    tok = tiny_tokenizer
    server = FakeServer(tok, [GOOD])
    row = make_row(public_tests=json.dumps({"inputs": [], "outputs": []}))
    out = run(make_loop(tok, server, plan_source="none"), row)
    assert out.extra_fields["stop_reason"] == "no_public_tests" and not sandbox.jobs


def test_call_mode_unwraps_outputs(tiny_tokenizer, sandbox):
    tok = tiny_tokenizer
    code = "```python\ndef add(a, b):\n    return a + b\n```"
    server = FakeServer(tok, [code])
    row = make_row(
        io_mode="call", fn_name="add", public_tests=json.dumps({"inputs": [[1, 2]], "outputs": [[3]], "fn_name": "add"})
    )
    out = run(make_loop(tok, server, plan_source="none"), row)
    assert out.extra_fields["stop_reason"] == "passed"
    job = sandbox.jobs[0]
    assert (job.fn_name, job.inputs, job.outputs) == ("add", [[1, 2]], [3])


def test_float_tolerance_comes_from_the_public_tests(tiny_tokenizer, sandbox):
    # Was: the loop's own float_tol kwarg for rows flagged needs_float_tol. Now the tolerance travels in the test
    # JSON (mrgrpo.testset), the same value the reward's hidden tests carry.
    tok = tiny_tokenizer
    tol_tests = json.dumps({**PUBLIC, "float_tol": 1e-4})
    run(make_loop(tok, FakeServer(tok, [GOOD]), plan_source="none"), make_row(public_tests=tol_tests))
    run(make_loop(tok, FakeServer(tok, [GOOD]), plan_source="none"), make_row(special=["needs_float_tol"]))
    assert [j.float_tol for j in sandbox.jobs] == [1e-4, None]


def test_without_logprobs(tiny_tokenizer, sandbox):
    tok = tiny_tokenizer
    server = FakeServer(tok, [BAD, GOOD], logprobs=False)
    out = run(make_loop(tok, server, plan_source="none"), make_row())
    assert out.response_logprobs is None
    check_accounting(tok, out, server)


def test_enable_thinking_true_uses_plain_generation_prompt(tiny_tokenizer, sandbox):
    tok = tiny_tokenizer
    server = FakeServer(tok, [BAD, "<think>\nfix it\n</think>\n\n" + GOOD])
    cfg = make_config(enable_thinking=True, plan_source="none")
    row = make_row()
    out = run(make_loop(tok, server, cfg=cfg), row)
    check_accounting(tok, out, server, enable_thinking=True)
    assert out.prompt_ids == initial_ids(tok, row["raw_prompt"], enable_thinking=True)
    text = decoded_response(tok, out)
    assert "</think>\n\n```python\nprint(int(input()) + 1)" in text
    assert text.count("<think>") == 1  # only the generated one: no empty block injected
    assert out.extra_fields["final_code"] == "print(int(input()) + 1)"


def test_sandbox_concurrency_is_bounded_and_non_blocking(tiny_tokenizer, monkeypatch):
    tok = tiny_tokenizer
    box = FakeSandbox(delay=0.05)
    monkeypatch.setattr(al.PlanCodeAgentLoop, "judge", box)
    loops = [make_loop(tok, FakeServer(tok, [GOOD]), plan_source="none", sandbox_concurrency=2) for _ in range(6)]
    params = {"temperature": 1.0, "logprobs": True}

    async def all_runs():
        return await asyncio.gather(*(lp.run(params, **make_row()) for lp in loops))

    outs = loops[0].loop.run_until_complete(all_runs())
    assert all(o.extra_fields["stop_reason"] == "passed" for o in outs)
    assert box.max_in_flight == 2


def test_instantiated_from_the_recipe_yaml(tiny_tokenizer, repo_root):
    entries = OmegaConf.load(repo_root / "mrgrpo/config/agent_loop.yaml")
    (entry,) = [e for e in entries if e.name == AGENT_NAME]
    assert entry._target_ == "mrgrpo.agent_loop.PlanCodeAgentLoop"
    assert set(entry) == {"name", "_target_"}  # the class only: the settings live in the trainer yaml
    entry = OmegaConf.create({k: v for k, v in entry.items() if k != "name"})
    cfg = make_config(rounds=5)
    loop = hydra.utils.instantiate(
        config=entry,
        trainer_config=DictConfigWrap(config=cfg),
        server_manager=object(),
        tokenizer=tiny_tokenizer,
        processor=None,
        hf_model_type="qwen3",
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(cfg.data),
        tools=ToolListWrap([]),
    )
    assert isinstance(loop, al.PlanCodeAgentLoop)
    assert loop.rounds == 5  # an override of the trainer config
    assert loop.plan_source == "self" and loop.min_turn_tokens == 32  # the trainer yaml's defaults
    assert al.recipe_settings() == recipe_loop_settings() and set(al.SETTINGS) == set(recipe_loop_settings())


def test_a_missing_setting_names_the_trainer_yaml(tiny_tokenizer):
    cfg = make_config()
    del cfg.mrgrpo.agent_loop["min_turn_tokens"]
    with pytest.raises(KeyError, match=r"mrgrpo\.agent_loop\.\{min_turn_tokens\}.*mrgrpo_trainer\.yaml"):
        make_loop(tiny_tokenizer, object(), cfg=cfg)
    no_section = make_config()
    del no_section["mrgrpo"]
    with pytest.raises(KeyError, match="rounds,plan_source"):
        make_loop(tiny_tokenizer, object(), cfg=no_section)


def test_bad_settings_raise(tiny_tokenizer):
    with pytest.raises(ValueError, match="plan_source"):
        make_loop(tiny_tokenizer, object(), plan_source="oracle")
    with pytest.raises(ValueError, match="rounds"):
        make_loop(tiny_tokenizer, object(), rounds=-1)


def test_output_goes_through_verl_as_dict(tiny_tokenizer, sandbox):
    tok = tiny_tokenizer
    out = run(make_loop(tok, FakeServer(tok, [BAD, GOOD]), plan_source="none"), make_row())
    d = out.as_dict()
    assert d["responses"].shape == d["response_mask"].shape == d["rollout_log_probs"].shape
    assert d["extra_fields"]["stop_reason"] == "passed"


def test_real_sandbox_job_matches_the_contract():
    sandbox = pytest.importorskip("mrgrpo.sandbox")
    if not hasattr(sandbox, "Job") or not hasattr(sandbox, "run_async"):
        pytest.skip("mrgrpo.sandbox does not export Job/run_async yet")
    fields = {f.name for f in dataclasses.fields(sandbox.Job)}
    assert {"code", "inputs", "outputs", "fn_name", "float_tol", "stop_on_first_failure"} <= fields
    assert asyncio.iscoroutinefunction(sandbox.run_async)


def test_verl_worker_postprocess_pads_our_output(tiny_tokenizer, sandbox):
    """verl's own AgentLoopWorker._agent_loop_postprocess (the v0 path) pads the output into tensors."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    tok = tiny_tokenizer
    cfg = make_config(response_length=256, prompt_length=1024, plan_source="none")
    loop = make_loop(tok, FakeServer(tok, [BAD, GOOD]), cfg=cfg)
    row = make_row()
    out = run(loop, row)
    worker = object.__new__(AgentLoopWorker)
    worker.rollout_config = cfg.actor_rollout_ref.rollout
    worker.tokenizer = tok
    worker.processor = None
    worker.mm_processor_kwargs = {}
    worker.reward_loop_worker_handles = None
    worker.distillation_enabled = False
    internal = loop.loop.run_until_complete(worker._agent_loop_postprocess(out, False, **row))
    n = len(out.response_ids)
    assert internal.response_ids.shape == (1, 256) and internal.prompt_ids.shape == (1, 1024)
    assert internal.response_mask[0, :n].tolist() == out.response_mask
    assert internal.response_mask[0, n:].sum() == 0
    assert internal.response_logprobs[0, :n].tolist() == pytest.approx(out.response_logprobs)
    assert internal.attention_mask.sum() == len(out.prompt_ids) + n


def test_feedback_never_shows_the_sandbox_summary_as_program_output(tiny_tokenizer):
    """A failed test's feedback shows the program's own stderr (here: none), not the sandbox's `detail`."""
    loop = make_loop(tiny_tokenizer, FakeServer(tiny_tokenizer, []))
    tests = TestSet(["1\n"], ["2\n"])
    wrong = ExecResult(Verdict.WA, 0, 1, (TestResult(0, Verdict.WA, 0.01, "5\n", ""),), 0.1, "test 0: WA")
    message = loop.feedback_message(wrong, tests)
    assert "test 0: WA" not in message and "5" in message


def test_feedback_for_a_syntax_error_shows_the_compiler_message(tiny_tokenizer):
    loop = make_loop(tiny_tokenizer, FakeServer(tiny_tokenizer, []))
    tests = TestSet(["1\n"], ["2\n"])
    syntax = ExecResult(Verdict.SE, 0, 1, (), 0.0, "SyntaxError: invalid syntax (line 1)")
    assert "SyntaxError: invalid syntax" in loop.feedback_message(syntax, tests)


# ------------------------------------------------------------------ issue 9: accounting and small contracts
def test_turn_ended_by_endoftext_gets_an_im_end_boundary(tiny_tokenizer, sandbox):
    tok = tiny_tokenizer
    server = FakeServer(tok, [("eot", BAD), GOOD])
    out = run(make_loop(tok, server, plan_source="none", rounds=1), make_row())
    eot, im_end = tok.convert_tokens_to_ids("<|endoftext|>"), tok.convert_tokens_to_ids("<|im_end|>")
    i = out.response_ids.index(eot)
    assert out.response_ids[i + 1] == im_end and out.response_mask[i + 1] == 0 and out.response_mask[i] == 1
    assert out.extra_fields["stop_reason"] == "passed"


def test_min_turn_tokens_must_be_positive(tiny_tokenizer):
    with pytest.raises(ValueError, match="min_turn_tokens"):
        make_loop(tiny_tokenizer, object(), min_turn_tokens=0)


def test_request_id_is_stable_and_deterministic_with_priority(tiny_tokenizer, sandbox):
    tok = tiny_tokenizer
    cfg = make_config(plan_source="none", rounds=1)
    cfg.actor_rollout_ref.rollout.full_determinism = True
    server = FakeServer(tok, [BAD, GOOD])
    run(make_loop(tok, server, cfg=cfg), {**make_row(), "priority": 7})
    assert [c["request_id"] for c in server.calls] == ["det-7", "det-7"]
    assert [c["priority"] for c in server.calls] == [7, 7]


def test_model_tokens_do_not_count_the_injected_feedback(tiny_tokenizer, sandbox):
    tok = tiny_tokenizer
    outs = []
    for limit in (20, 400):  # a longer feedback message: more injected tokens, the same model tokens
        server = FakeServer(tok, [CRASH, GOOD])
        outs.append(run(make_loop(tok, server, plan_source="none", rounds=1, feedback_stderr_chars=limit), make_row()))
    a, b = (o.extra_fields for o in outs)
    assert a["model_tokens"] == b["model_tokens"] == sum(outs[0].response_mask)
    assert a["injected_tokens"] < b["injected_tokens"]
    assert a["model_tokens"] + a["injected_tokens"] == len(outs[0].response_ids)


def test_public_verdicts_and_sandbox_times_per_attempt(tiny_tokenizer, sandbox):
    tok = tiny_tokenizer
    out = run(make_loop(tok, FakeServer(tok, [CRASH, "no code here", GOOD]), plan_source="none", rounds=2), make_row())
    ef = out.extra_fields
    assert ef["public_verdicts"] == ["RE", "NO_CODE", "AC"] and ef["public_pass"] == [False, False, True]
    assert len(ef["sandbox_s"]) == 2 and all(x >= 0 for x in ef["sandbox_s"])  # NO_CODE runs nothing
    assert set(al.EXTRA_FIELD_KEYS) <= set(ef)


def _with_limits(**limits):
    """The loop's config with the run's limits override ``mrgrpo.limits`` (the trainer yaml's section)."""
    cfg = make_config(plan_source="none")
    cfg.mrgrpo.limits = {"time_s": None, "wall_s": None, "memory_mb": None, **limits}
    return cfg


def test_public_test_limits_come_from_the_override(tiny_tokenizer, sandbox):
    tok = tiny_tokenizer
    run(make_loop(tok, FakeServer(tok, [GOOD]), cfg=_with_limits(time_s=1, wall_s=2)), make_row())
    run(make_loop(tok, FakeServer(tok, [GOOD]), plan_source="none"), make_row())
    assert (sandbox.jobs[0].limits.time_s, sandbox.jobs[0].limits.wall_s) == (1.0, 2.0)
    assert sandbox.jobs[1].limits == Limits()


def test_public_test_limits_come_from_the_problem_unless_overridden(tiny_tokenizer, sandbox):
    tok = tiny_tokenizer
    own = make_row(public_tests=json.dumps({**json.loads(make_row()["extra_info"]["public_tests"]), "time_s": 1.5}))
    run(make_loop(tok, FakeServer(tok, [GOOD]), plan_source="none"), own)
    run(make_loop(tok, FakeServer(tok, [GOOD]), cfg=_with_limits(time_s=3)), own)
    assert [sandbox.jobs[0].limits, sandbox.jobs[1].limits] == [Limits(time_s=1.5), Limits(time_s=3)]


def test_a_public_test_cpu_limit_alone_gets_the_sandboxs_wall_rule(tiny_tokenizer, sandbox):
    tok = tiny_tokenizer
    run(make_loop(tok, FakeServer(tok, [GOOD]), cfg=_with_limits(time_s=10)), make_row())
    assert sandbox.jobs[0].limits == Limits(time_s=10, wall_s=20)


def test_a_public_test_wall_below_its_cpu_limit_is_refused_when_the_loop_is_built(tiny_tokenizer, sandbox):
    with pytest.raises(ValueError, match=r"^mrgrpo\.limits: wall_s \(2\) is below time_s \(3\)"):
        make_loop(tiny_tokenizer, FakeServer(tiny_tokenizer, [GOOD]), cfg=_with_limits(time_s=3, wall_s=2))


def test_a_former_public_test_limit_is_refused_naming_the_new_key(tiny_tokenizer, sandbox):
    with pytest.raises(ValueError, match=r"^PlanCodeAgentLoop: mrgrpo\.agent_loop\.sandbox_time_s is retired: set "
                       r"mrgrpo\.limits\.time_s "):
        make_loop(tiny_tokenizer, FakeServer(tiny_tokenizer, [GOOD]), sandbox_time_s=1)


# ------------------------------------------------------------------ issue 17: the fakes behave as the real things
SYNTAX = "```python\nprint(int(input())\n```"
HANG = "```python\nn = int(input())\nwhile n:\n    n += 1\n```"
LOUD = "```python\nprint('x' * 50)\n```"


def contract_jobs():
    """Jobs covering every verdict the fake can give (INFRA aside), for both modes."""
    from mrgrpo.sandbox import Job

    two = {"inputs": ["1\n", "5\n"], "outputs": ["2\n", "6\n"]}
    fast = Limits(time_s=0.2, wall_s=0.5)
    return [
        Job(code="print(int(input()) + 1)", **two),
        Job(code="print(int(input()))", **two),  # WA at test 0
        Job(code="n = int(input())\nprint(2 if n == 1 else 0)", **two),  # WA at test 1
        Job(code="print(int(input()))", stop_on_first_failure=False, **two),  # every test runs
        Job(code="print(1 // 0)", **two),
        Job(code="print(int(input())", **two),
        Job(code="   \n", **two),
        Job(code="import sys\nsys.exit(3)", **two),
        Job(code="exit('bye')", **two),
        Job(code="import sys\nprint('warn', file=sys.stderr)\nprint(int(input()) + 1)", **two),
        Job(code="n = int(input())\nwhile n:\n    n += 1", limits=fast, **two),
        Job(code="print(0.30001)", inputs=["\n"], outputs=["0.3\n"], float_tol=1e-3),
        Job(code="print(0.30001)", inputs=["\n"], outputs=["0.3\n"]),
        Job(code="def add(a, b):\n    return a + b", inputs=[[1, 2], [1.5, 2]], outputs=[3, 3.5], fn_name="add"),
        Job(code="def add(a, b):\n    return a - b", inputs=[[1, 2]], outputs=[3], fn_name="add"),
        Job(code="def add(a, b):\n    return {a}", inputs=[[1, 2]], outputs=[3], fn_name="add"),
        Job(
            code="class Solution:\n    def add(self, xs: List[int]) -> int:\n        return sum(xs)",
            inputs=[[[1, 2]]],
            outputs=[3],
            fn_name="add",
        ),
    ]


def judged(result: ExecResult) -> tuple:
    """What the loop reads of a result (everything but the times)."""
    return (
        result.verdict,
        result.passed,
        result.total,
        result.detail,
        [(t.index, t.verdict, t.stdout, t.stderr) for t in result.tests],
    )


def test_fake_sandbox_judges_as_the_real_one():
    """FakeSandbox returns the real sandbox's verdict, failing test index, output, stderr and detail."""
    from mrgrpo.sandbox import run as real_run

    fake = FakeSandbox()
    for job in contract_jobs():
        assert judged(fake.run(job)) == judged(real_run(job)), job.code


def test_fake_sandbox_infra_at_a_chosen_test():
    """An INFRA injected at test 1 keeps test 0's result and reports the sandbox failure as the real one does."""
    from mrgrpo.sandbox import Job

    result = FakeSandbox(infra={GOOD: 1}).run(Job(code="print(int(input()) + 1)", **PUBLIC))
    assert (result.verdict, result.passed, result.detail) == (Verdict.INFRA, 1, "sandbox failed: worker died (fake)")
    assert [(t.index, t.verdict) for t in result.tests] == [(0, Verdict.AC), (1, Verdict.INFRA)]


def test_fake_server_stops_at_the_context_limit_without_an_end_token(tiny_tokenizer):
    """FakeServer clamps a turn to max_model_len - len(prompt), as vLLM does, and refuses a full context."""
    server = FakeServer(tiny_tokenizer, [GOOD, GOOD], max_model_len=10)
    out = asyncio.run(server.generate("r", prompt_ids=[1] * 4, sampling_params={"max_tokens": 100}))
    assert len(out.token_ids) == 6 and out.token_ids == tiny_tokenizer.encode(GOOD)[:6]
    with pytest.raises(ValueError, match="no room"):
        asyncio.run(server.generate("r", prompt_ids=[1] * 10, sampling_params={"max_tokens": 100}))


# ------------------------------------------------------------------ issue 17: the loop's less common paths
def prompt_len(tok, row) -> int:
    return len(initial_ids(tok, row["raw_prompt"]))


def test_infra_on_the_public_tests_ends_the_trajectory(tiny_tokenizer, monkeypatch):
    """INFRA (here at public test 1, after test 0 passed) stops with "infra": no feedback, nothing more generated."""
    tok = tiny_tokenizer
    box = FakeSandbox(infra={GOOD: 1})
    monkeypatch.setattr(al.PlanCodeAgentLoop, "judge", box)
    server = FakeServer(tok, [GOOD, GOOD])
    out = run(make_loop(tok, server, plan_source="none"), make_row())
    check_accounting(tok, out, server)
    ef = out.extra_fields
    assert (ef["stop_reason"], ef["attempts"], ef["public_verdicts"], ef["public_pass"]) == (
        "infra",
        1,
        ["INFRA"],
        [False],
    )
    assert ef["final_code"] == "print(int(input()) + 1)" and len(server.calls) == 1 and len(box.jobs) == 1
    assert out.response_mask == [1] * len(out.response_ids) and out.num_turns == 2


def test_infra_on_a_later_attempt_keeps_the_earlier_verdicts(tiny_tokenizer, monkeypatch):
    """An INFRA after a feedback round stops with "infra" and keeps the first attempt's verdict."""
    tok = tiny_tokenizer
    monkeypatch.setattr(al.PlanCodeAgentLoop, "judge", FakeSandbox(infra={CRASH: 0}))
    server = FakeServer(tok, [BAD, CRASH, GOOD])
    out = run(make_loop(tok, server, plan_source="none", rounds=2), make_row())
    check_accounting(tok, out, server)
    ef = out.extra_fields
    assert (ef["stop_reason"], ef["public_verdicts"], ef["final_code"]) == ("infra", ["WA", "INFRA"], "print(1 // 0)")
    assert len(server.script) == 1  # the third turn was never asked for


def test_code_turn_stopped_by_the_context_limit_is_truncated(tiny_tokenizer, sandbox):
    """A code turn that stops short of its cap without an end token is "truncated": not tested, its closed fence
    still the final code."""
    tok = tiny_tokenizer
    row = make_row()
    server = FakeServer(
        tok, [("cut", GOOD + "\nNow let me explain the idea." * 20)], max_model_len=prompt_len(tok, row) + 40
    )
    out = run(make_loop(tok, server, plan_source="none"), row)
    check_accounting(tok, out, server)
    assert server.calls[0]["params"]["max_tokens"] == 512 and len(out.response_ids) == 40
    ef = out.extra_fields
    assert (ef["stop_reason"], ef["attempts"], ef["public_verdicts"], ef["public_pass"]) == (
        "truncated",
        1,
        ["NOT_RUN"],
        [False],
    )
    assert ef["final_code"] == "print(int(input()) + 1)" and not sandbox.jobs


def test_aborted_turn_is_truncated_and_keeps_the_earlier_code(tiny_tokenizer, sandbox):
    """An aborted generation (no tokens) after a feedback round is "truncated"; final_code stays the last program."""
    tok = tiny_tokenizer
    server = FakeServer(tok, [BAD, ("abort", "")])
    out = run(make_loop(tok, server, plan_source="none"), make_row())
    check_accounting(tok, out, server)
    ef = out.extra_fields
    assert (ef["stop_reason"], ef["attempts"], ef["public_verdicts"]) == ("truncated", 2, ["WA", "NOT_RUN"])
    assert ef["final_code"] == "print(int(input()))" and len(sandbox.jobs) == 1
    # the response ends with the injected feedback turn and its generation prompt: nothing was generated after it
    assert decoded_response(tok, out).endswith("<|im_end|>\n" + GEN) and sum(out.response_mask) == len(
        server.outputs[0]
    )


@pytest.mark.parametrize("cap", [64, None])
def test_plan_stopped_short_of_its_cap_is_truncated(tiny_tokenizer, sandbox, cap):
    """A plan turn that stops below plan_max_tokens (or with no cap) without an end token is "truncated"."""
    tok = tiny_tokenizer
    row = make_row()
    first = prompts.build_plan_turn_prompt(STATEMENT, "", "stdio", None)
    n_prompt = len(initial_ids(tok, [row["raw_prompt"][0], {"role": "user", "content": first}]))
    server = FakeServer(tok, [("cut", "Plan: " + "step " * 100), GOOD], max_model_len=n_prompt + 20)
    out = run(make_loop(tok, server, plan_source="self", plan_max_tokens=cap), row)
    check_accounting(tok, out, server)
    ef = out.extra_fields
    assert (ef["stop_reason"], ef["attempts"], ef["plan_tokens"], ef["public_pass"]) == ("truncated", 0, 20, [])
    assert ef["plan"] == tok.decode(server.outputs[0]).strip() and len(server.calls) == 1
    assert out.response_mask == [1] * 20


def test_final_code_survives_attempts_without_code(tiny_tokenizer, sandbox):
    """An attempt without a program (NO_CODE) does not clear the final code of an earlier attempt."""
    tok = tiny_tokenizer
    server = FakeServer(tok, [BAD, "I am not sure; maybe add one?"])
    out = run(make_loop(tok, server, plan_source="none", rounds=1), make_row())
    check_accounting(tok, out, server)
    ef = out.extra_fields
    assert (ef["stop_reason"], ef["public_verdicts"], ef["final_code"]) == (
        "rounds",
        ["WA", "NO_CODE"],
        "print(int(input()))",
    )
    assert len(sandbox.jobs) == 1


def test_plan_cap_above_the_remaining_budget_asks_for_the_budget(tiny_tokenizer, sandbox):
    """With plan_max_tokens above the remaining budget, the plan turn gets the budget and ends the trajectory there."""
    tok = tiny_tokenizer
    server = FakeServer(tok, [("cut", "Plan: " + "step " * 200)])
    out = run(
        make_loop(tok, server, cfg=make_config(response_length=40), plan_source="self", plan_max_tokens=100), make_row()
    )
    check_accounting(tok, out, server)
    assert server.calls[0]["params"]["max_tokens"] == 40
    assert out.response_mask == [1] * 40 and out.extra_fields["stop_reason"] == "budget"


def test_plan_cap_leaving_too_little_budget_stops_before_closing_the_plan(tiny_tokenizer, sandbox):
    """A plan cut at its cap is closed only by the code request's injected turn; if fewer than min_turn_tokens
    remain the loop stops with "budget" before it, and the response ends with the plan's last token."""
    tok = tiny_tokenizer
    server = FakeServer(tok, [("cut", "Plan: " + "step " * 200), GOOD])
    cfg = make_config(response_length=50, plan_source="self", plan_max_tokens=30, min_turn_tokens=32)
    out = run(make_loop(tok, server, cfg=cfg), make_row())
    check_accounting(tok, out, server)
    assert server.calls[0]["params"]["max_tokens"] == 30
    assert out.response_mask == [1] * 30 and out.response_ids == server.outputs[0]
    ef = out.extra_fields
    assert (ef["stop_reason"], ef["attempts"], ef["plan_tokens"], ef["injected_tokens"]) == ("budget", 0, 30, 0)


def measure_turns(tok, script, **settings):
    """Token counts of a run with a large budget: [len of each generation], [len of each injected stretch]."""
    server = FakeServer(tok, list(script))
    out = run(make_loop(tok, server, **settings), make_row())
    base = len(out.prompt_ids)
    gen = [len(o) for o in server.outputs]
    injected = [len(c["prompt_ids"]) - base - sum(gen[:i]) for i, c in enumerate(server.calls)]
    return gen, [b - a for a, b in zip(injected, injected[1:], strict=False)], out


@pytest.mark.parametrize("spare", [-1, 0])
def test_min_turn_tokens_bounds_the_ask_code_turn(tiny_tokenizer, sandbox, spare):
    """The code request after a plan is appended only if min_turn_tokens remain after it (exactly that many is
    enough); otherwise the loop stops with "budget" without it."""
    tok = tiny_tokenizer
    m = len(tok.encode(GOOD)) + 1
    plan_turn = "Plan: read n, print n + 1."
    (n_plan, _), (n_ask,), _ = measure_turns(tok, [plan_turn, GOOD], plan_source="self")
    server = FakeServer(tok, [plan_turn, GOOD])
    cfg = make_config(response_length=n_plan + n_ask + m + spare, plan_source="self", min_turn_tokens=m)
    out = run(make_loop(tok, server, cfg=cfg), make_row())
    check_accounting(tok, out, server)
    ef = out.extra_fields
    if spare < 0:
        assert (ef["stop_reason"], ef["attempts"], len(server.calls)) == ("budget", 0, 1)
        assert out.response_mask == [1] * n_plan and out.num_turns == 2
    else:
        assert (ef["stop_reason"], ef["attempts"], server.calls[1]["params"]["max_tokens"]) == ("passed", 1, m)


@pytest.mark.parametrize("spare", [-1, 0])
def test_min_turn_tokens_bounds_the_feedback_turn(tiny_tokenizer, sandbox, spare):
    """The feedback turn is appended only if min_turn_tokens remain after it (exactly that many is enough)."""
    tok = tiny_tokenizer
    m = len(tok.encode(GOOD)) + 1
    (n_bad, _), (n_feedback,), _ = measure_turns(tok, [BAD, GOOD], plan_source="none")
    server = FakeServer(tok, [BAD, GOOD])
    cfg = make_config(response_length=n_bad + n_feedback + m + spare, plan_source="none", min_turn_tokens=m)
    out = run(make_loop(tok, server, cfg=cfg), make_row())
    check_accounting(tok, out, server)
    ef = out.extra_fields
    if spare < 0:
        assert (ef["stop_reason"], ef["public_verdicts"], len(server.calls)) == ("budget", ["WA"], 1)
        assert out.response_mask == [1] * n_bad and out.num_turns == 2
    else:
        assert (ef["stop_reason"], ef["public_verdicts"]) == ("passed", ["WA", "AC"])
        assert server.calls[1]["params"]["max_tokens"] == m


def test_feedback_fields_are_clipped_to_feedback_max_chars(tiny_tokenizer, sandbox):
    """The program's output in the feedback is cut to feedback_max_chars, with the count of what was cut."""
    tok = tiny_tokenizer
    server = FakeServer(tok, [LOUD, GOOD])
    out = run(make_loop(tok, server, plan_source="none", feedback_max_chars=10), make_row())
    check_accounting(tok, out, server)
    text = decoded_response(tok, out)
    assert "Your output:\n```\nxxxxxxxxxx\n... [41 more characters]\n```" in text
    expected = prompts.build_feedback_prompt(
        [{"verdict": "WA (wrong answer)", "input": "1\n", "expected": "2\n", "got": "x" * 50 + "\n", "stderr": ""}],
        n_shown=1,
        max_chars=10,
    )
    assert expected in text


def test_feedback_stderr_is_its_tail(tiny_tokenizer, sandbox):
    """The runtime error's stderr in the feedback is its last feedback_stderr_chars characters."""
    from mrgrpo.sandbox import Job

    tok = tiny_tokenizer
    stderr = FakeSandbox().run(Job(code="print(1 // 0)", **PUBLIC)).tests[0].stderr
    out = run(make_loop(tok, FakeServer(tok, [CRASH, GOOD]), plan_source="none", feedback_stderr_chars=25), make_row())
    text = decoded_response(tok, out)
    assert f"Error output (tail):\n```\n[... {len(stderr) - 25} characters cut]\n{stderr[-25:]}\n```" in text
    assert stderr[:-25] not in text


def test_syntax_error_feedback_shows_the_compiler_message(tiny_tokenizer, sandbox):
    """A program that does not compile is SE; its feedback shows the compiler's message (no test ran)."""
    tok = tiny_tokenizer
    server = FakeServer(tok, [SYNTAX, GOOD])
    out = run(make_loop(tok, server, plan_source="none"), make_row())
    check_accounting(tok, out, server)
    assert out.extra_fields["public_verdicts"] == ["SE", "AC"]
    message = prompts.feedback_turn(
        "SE", PUBLIC["inputs"], PUBLIC["outputs"], detail="SyntaxError: '(' was never closed (line 1)"
    )
    assert message in decoded_response(tok, out)


def test_time_limit_feedback(tiny_tokenizer, sandbox):
    """A program that does not finish is TLE on public test 0; its feedback names the verdict and the test."""
    tok = tiny_tokenizer
    server = FakeServer(tok, [HANG, GOOD])
    out = run(make_loop(tok, server, plan_source="none"), make_row())
    check_accounting(tok, out, server)
    assert out.extra_fields["public_verdicts"] == ["TLE", "AC"]
    message = prompts.feedback_turn("TLE", PUBLIC["inputs"], PUBLIC["outputs"], 0, failing_verdict="TLE")
    assert message in decoded_response(tok, out) and "Your output" not in message


def test_float_tolerance_of_the_public_tests_decides_the_verdict(tiny_tokenizer, sandbox):
    """The public tests' float_tol is honoured: an answer within it passes, the same answer without it fails."""
    tok = tiny_tokenizer
    near = "```python\ninput()\nprint(0.30001)\n```"
    verdicts = []
    for extra in ({"float_tol": 1e-3}, {}):
        tests = json.dumps({"inputs": ["1\n"], "outputs": ["0.3\n"], **extra})
        out = run(make_loop(tok, FakeServer(tok, [near]), plan_source="none", rounds=0), make_row(public_tests=tests))
        verdicts.append(out.extra_fields["public_verdicts"])
    assert verdicts == [["AC"], ["WA"]]


def test_logprob_values_are_carried_into_the_output(tiny_tokenizer, sandbox):
    """The response logprobs are the server's values for generated tokens and 0.0 for injected ones, in order."""
    tok = tiny_tokenizer
    server = FakeServer(tok, [BAD, GOOD])
    out = run(make_loop(tok, server, plan_source="none"), make_row())
    n_injected = len(out.response_ids) - len(server.outputs[0]) - len(server.outputs[1])
    assert out.response_logprobs == server.logprobs[0] + [0.0] * n_injected + server.logprobs[1]
    assert out.response_logprobs[0] == -(1 + 1 / 1024) and out.response_logprobs[-1] != out.response_logprobs[0]
