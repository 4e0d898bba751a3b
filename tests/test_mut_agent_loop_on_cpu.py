"""mrgrpo.agent_loop against its surviving mutants (docs/testing.md): stop reasons at their boundaries, the
feedback turn's wording and limits, the error outcome, the sandbox seam and its timing, the row helpers.

Built on the shared fakes of `tests/fakes/loop_fakes.py` (a server that can stop short of its cap, a sandbox that
runs the program and judges it as the real one does).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging

import pytest

import mrgrpo.agent_loop as al
import mrgrpo.sandbox
from mrgrpo import prompts
from mrgrpo.testset import TestSet

from loop_fakes import (
    BAD,
    GOOD,
    PUBLIC,
    FakeSandbox,
    FakeServer,
    check_accounting,
    decoded_response,
    initial_ids,
    make_config,
    make_loop,
    make_row,
)
from loop_fakes import run_loop as run

SYNTAX = "```python\nprint(int(input())\n```"


@pytest.fixture
def sandbox(monkeypatch):
    box = FakeSandbox()
    monkeypatch.setattr(al.PlanCodeAgentLoop, "judge", box)
    return box


# ------------------------------------------------------------------ module helpers
def test_recipe_settings_names_the_missing_yaml(monkeypatch, tmp_path):
    """Without the trainer yaml, recipe_settings says where the settings live and how to get them."""
    missing = tmp_path / "nope.yaml"
    import mrgrpo.config

    monkeypatch.setattr(mrgrpo.config, "TRAINER_YAML", missing)
    with pytest.raises(FileNotFoundError) as exc:
        al.recipe_settings()
    assert str(exc.value) == (
        f"{missing} not found: the agent loop's settings live in its mrgrpo.agent_loop section (run from a checkout "
        "of mrgrpo)"
    )


def test_the_sandbox_seam_is_mrgrpo_sandbox():
    """Unpatched, the loop's sandbox is the real mrgrpo.sandbox module."""
    assert al.PlanCodeAgentLoop.judge is mrgrpo.sandbox


def test_a_subclass_or_one_loop_gets_its_own_judge_and_the_class_keeps_the_sandbox(tiny_tokenizer):
    """The judge is a class attribute: a subclass or one instance replaces it, nothing global changes."""
    tok = tiny_tokenizer

    class Judged(al.PlanCodeAgentLoop):
        judge = FakeSandbox(infra={GOOD: 0})

    from verl.experimental.agent_loop.agent_loop import DictConfigWrap
    from verl.utils.dataset.rl_dataset import RLHFDataset

    cfg = make_config(plan_source="none")
    loop = Judged(trainer_config=DictConfigWrap(cfg), server_manager=FakeServer(tok, [GOOD]), tokenizer=tok,
                  processor=None, dataset_cls=RLHFDataset, data_config=DictConfigWrap(cfg.data), hf_model_type="qwen3")
    assert run(loop, make_row()).extra_fields["stop_reason"] == "infra"
    loop = make_loop(tok, FakeServer(tok, [BAD]), plan_source="none", rounds=0)
    loop.judge = box = FakeSandbox()
    assert run(loop, make_row()).extra_fields["public_verdicts"] == ["WA"] and len(box.jobs) == 1
    assert al.PlanCodeAgentLoop.judge is mrgrpo.sandbox


def test_sandbox_semaphore_accepts_one_and_refuses_zero():
    """A bound of 1 is valid (one job at a time); 0 raises with the value."""

    async def make(bound):
        return al.sandbox_semaphore(bound)

    assert asyncio.run(make(1))._value == 1
    with pytest.raises(ValueError, match=r"^sandbox concurrency must be >= 1, got 0$"):
        asyncio.run(make(0))


