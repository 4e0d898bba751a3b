"""The agent loop at the edge of its response budget (issue 33, item 3), driven by the scripted fake server.

Every turn position (the self plan, the first code turn, the code turn after a plan, each feedback retry) is driven
to the budget: the turn's tokens fill it exactly (offset 0), leave one token (offset 1) or are one short (offset -1,
so the budget cuts the turn before its end token), with each way a turn can end: ``<|im_end|>``, ``<|endoftext|>``
(which Qwen3's generation config also stops on), or a length stop with no end token. Each test checks one property
over all of those cases. Before the fix, a turn that filled the budget and ended with ``<|endoftext|>`` got an
injected ``<|im_end|>`` past the budget and `run` raised "response of N tokens exceeds response_length", even from
its error path.

The rule these tests pin: the ``<|im_end|>`` that closes a turn which did not end with it is the first token of the
next injected turn and is budgeted with it, so it is appended with that turn or not at all; model tokens are never
cut to make room. A trajectory that fails anyway is an ``error`` outcome (every token masked), never an exception.
"""

from __future__ import annotations

import pytest

import mrgrpo.agent_loop as al
from mrgrpo.metrics import excluded_from

from loop_fakes import (
    BAD,
    GOOD,
    FakeSandbox,
    FakeServer,
    check_accounting,
    make_config,
    make_loop,
    make_row,
)
from loop_fakes import run_loop as run

PLAN_TURN = "Plan: read n, print n + 1."
FILLER = " and then keep on talking" * 60  # a turn without an end token runs on past any budget here
ROUNDS = 2
BIG = 4096  # a budget no script here reaches

# position: (plan_source, turns before the target turn, the target turn's text, turns after it)
POSITIONS = {
    "plan": ("self", [], PLAN_TURN, [GOOD]),
    "first_code": ("none", [], BAD, [GOOD]),
    "code_after_plan": ("self", [PLAN_TURN], BAD, [GOOD]),
    "retry_1": ("none", [BAD], BAD, [GOOD]),
    "retry_2": ("none", [BAD, BAD], BAD, []),  # the last feedback round (rounds=2)
}
ENDS = ("im_end", "endoftext", "length")
OFFSETS = (-1, 0, 1)
CASES = [(p, e, o) for p in POSITIONS for e in ENDS for o in OFFSETS]
CODE_CASES = [c for c in CASES if c[0] != "plan"]


@pytest.fixture(autouse=True)
def sandbox(monkeypatch):
    box = FakeSandbox()
    monkeypatch.setattr(al.PlanCodeAgentLoop, "judge", box)
    monkeypatch.setattr(al, "_consecutive_errors", 0)  # error outcomes here must not add up across tests
    return box


def scripted(end: str, text: str):
    """The fake server's turn for ``text`` ending the ``end`` way."""
    return {"im_end": text, "endoftext": ("eot", text), "length": ("cut", text + FILLER)}[end]


_MEASURED: dict[tuple[int, str], tuple[int, int, int]] = {}


def measure(tok, position: str) -> tuple[int, int, int]:
    """With a budget no turn reaches and the target turn ending with ``<|endoftext|>``: (response tokens before the
    target turn, the target turn's tokens with its end token, tokens injected between it and the next turn)."""
    key = (id(tok), position)
    if key not in _MEASURED:
        source, before, target, after = POSITIONS[position]
        server = FakeServer(tok, [*before, ("eot", target), *after])
        cfg = make_config(response_length=BIG, plan_source=source, rounds=ROUNDS, min_turn_tokens=1)
        out = run(make_loop(tok, server, cfg=cfg), make_row())
        i = len(before)
        used = len(server.calls[i]["prompt_ids"]) - len(out.prompt_ids)
        n_target = len(server.outputs[i])
        injected = len(server.calls[i + 1]["prompt_ids"]) - len(out.prompt_ids) - used - n_target if after else 0
        _MEASURED[key] = (used, n_target, injected)
    return _MEASURED[key]


def at_the_edge(tok, position: str, end: str, offset: int):
    """One trajectory whose target turn ends the ``end`` way with ``offset`` tokens of budget left after it (-1: the
    budget is one token short of the turn). Returns (output, server, response_length)."""
    source, before, target, after = POSITIONS[position]
    used, n_target, _ = measure(tok, position)
    budget = used + n_target + offset
    server = FakeServer(tok, [*before, scripted(end, target), *after])
    cfg = make_config(response_length=budget, plan_source=source, rounds=ROUNDS, min_turn_tokens=1)
    return run(make_loop(tok, server, cfg=cfg), make_row()), server, budget


