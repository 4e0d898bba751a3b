"""The agent loop's token accounting with the real Qwen3 tokenizer and chat template.

tests/test_agent_loop_on_cpu.py drives every path with a locally trained tokenizer whose ChatML template never
drops anything. Qwen3's template re-renders history: an assistant turn before the last user query loses its
``<think>`` block, and the last assistant turn gets an empty one added. A loop that re-rendered its conversation
would then train on tokens the model never produced (or lose ones it did). These tests check, on multi-turn
trajectories whose turns think, with thinking on and off:

- the prompt ids are the template's rendering of the first turn's messages;
- every generated turn sits verbatim in the stream, right after the prompt its generate call was given;
- ``response_mask`` is 1 exactly on generated tokens (``check_accounting``);
- each injected span (mask 0) is the template's rendering of a user turn (plus the generation prompt), after the
  boundary the template writes (``\\n`` after a generated ``<|im_end|>``; ``<|im_end|>\\n`` when the loop closes a
  turn itself);
- ``len(response_ids) <= response_length``.
"""

from __future__ import annotations

import pytest

import mrgrpo.agent_loop as al
from mrgrpo import prompts

from loop_fakes import (
    BAD,
    GOOD,
    PLAN,
    STATEMENT,
    FakeSandbox,
    FakeServer,
    check_accounting,
    initial_ids,
    make_config,
    make_loop,
    make_row,
)
from loop_fakes import run_loop as run

IM_END, ENDOFTEXT, NEWLINE = 151645, 151643, 198
THINK = "<think>\nThe input is one integer; I should add one and print it.\n</think>\n\n"


@pytest.fixture
def sandbox(monkeypatch):
    box = FakeSandbox()
    monkeypatch.setattr(al.PlanCodeAgentLoop, "judge", box)
    return box


def _runs(mask: list[int]) -> list[tuple[int, int, int]]:
    """Maximal runs of equal mask values: (value, start, end)."""
    runs, start = [], 0
    for i in range(1, len(mask) + 1):
        if i == len(mask) or mask[i] != mask[start]:
            runs.append((mask[start], start, i))
            start = i
    return runs


def _user_turn_ids(tok, content: str, enable_thinking: bool) -> list[int]:
    """The template's rendering of one user turn followed by the generation prompt."""
    return list(
        tok.apply_chat_template([{"role": "user", "content": content}], tokenize=True, add_generation_prompt=True,
                                enable_thinking=enable_thinking, return_dict=False)
    )


def check_stream(tok, out, server, first_messages, enable_thinking, response_length, user_turns):
    """The properties in the module docstring. ``user_turns``: the injected user messages' contents, in order."""
    check_accounting(tok, out, server, enable_thinking=enable_thinking)
    assert out.prompt_ids == initial_ids(tok, first_messages, enable_thinking=enable_thinking)
    assert len(out.response_ids) <= response_length
    stream = out.prompt_ids + out.response_ids
    for call, generated in zip(server.calls, server.outputs, strict=True):
        start = len(call["prompt_ids"])
        assert stream[start : start + len(generated)] == generated  # verbatim, where its prompt ended
    injected = [(s, e) for value, s, e in _runs(out.response_mask) if value == 0]
    spans = [out.response_ids[s:e] for s, e in injected]
    users = list(user_turns)
    for span in spans:
        if span == [IM_END]:  # a turn closed by the loop at the end of the trajectory
            continue
        head = [IM_END, NEWLINE] if span[:2] == [IM_END, NEWLINE] else [NEWLINE]
        assert span[: len(head)] == head, tok.decode(span)
        assert users, f"an injected span that is no user turn: {tok.decode(span)!r}"
        assert span[len(head) :] == _user_turn_ids(tok, users.pop(0), enable_thinking), tok.decode(span)
    assert not users, f"user turns never injected: {users}"


@pytest.mark.parametrize("enable_thinking", [False, True])
def test_feedback_rounds_with_thinking_turns(qwen3_tokenizer, sandbox, enable_thinking):
    """Three attempts that each think; two feedback turns are injected between them."""
    tok = qwen3_tokenizer
    answers = [THINK + BAD, THINK + "```python\nprint(1 // 0)\n```", THINK + GOOD]
    if not enable_thinking:  # the generation prompt already holds the empty think block
        answers = [a[len(THINK) :] for a in answers]
    server = FakeServer(tok, answers)
    cfg = make_config(response_length=1024, enable_thinking=enable_thinking, plan_source="none", rounds=2)
    row = make_row()
    loop = make_loop(tok, server, cfg=cfg)
    out = run(loop, row)
    ef = out.extra_fields
    assert (ef["stop_reason"], ef["public_pass"]) == ("passed", [False, False, True])
    feedback = [m["content"] for m in _user_messages_after_first(loop, row, server, enable_thinking)]
    check_stream(tok, out, server, row["raw_prompt"], enable_thinking, 1024, feedback)
    # The re-rendered conversation is NOT the stream: the template drops the earlier turns' reasoning.
    if enable_thinking:
        history = tok.decode(out.prompt_ids + out.response_ids, skip_special_tokens=False)
        assert history.count("<think>") == 3  # every generated think block is kept, verbatim