def test_sandbox_semaphore_is_per_event_loop():
    """Each event loop gets its own semaphore; the same loop and bound get the same one."""

    async def get():
        return al.sandbox_semaphore(2)

    loops = [asyncio.new_event_loop(), asyncio.new_event_loop()]
    try:  # both loops stay alive, so their ids differ
        a, b = (lp.run_until_complete(get()) for lp in loops)
        again = loops[1].run_until_complete(get())
    finally:
        for lp in loops:
            lp.close()
    assert a is not b and again is b


def test_a_row_without_public_tests_is_an_empty_test_set():
    """No or blank public_tests: an empty TestSet named after the row."""
    for info in (
        {"source_id": "t:9"},
        {"source_id": "t:9", "public_tests": None},
        {"source_id": "t:9", "public_tests": "  \n"},
    ):
        tests = al.parse_public_tests(info)
        assert (tests.inputs, tests.outputs, tests.where) == ([], [], "row t:9 extra_info.public_tests")
    assert al.parse_public_tests({}).where == "row ? extra_info.public_tests"


def test_public_test_errors_name_the_row():
    """A malformed public_tests value is reported with the row's source_id."""
    with pytest.raises(ValueError, match=r"^row t:3 extra_info\.public_tests: 1 inputs but 0 outputs"):
        al.parse_public_tests({"source_id": "t:3", "public_tests": json.dumps({"inputs": ["1\n"], "outputs": []})})


def test_io_mode_mismatch_names_the_row_and_both_values():
    """io_mode call without fn_name (or the reverse) raises naming the row, io_mode and fn_name."""
    tests = {"inputs": [[1, 2]], "outputs": [[3]], "fn_name": "add"}
    info = {"source_id": "t:4", "io_mode": "stdio", "public_tests": json.dumps(tests)}
    with pytest.raises(ValueError, match=r"^row t:4 extra_info\.public_tests: io_mode 'stdio' but fn_name 'add'$"):
        al.parse_public_tests(info)


def test_unknown_stop_reason_is_named():
    """_stop refuses a reason outside STOP_REASONS, naming it."""
    with pytest.raises(ValueError, match=r"^unknown stop reason 'bogus'$"):
        al.PlanCodeAgentLoop._stop(al.Trajectory("r", "none", {}, {}), "bogus")


# ------------------------------------------------------------------ stop reasons
def test_no_public_tests_records_not_run(tiny_tokenizer, sandbox):
    """A row without public tests stops with "no_public_tests" and records the attempt as NOT_RUN."""
    tok = tiny_tokenizer
    row = make_row(public_tests=json.dumps({"inputs": [], "outputs": []}))
    out = run(make_loop(tok, FakeServer(tok, [GOOD]), plan_source="none"), row)
    ef = out.extra_fields
    assert (ef["stop_reason"], ef["public_verdicts"], ef["public_pass"]) == ("no_public_tests", ["NOT_RUN"], [False])


def test_too_little_budget_after_a_failed_attempt_stops_before_feedback(tiny_tokenizer, sandbox):
    """Fewer than min_turn_tokens left after a failed attempt: "budget", nothing appended."""
    tok = tiny_tokenizer
    n_bad = len(tok.encode(BAD)) + 1
    cfg = make_config(response_length=n_bad + 3, plan_source="none", min_turn_tokens=4)
    server = FakeServer(tok, [BAD, GOOD])
    out = run(make_loop(tok, server, cfg=cfg), make_row())
    ef = out.extra_fields
    assert (ef["stop_reason"], ef["public_verdicts"]) == ("budget", ["WA"])
    assert out.response_mask == [1] * n_bad and len(server.calls) == 1


def test_plan_cut_with_one_token_left_stops_unclosed(tiny_tokenizer, sandbox):
    """A plan cut at its cap with one token of budget left stops with "budget"; the closing end token belongs to
    the code request that did not fit, so none is appended (the response ends with the plan's last token)."""
    tok = tiny_tokenizer
    server = FakeServer(tok, [("cut", "Plan: " + "step " * 100)])
    cfg = make_config(response_length=31, plan_source="self", plan_max_tokens=30)
    out = run(make_loop(tok, server, cfg=cfg), make_row())
    check_accounting(tok, out, server)
    assert out.response_mask == [1] * 30 and out.extra_fields["stop_reason"] == "budget"