# ------------------------------------------------------------------ every position x end x offset
@pytest.mark.parametrize("position,end,offset", CASES)
def test_response_never_exceeds_the_budget(tiny_tokenizer, position, end, offset):
    out, _, budget = at_the_edge(tiny_tokenizer, position, end, offset)
    assert len(out.response_ids) <= budget


@pytest.mark.parametrize("position,end,offset", CASES)
def test_a_turn_at_the_budget_is_not_an_error(tiny_tokenizer, position, end, offset):
    out, _, _ = at_the_edge(tiny_tokenizer, position, end, offset)
    assert out.extra_fields["stop_reason"] != "error", out.extra_fields["error"]


@pytest.mark.parametrize("position,end,offset", CASES)
def test_mask_is_one_exactly_on_the_generated_tokens_with_their_logprobs(tiny_tokenizer, position, end, offset):
    out, server, _ = at_the_edge(tiny_tokenizer, position, end, offset)
    check_accounting(tiny_tokenizer, out, server)


@pytest.mark.parametrize("position,end,offset", CASES)
def test_response_ends_with_the_last_generated_token(tiny_tokenizer, position, end, offset):
    """No injected token trails the last generation: nothing followed it that could need a closing token."""
    out, server, _ = at_the_edge(tiny_tokenizer, position, end, offset)
    last = server.outputs[-1]
    assert out.response_ids[-len(last) :] == last and out.response_mask[-len(last) :] == [1] * len(last)


@pytest.mark.parametrize("position,end,offset", CASES)
def test_stop_reason_at_the_budget_edge(tiny_tokenizer, position, end, offset):
    """"rounds" when the last round's code turn ended within the budget (rounds are checked first), else
    "budget": the turn was cut, or too little is left for the next turn."""
    out, _, _ = at_the_edge(tiny_tokenizer, position, end, offset)
    ended = end != "length" and offset >= 0
    assert out.extra_fields["stop_reason"] == ("rounds" if position == "retry_2" and ended else "budget")


@pytest.mark.parametrize("position,end,offset", CODE_CASES)
def test_a_code_turn_that_ends_within_the_budget_is_tested(tiny_tokenizer, position, end, offset):
    """With either end token, a code turn that fits (offset >= 0) runs on the public tests (BAD: WA); one the
    budget cut is NOT_RUN."""
    out, _, _ = at_the_edge(tiny_tokenizer, position, end, offset)
    ended = end != "length" and offset >= 0
    assert out.extra_fields["public_verdicts"][-1] == ("WA" if ended else "NOT_RUN")


@pytest.mark.parametrize("position,end,offset", CASES)
def test_verl_pads_the_output_to_the_response_length(tiny_tokenizer, position, end, offset):
    out, _, budget = at_the_edge(tiny_tokenizer, position, end, offset)
    d = out.as_dict()
    assert d["responses"].shape == d["response_mask"].shape == d["rollout_log_probs"].shape
    assert d["responses"].shape[-1] <= budget


# ------------------------------------------------------------------ the closing token and the next turn
NEXT_TURN_CASES = [(p, "endoftext") for p in POSITIONS if POSITIONS[p][3]] + [("plan", "plan_cap")]


def closing_case(tok, position: str, end: str, spare: int):
    """The target turn ends without ``<|im_end|>`` (``<|endoftext|>``, or a plan cut at ``plan_max_tokens``), and
    the budget leaves ``spare`` tokens beyond what the next injected turn (its closing token included) and a next
    generation of ``min_turn_tokens`` need. Returns (output, server, index of the target turn, min_turn_tokens)."""
    source, before, target, after = POSITIONS[position]
    used, n_target, injected = measure(tok, position)
    m = len(tok.encode(GOOD)) + 1  # the next turn (GOOD) fits exactly into min_turn_tokens
    settings = {}
    if end == "plan_cap":
        n_target = n_target - 2  # the plan is cut at its cap, before its end: the closing token is the loop's
        settings["plan_max_tokens"] = n_target
        turn = ("cut", target + FILLER)
    else:
        turn = ("eot", target)
    server = FakeServer(tok, [*before, turn, *after])
    cfg = make_config(response_length=used + n_target + injected + m + spare, plan_source=source, rounds=ROUNDS,
                      min_turn_tokens=m, **settings)
    return run(make_loop(tok, server, cfg=cfg), make_row()), server, len(before), m