def _user_messages_after_first(loop, row, server, enable_thinking):
    """The injected user messages, read back from the generate calls' prompts (the loop keeps no transcript)."""
    tok = loop.tokenizer
    messages = []
    for call in server.calls[1:]:
        text = tok.decode(call["prompt_ids"], skip_special_tokens=False)
        last_user = text.rsplit("<|im_start|>user\n", 1)[1].split("<|im_end|>", 1)[0]
        messages.append({"role": "user", "content": last_user})
    return messages


@pytest.mark.parametrize("enable_thinking", [False, True])
def test_self_plan_with_thinking_then_code(qwen3_tokenizer, sandbox, enable_thinking):
    tok = qwen3_tokenizer
    plan_turn = "<think>\ndraft: ```python\nprint(0)\n```\n</think>\n\nPlan: read n, print n + 1."
    server = FakeServer(tok, [plan_turn, THINK + GOOD])
    cfg = make_config(enable_thinking=enable_thinking, plan_source="self")
    out = run(make_loop(tok, server, cfg=cfg), make_row(plan=PLAN))
    first = [
        {"role": "system", "content": prompts.SYSTEM_PROMPT},
        {"role": "user", "content": prompts.build_plan_turn_prompt(STATEMENT, "", "stdio", None)},
    ]
    check_stream(tok, out, server, first, enable_thinking, 512, [prompts.CODE_AFTER_PLAN_PROMPT])
    assert out.extra_fields["plan"] == "Plan: read n, print n + 1."


@pytest.mark.parametrize("enable_thinking", [False, True])
def test_turn_ended_by_endoftext_gets_a_template_boundary(qwen3_tokenizer, sandbox, enable_thinking):
    """<|endoftext|> (Qwen3's generation config stops on it too) ends the turn; the loop injects <|im_end|> and
    the feedback turn follows as the template renders it."""
    tok = qwen3_tokenizer
    server = FakeServer(tok, [("eot", THINK + BAD), GOOD])
    cfg = make_config(enable_thinking=enable_thinking, plan_source="none")
    row = make_row()
    loop = make_loop(tok, server, cfg=cfg)
    out = run(loop, row)
    assert server.outputs[0][-1] == ENDOFTEXT
    feedback = [m["content"] for m in _user_messages_after_first(loop, row, server, enable_thinking)]
    check_stream(tok, out, server, row["raw_prompt"], enable_thinking, 512, feedback)
    first_injected = next(s for value, s, _ in _runs(out.response_mask) if value == 0)
    assert out.response_ids[first_injected : first_injected + 2] == [IM_END, NEWLINE]


@pytest.mark.parametrize("enable_thinking", [False, True])
def test_plan_cut_by_its_cap_is_closed_then_the_code_turn(qwen3_tokenizer, sandbox, enable_thinking):
    tok = qwen3_tokenizer
    server = FakeServer(tok, [("cut", "<think>\n" + "step " * 100), GOOD])
    cfg = make_config(enable_thinking=enable_thinking, plan_source="self", plan_max_tokens=16)
    out = run(make_loop(tok, server, cfg=cfg), make_row())
    first = [
        {"role": "system", "content": prompts.SYSTEM_PROMPT},
        {"role": "user", "content": prompts.build_plan_turn_prompt(STATEMENT, "", "stdio", None)},
    ]
    check_stream(tok, out, server, first, enable_thinking, 512, [prompts.CODE_AFTER_PLAN_PROMPT])
    assert len(server.outputs[0]) == 16


def _second_turn_budget(tok, enable_thinking, response_length):
    """max_tokens of the second code turn (after BAD and its feedback) under ``response_length``."""
    server = FakeServer(tok, [THINK + BAD, GOOD])
    cfg = make_config(response_length=response_length, enable_thinking=enable_thinking, plan_source="none",
                      rounds=1, min_turn_tokens=1)
    run(make_loop(tok, server, cfg=cfg), make_row())
    return server.calls[1]["params"]["max_tokens"]


@pytest.mark.parametrize("end", ["end", "eot", "cut"])
@pytest.mark.parametrize("enable_thinking", [False, True])
def test_turn_filling_the_budget_exactly_stays_within_response_length(qwen3_tokenizer, sandbox, enable_thinking,
                                                                       end):
    """The second attempt fills the remaining budget to the last token: ending with <|im_end|>, with
    <|endoftext|>, or with no end token at all. The output must still fit ``response_length``."""
    tok = qwen3_tokenizer
    response_length = 400
    budget = _second_turn_budget(tok, enable_thinking, response_length)
    body = THINK + GOOD
    n_body = len(tok.encode(body, add_special_tokens=False))
    filler = " x" * (budget - n_body - (0 if end == "cut" else 1))  # " x" is one token
    second = body + filler
    assert len(tok.encode(second, add_special_tokens=False)) + (0 if end == "cut" else 1) == budget
    server = FakeServer(tok, [THINK + BAD, second if end == "end" else (end, second)])
    cfg = make_config(response_length=response_length, enable_thinking=enable_thinking, plan_source="none",
                      rounds=1, min_turn_tokens=1)
    out = run(make_loop(tok, server, cfg=cfg), make_row())
    assert len(server.outputs[1]) == budget
    assert len(out.response_ids) <= response_length
    check_accounting(tok, out, server, enable_thinking=enable_thinking)