def test_rounds_count_every_feedback_round(tiny_tokenizer, sandbox):
    """rounds=2 allows exactly two feedback rounds: three failed attempts stop with "rounds"."""
    tok = tiny_tokenizer
    server = FakeServer(tok, [BAD, BAD, BAD, GOOD])
    out = run(make_loop(tok, server, plan_source="none", rounds=2), make_row())
    ef = out.extra_fields
    assert (ef["stop_reason"], ef["attempts"], ef["public_verdicts"]) == ("rounds", 3, ["WA", "WA", "WA"])
    assert len(server.script) == 1


def test_num_turns_counts_every_injected_turn(tiny_tokenizer, sandbox):
    """num_turns = 1 (prompt) + generations + injected user turns: two feedback rounds make 6."""
    tok = tiny_tokenizer
    out = run(make_loop(tok, FakeServer(tok, [BAD, BAD, GOOD]), plan_source="none", rounds=2), make_row())
    assert out.num_turns == 6 and out.extra_fields["stop_reason"] == "passed"


def test_infra_on_public_tests_is_logged(tiny_tokenizer, monkeypatch, caplog):
    """A public-test INFRA logs one warning with the sandbox's detail."""
    tok = tiny_tokenizer
    monkeypatch.setattr(al.PlanCodeAgentLoop, "judge", FakeSandbox(infra={GOOD: 0}))
    with caplog.at_level(logging.WARNING, logger="mrgrpo.agent_loop"):
        run(make_loop(tok, FakeServer(tok, [GOOD]), plan_source="none"), make_row())
    assert [r.getMessage() for r in caplog.records if r.name == "mrgrpo.agent_loop"] == [
        "mrgrpo: sandbox INFRA on public tests (sandbox failed: worker died (fake)); ending the trajectory"
    ]


# ------------------------------------------------------------------ feedback wording
def test_no_code_feedback_is_exact(tiny_tokenizer):
    """An attempt without a program gets exactly the NO_CODE feedback turn."""
    loop = make_loop(tiny_tokenizer, FakeServer(tiny_tokenizer, []))
    tests = TestSet(["1\n"], ["2\n"])
    assert loop.feedback_message(None, tests) == prompts.feedback_turn("NO_CODE", ["1\n"], ["2\n"])
    assert "NO_CODE (no ```python code block found in your answer)" in loop.feedback_message(None, tests)


def test_feedback_shows_the_first_failing_test_not_a_passed_one(tiny_tokenizer, sandbox):
    """A program that passes public test 0 and fails test 1 gets feedback on test 1 (input 5, expected 6)."""
    tok = tiny_tokenizer
    second = "```python\nn = int(input())\nprint(2 if n == 1 else 0)\n```"
    out = run(make_loop(tok, FakeServer(tok, [second, GOOD]), plan_source="none"), make_row())
    message = prompts.feedback_turn("WA", PUBLIC["inputs"], PUBLIC["outputs"], 1, failing_verdict="WA", stdout="0\n")
    assert message in decoded_response(tok, out) and "Input:\n```\n5\n" in message


def test_syntax_error_feedback_tail_follows_feedback_stderr_chars(tiny_tokenizer, sandbox):
    """The SE message (no test ran) is cut to its last feedback_stderr_chars characters."""
    tok = tiny_tokenizer
    out = run(make_loop(tok, FakeServer(tok, [SYNTAX, GOOD]), plan_source="none", feedback_stderr_chars=10), make_row())
    detail = "SyntaxError: '(' was never closed (line 1)"
    assert f"[... {len(detail) - 10} characters cut]\n{detail[-10:]}" in decoded_response(tok, out)
    assert detail not in decoded_response(tok, out)