@pytest.mark.parametrize("spare", [-1, 0])
@pytest.mark.parametrize("position,end", NEXT_TURN_CASES)
def test_the_closing_token_comes_with_the_next_turn_or_not_at_all(tiny_tokenizer, position, end, spare):
    """One token short of the next turn: neither it nor the closing token is appended, the response ends with
    the model's own last token. Exactly enough: ``<|im_end|>`` (mask 0) closes the turn, the template's boundary
    follows, and the next generation gets exactly min_turn_tokens."""
    tok = tiny_tokenizer
    out, server, i, m = closing_case(tok, position, end, spare)
    check_accounting(tok, out, server)
    start = len(server.calls[i]["prompt_ids"]) - len(out.prompt_ids)
    after = start + len(server.outputs[i])  # the first response position after the target turn
    if spare < 0:
        assert (len(server.calls), len(out.response_ids)) == (i + 1, after)
    else:
        im_end = tok.convert_tokens_to_ids("<|im_end|>")
        assert (out.response_ids[after], out.response_mask[after], out.response_logprobs[after]) == (im_end, 0, 0.0)
        assert tok.decode(out.response_ids[after + 1 :], skip_special_tokens=False).startswith("\n<|im_start|>user\n")
        assert server.calls[i + 1]["params"]["max_tokens"] == m


# ------------------------------------------------------------------ the error path
def _raise_from_output(self, t):
    raise RuntimeError(f"response of {self.response_length + 1} tokens exceeds response_length "
                       f"{self.response_length}")


def test_a_failed_output_check_is_an_error_outcome_not_an_exception(tiny_tokenizer, monkeypatch):
    """`_output` finding a broken contract (here: always) ends as the typed error outcome; `run` returns."""
    monkeypatch.setattr(al.PlanCodeAgentLoop, "_output", _raise_from_output)
    out, _, budget = at_the_edge(tiny_tokenizer, "first_code", "endoftext", 0)
    ef = out.extra_fields
    assert (ef["stop_reason"], ef["error"]) == (
        "error", f"RuntimeError: response of {budget + 1} tokens exceeds response_length {budget}")


def test_an_error_outcome_is_masked_aligned_and_within_the_budget(tiny_tokenizer, monkeypatch):
    monkeypatch.setattr(al.PlanCodeAgentLoop, "_output", _raise_from_output)
    out, server, budget = at_the_edge(tiny_tokenizer, "retry_1", "endoftext", 0)
    n = len(out.response_ids)
    assert 0 < n <= budget and out.response_mask == [0] * n and out.response_logprobs == [0.0] * n
    assert out.prompt_ids == server.calls[0]["prompt_ids"]
    assert (out.extra_fields["model_tokens"], out.extra_fields["injected_tokens"]) == (0, n)


def test_an_error_outcome_counts_as_excluded_with_the_same_keys(tiny_tokenizer, monkeypatch):
    """The error outcome has a normal outcome's extra_fields keys, and its stop reason is one the reward and the
    dashboard exclude from training (`mrgrpo.metrics.excluded_from`)."""
    normal, _, _ = at_the_edge(tiny_tokenizer, "retry_1", "im_end", 1)
    monkeypatch.setattr(al.PlanCodeAgentLoop, "_output", _raise_from_output)
    failed, _, _ = at_the_edge(tiny_tokenizer, "retry_1", "im_end", 1)
    assert set(failed.extra_fields) == set(normal.extra_fields) >= set(al.EXTRA_FIELD_KEYS)
    assert excluded_from(failed.extra_fields["stop_reason"], 0.0) and not excluded_from(
        normal.extra_fields["stop_reason"], 0.0)


def test_an_error_before_any_generation_has_logprobs_when_they_were_asked_for(tiny_tokenizer):
    """verl concatenates rollout logprobs across the batch: an error outcome has them (zeros) whenever the sampling
    asked for them, even when it failed before the server returned any."""
    tok = tiny_tokenizer
    server = FakeServer(tok, [GOOD])
    out = run(make_loop(tok, server, plan_source="teacher"), make_row())  # teacher without a plan: an error
    assert out.extra_fields["stop_reason"] == "error" and not server.calls
    assert out.response_logprobs == [0.0] * len(out.response_ids) == [0.0]


def test_a_prompt_that_cannot_be_rendered_is_still_an_error_outcome(tiny_tokenizer, monkeypatch):
    """A row the chat template cannot render fails at START and again when the error outcome renders its prompt;
    the outcome then holds one end-of-turn token as its prompt and says so."""
    async def unrenderable(self, messages, *args, **kwargs):
        raise ValueError("the template cannot render this row")

    monkeypatch.setattr(al.PlanCodeAgentLoop, "ct_build_initial_tokens", unrenderable)
    tok = tiny_tokenizer
    out = run(make_loop(tok, FakeServer(tok, [GOOD]), plan_source="none"), make_row())
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    assert (out.prompt_ids, out.response_ids, out.response_mask) == ([im_end], [im_end], [0])
    assert out.extra_fields["error"] == ("ValueError: the template cannot render this row (its prompt cannot be "
                                         "rendered: ValueError: the template cannot render this row)")