# ------------------------------------------------------------------ error outcome
def test_error_message_names_the_exception_type(tiny_tokenizer, sandbox):
    """The error field is 'Type: message'."""
    tok = tiny_tokenizer
    out = run(make_loop(tok, FakeServer(tok, [BAD]), plan_source="none", rounds=1), make_row())
    assert out.extra_fields["error"] == "AssertionError: the loop asked for more turns than scripted"


def test_error_message_is_cut_to_500_characters(tiny_tokenizer, sandbox):
    """A long exception message is kept to its first 500 characters."""

    class Raising:
        async def generate(self, *args, **kwargs):
            raise RuntimeError("x" * 1000)

    out = run(make_loop(tiny_tokenizer, Raising(), plan_source="none"), make_row())
    assert out.extra_fields["error"] == ("RuntimeError: " + "x" * 1000)[:500]


def test_an_error_after_a_tested_attempt_adds_no_verdict(tiny_tokenizer, sandbox):
    """A failure in a later generation keeps one verdict per attempt made (no extra NOT_RUN)."""
    tok = tiny_tokenizer
    out = run(make_loop(tok, FakeServer(tok, [BAD]), plan_source="none", rounds=1), make_row())
    ef = out.extra_fields
    assert (ef["stop_reason"], ef["attempts"], ef["public_verdicts"], ef["public_pass"]) == (
        "error",
        1,
        ["WA"],
        [False],
    )


def test_an_attempt_the_sandbox_failed_on_is_not_run(tiny_tokenizer, monkeypatch):
    """When the sandbox call raises, the attempt is recorded as NOT_RUN in the error outcome."""

    class Exploding(FakeSandbox):
        async def run_async(self, job):
            raise RuntimeError("sandbox exploded")

    monkeypatch.setattr(al.PlanCodeAgentLoop, "judge", Exploding())
    tok = tiny_tokenizer
    out = run(make_loop(tok, FakeServer(tok, [GOOD]), plan_source="none"), make_row())
    ef = out.extra_fields
    assert (ef["stop_reason"], ef["error"], ef["public_verdicts"], ef["public_pass"]) == (
        "error",
        "RuntimeError: sandbox exploded",
        ["NOT_RUN"],
        [False],
    )


def test_broken_token_accounting_still_gives_an_aligned_error_outcome(tiny_tokenizer):
    """An error outcome whose stream does not match its mask (a broken contract) is built from the stream, every
    token masked and aligned, instead of raising out of the worker (issue 33)."""
    loop = make_loop(tiny_tokenizer, FakeServer(tiny_tokenizer, []))
    t = al.Trajectory("r", "none", {}, {"logprobs": True}, token_ids=[1, 2, 3, 4], prompt_len=3, response_mask=[])
    out = loop.loop.run_until_complete(loop._error_output(t, ValueError("x")))
    assert (out.prompt_ids, out.response_ids, out.response_mask, out.response_logprobs) == ([1, 2, 3], [4], [0], [0.0])
    assert (out.extra_fields["stop_reason"], out.extra_fields["error"]) == ("error", "ValueError: x")


# ------------------------------------------------------------------ timing
def test_sandbox_and_generation_times_are_recorded(tiny_tokenizer, sandbox, monkeypatch):
    """Each sandbox call's time is kept (rounded to 6 digits) and summed into tool_calls; generations into
    generate_sequences."""
    steps = {"generate_sequences": 0.25, "tool_calls": 0.1234567, "call": 0.1234567}

    @contextlib.contextmanager
    def fixed_timer(name, timing_raw):
        yield
        timing_raw[name] = timing_raw.get(name, 0) + steps[name]

    monkeypatch.setattr(al, "simple_timer", fixed_timer)
    tok = tiny_tokenizer
    out = run(make_loop(tok, FakeServer(tok, [BAD, GOOD]), plan_source="none"), make_row())
    assert out.extra_fields["sandbox_s"] == [0.123457, 0.123457]
    assert out.metrics.tool_calls == 0.1234567 + 0.1234567 and out.metrics.generate_sequences == 0.5


# ------------------------------------------------------------------ construction
def test_min_turn_tokens_of_one_is_valid(tiny_tokenizer):
    """min_turn_tokens=1 is the smallest valid value."""
    assert make_loop(tiny_tokenizer, object(), min_turn_tokens=1).min_turn_tokens == 1


def test_missing_setting_message_is_complete(tiny_tokenizer):
    """A missing setting is named with the yaml that holds every default."""
    cfg = make_config()
    del cfg.mrgrpo.agent_loop["rounds"]
    with pytest.raises(KeyError) as exc:
        make_loop(tiny_tokenizer, object(), cfg=cfg)
    assert exc.value.args[0] == (
        "PlanCodeAgentLoop: the trainer config has no mrgrpo.agent_loop.{rounds}; compose it from "
        "mrgrpo_trainer.yaml (mrgrpo/config), whose mrgrpo.agent_loop section holds every setting's default"
    )


def test_positional_construction(tiny_tokenizer):
    """The loop takes AgentLoopBase's positional arguments."""
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap
    from verl.utils.dataset.rl_dataset import RLHFDataset

    cfg = make_config()
    loop = al.PlanCodeAgentLoop(
        DictConfigWrap(cfg), object(), tiny_tokenizer, None, RLHFDataset, DictConfigWrap(cfg.data), "qwen3"
    )
    assert loop.tokenizer is tiny_tokenizer and loop.response_length == 512


def test_marker_line_names_the_loop_settings(tiny_tokenizer, monkeypatch, capsys):
    """Constructing the loop writes one marker line with its class, rounds, plan source and response length."""
    import os

    from mrgrpo import marker

    monkeypatch.setattr(marker, "_seen", set())
    make_loop(tiny_tokenizer, object(), rounds=3, plan_source="none")
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("MRGRPO_MARKER")]
    assert lines == [
        f"MRGRPO_MARKER component=agent_loop pid={os.getpid()} cls=PlanCodeAgentLoop rounds=3 "
        "plan_source=none response_length=512"
    ]


def tokenizer_with_eos(tok, eos: str):
    import copy

    other = copy.deepcopy(tok)
    other.eos_token = eos
    return other


def test_close_turn_is_im_end_when_eos_is_endoftext(tiny_tokenizer):
    """With eos <|endoftext|> (as Qwen base models) both end a turn, and injected turn ends are <|im_end|>."""
    tok = tokenizer_with_eos(tiny_tokenizer, "<|endoftext|>")
    loop = make_loop(tok, object())
    im_end, eot = tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")
    assert loop.eos_ids == {im_end, eot} and loop.close_turn_id == im_end


def test_another_eos_is_an_end_of_turn_too(tiny_tokenizer):
    """The tokenizer's eos counts as an end of turn besides <|im_end|> and <|endoftext|>."""
    tok = tokenizer_with_eos(tiny_tokenizer, "</tool_call>")
    loop = make_loop(tok, object())
    ids = {tok.convert_tokens_to_ids(t) for t in ("</tool_call>", "<|im_end|>", "<|endoftext|>")}
    assert loop.eos_ids == ids and loop.close_turn_id == tok.convert_tokens_to_ids("<|im_end|>")


def test_without_im_end_the_eos_closes_turns(tiny_tokenizer, monkeypatch):
    """A tokenizer without <|im_end|> (a non-ChatML model: verl's generic token builder) closes turns with its eos."""
    tok = tokenizer_with_eos(tiny_tokenizer, "<|endoftext|>")
    real = type(tok).convert_tokens_to_ids
    monkeypatch.setattr(
        type(tok), "convert_tokens_to_ids", lambda self, t: None if t == "<|im_end|>" else real(self, t)
    )
    loop = al.build_loop(make_config(), object(), tok, hf_model_type=None)
    assert loop.eos_ids == {tok.eos_token_id} and loop.close_turn_id == tok.eos_token_id


class StubTokenizer:
    """Just what `_end_of_turn_ids` reads; ``ids`` maps token names to what the tokenizer returns for them."""

    def __init__(self, eos, ids, **attrs):
        self.eos_token_id = eos
        self.ids = ids
        self.__dict__.update(attrs)

    def convert_tokens_to_ids(self, token):
        return self.ids.get(token)


def end_of_turn_ids(tokenizer):
    from types import SimpleNamespace

    return al.PlanCodeAgentLoop._end_of_turn_ids(SimpleNamespace(tokenizer=tokenizer))


def test_end_of_turn_ids_skip_unknown_and_missing_tokens():
    """<|im_end|>/<|endoftext|> count only when the tokenizer has them: not None, not its unk id, not negative."""
    assert end_of_turn_ids(StubTokenizer(7, {"<|im_end|>": 3, "<|endoftext|>": 0}, unk_token_id=0)) == {7, 3}
    assert end_of_turn_ids(StubTokenizer(7, {"<|im_end|>": -1})) == {7}
    assert end_of_turn_ids(StubTokenizer(None, {"<|endoftext|>": 5})) == {5}


def test_no_end_of_turn_token_is_an_error():
    """A tokenizer with no eos and neither end token is refused with a message."""
    with pytest.raises(ValueError) as exc:
        end_of_turn_ids(StubTokenizer(None, {}))
    assert str(exc.value) == "PlanCodeAgentLoop: the tokenizer has no end-of-turn token (eos_token_id is None)"


def test_extra_info_from_a_numpy_cell():
    """extra_info may arrive as a 0-d numpy object array holding the dict (a batch cell)."""
    import numpy as np

    cell = np.empty((), dtype=object)
    cell[()] = {"source_id": "t:1"}
    assert al._as_dict(cell) == {"source_id": "t:1"} and al._as_dict(None) == {}


def test_extra_info_of_another_type_is_named():
    """A non-dict extra_info (also inside a numpy cell) raises naming the type."""
    import numpy as np

    with pytest.raises(TypeError, match=r"^extra_info must be a dict, got list$"):
        al._as_dict([1])
    with pytest.raises(TypeError, match=r"^extra_info must be a dict, got int$"):
        al._as_dict(np.array(5, dtype=object))


# ------------------------------------------------------------------ run
def test_missing_raw_prompt_is_named(tiny_tokenizer):
    """A row without raw_prompt raises naming the data setting that provides it."""
    loop = make_loop(tiny_tokenizer, object())
    with pytest.raises(KeyError) as exc:
        loop.loop.run_until_complete(loop.run({}, extra_info={}))
    assert exc.value.args[0] == "PlanCodeAgentLoop needs the row's raw_prompt (data.return_raw_chat=True)"


def test_priority_defaults_to_zero(tiny_tokenizer, sandbox):
    """Without a priority the requests carry priority 0 (and the deterministic id det-0)."""
    tok = tiny_tokenizer
    cfg = make_config(plan_source="none")
    cfg.actor_rollout_ref.rollout.full_determinism = True
    server = FakeServer(tok, [GOOD])
    run(make_loop(tok, server, cfg=cfg), make_row())
    assert (server.calls[0]["priority"], server.calls[0]["request_id"]) == (0, "det-0")


def test_request_ids_are_random_without_the_determinism_setting(tiny_tokenizer, sandbox):
    """A rollout config without full_determinism gets a fresh uuid per trajectory."""
    tok = tiny_tokenizer
    cfg = make_config(plan_source="none")
    del cfg.actor_rollout_ref.rollout["full_determinism"]
    server = FakeServer(tok, [GOOD, GOOD])
    loop = make_loop(tok, server, cfg=cfg)
    run(loop, make_row())
    run(loop, make_row())
    ids = [c["request_id"] for c in server.calls]
    assert ids[0] != ids[1] and all(len(i) == 32 and not i.startswith("det-") for i in ids)


def test_a_failed_trajectory_is_logged_with_row_and_state(tiny_tokenizer, sandbox, caplog):
    """A trajectory that raises is logged with its row and the state it failed in."""
    tok = tiny_tokenizer
    with caplog.at_level(logging.ERROR, logger="mrgrpo.agent_loop"):
        run(make_loop(tok, FakeServer(tok, [GOOD]), plan_source="teacher"), make_row())
        row = make_row()
        del row["extra_info"]["source_id"]
        run(make_loop(tok, FakeServer(tok, [GOOD]), plan_source="teacher"), row)
    assert [r.getMessage() for r in caplog.records if r.name == "mrgrpo.agent_loop"] == [
        "mrgrpo: trajectory of row t:0 failed in state start",
        "mrgrpo: trajectory of row ? failed in state start",
    ]


def test_error_count_goes_up_by_one_and_resets_on_success(tiny_tokenizer, sandbox, monkeypatch):
    """Each failed trajectory adds one to the consecutive-error count; a completed one resets it to 0."""
    tok = tiny_tokenizer
    monkeypatch.setattr(al, "_consecutive_errors", al.MAX_CONSECUTIVE_ERRORS - 2)
    run(make_loop(tok, FakeServer(tok, []), plan_source="teacher"), make_row())  # fails: no plan
    assert al._consecutive_errors == al.MAX_CONSECUTIVE_ERRORS - 1
    run(make_loop(tok, FakeServer(tok, [GOOD]), plan_source="none"), make_row())
    assert al._consecutive_errors == 0


# ------------------------------------------------------------------ generation
def test_plan_cap_is_at_least_one_token(tiny_tokenizer, sandbox):
    """plan_max_tokens=1 asks for exactly one token (the floor of the cap is 1)."""
    tok = tiny_tokenizer
    server = FakeServer(tok, [("cut", "Plan: " + "step " * 10), GOOD])
    out = run(make_loop(tok, server, plan_source="self", plan_max_tokens=1), make_row())
    assert server.calls[0]["params"]["max_tokens"] == 1 and out.extra_fields["plan_tokens"] == 1


def test_max_new_tokens_is_not_sent(tiny_tokenizer, sandbox):
    """The loop sends max_tokens and drops a max_new_tokens from the sampling params."""
    tok = tiny_tokenizer
    server = FakeServer(tok, [GOOD])
    run(make_loop(tok, server, plan_source="none"), make_row(), {"temperature": 1.0, "max_new_tokens": 7})
    assert server.calls[0]["params"] == {"temperature": 1.0, "max_tokens": 512}


def test_a_one_token_budget_is_generated(tiny_tokenizer, sandbox):
    """A budget of one token is still generated (and ends with "budget")."""
    tok = tiny_tokenizer
    server = FakeServer(tok, [("cut", GOOD)])
    out = run(make_loop(tok, server, cfg=make_config(response_length=1), plan_source="none"), make_row())
    assert server.calls[0]["params"]["max_tokens"] == 1 and out.extra_fields["stop_reason"] == "budget"


def test_generation_without_budget_is_refused(tiny_tokenizer):
    """Asking for a generation with no budget left raises before the server is called."""
    server = FakeServer(tiny_tokenizer, [GOOD])
    loop = make_loop(tiny_tokenizer, server)
    t = al.Trajectory("r", "none", {}, {}, response_mask=[1] * 512)
    with pytest.raises(RuntimeError) as exc:
        loop.loop.run_until_complete(loop._generate(t, cap=None))
    assert str(exc.value) == "PlanCodeAgentLoop: generation requested with no response budget left"
    assert not server.calls


def test_code_cut_with_one_token_left_is_truncated(tiny_tokenizer, sandbox):
    """A code turn the server stops one token short of the budget is "truncated", not "budget"."""
    tok = tiny_tokenizer
    row = make_row()
    n_prompt = len(initial_ids(tok, row["raw_prompt"]))
    server = FakeServer(tok, [("cut", "Thinking. " * 200)], max_model_len=n_prompt + 511)
    out = run(make_loop(tok, server, plan_source="none"), row)
    assert len(out.response_ids) == 511 and out.extra_fields["stop_reason"] == "truncated"


def test_preemptions_are_summed(tiny_tokenizer, sandbox):
    """num_preempted sums the server's counts over the turns; -1 when the server reports none."""
    tok = tiny_tokenizer
    out = run(make_loop(tok, FakeServer(tok, [BAD, GOOD], num_preempted=2), plan_source="none"), make_row())
    assert out.metrics.num_preempted == 4
    out = run(make_loop(tok, FakeServer(tok, [BAD, GOOD], num_preempted=None), plan_source="none"), make_row())
    assert out.metrics.num_preempted == -1


def test_metrics_without_any_generation_are_defaults(tiny_tokenizer, sandbox):
    """A trajectory that failed before generating reports 0.0 times and num_preempted -1."""
    tok = tiny_tokenizer
    out = run(make_loop(tok, FakeServer(tok, []), plan_source="teacher"), make_row())
    m = out.metrics
    assert (m.generate_sequences, m.tool_calls, m.num_preempted) == (0.0, 0.0, -1)


def test_server_extra_fields_first_turn_wins_but_max_global_steps_follows(tiny_tokenizer, sandbox):
    """The first turn's extra fields are kept; later turns update only max_global_steps."""
    tok = tiny_tokenizer
    extra = [
        {"max_global_steps": 5, "global_steps": 3},
        {"max_global_steps": 7, "global_steps": 4, "new": 1},
        {"global_steps": 9},
    ]
    server = FakeServer(tok, [BAD, BAD, GOOD], extra_fields=extra)
    out = run(make_loop(tok, server, plan_source="none"), make_row())
    ef = out.extra_fields
    assert (ef["max_global_steps"], ef["global_steps"], "new" in ef) == (7, 3, False)


def test_missing_logprobs_after_earlier_turns_is_an_error(tiny_tokenizer, sandbox):
    """A turn without logprobs after turns that had them ends the trajectory as an error naming the cause."""
    tok = tiny_tokenizer
    out = run(make_loop(tok, FakeServer(tok, [BAD, GOOD], logprobs=[True, False]), plan_source="none"), make_row())
    assert out.extra_fields["error"] == (
        "RuntimeError: the rollout server returned no logprobs for a turn after earlier turns had them"
    )


def test_upstream_extra_field_keys_are_written(tiny_tokenizer, sandbox):
    """turn_scores and tool_rewards are written (empty), as verl's own loops do."""
    tok = tiny_tokenizer
    out = run(make_loop(tok, FakeServer(tok, [GOOD]), plan_source="none"), make_row())
    assert (out.extra_fields["turn_scores"], out.extra_fields["tool_rewards"]) == ([], [])


# ------------------------------------------------------------------ output checks
def output_of(tiny_tokenizer, **fields):
    loop = make_loop(tiny_tokenizer, object())
    t = al.Trajectory("r", "none", {}, {}, token_ids=[1, 2, 3], prompt_len=2, response_mask=[1], stop_reason="passed")
    for key, value in fields.items():
        setattr(t, key, value)
    return loop._output(t)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"stop_reason": ""}, "PlanCodeAgentLoop finished without a stop reason"),
        ({"response_logprobs": [0.0, 0.0]}, "response logprobs are misaligned with the response mask"),
        ({"prompt_len": 1}, "the prompt changed during the rollout (Continuous Token merge trimmed the prompt)"),
        (
            {"token_ids": [0] * 600, "prompt_len": 0, "response_mask": [1] * 600},
            "response of 600 tokens exceeds response_length 512",
        ),
    ],
)
def test_output_refuses_a_broken_trajectory(tiny_tokenizer, fields, message):
    """_output raises on a trajectory it cannot turn into a consistent output, saying what is wrong."""
    with pytest.raises(RuntimeError) as exc:
        output_of(tiny_tokenizer, **fields)
    assert str(exc.value) == message
