"""``PlanCodeAgentLoop``: the multi-round plan -> code -> feedback rollout of mrGRPO, as a verl agent loop.

Registered through ``recipe/mrgrpo/config/agent_loop.yaml`` (``actor_rollout_ref.rollout.agent.
agent_loop_config_path``) under the name ``plan_code``; rows select it with their ``agent_name`` column or
through ``actor_rollout_ref.rollout.agent.default_agent_loop``.

State machine (one handler per state, ``_HANDLERS``)::

    START --plan_source=self--> PLAN --> ASK_CODE --> CODE
    START --teacher | none----> CODE
    CODE --> TEST --pass / rounds spent / no public tests / sandbox INFRA--> DONE
                  --fail, rounds left--> FEEDBACK --> CODE
    any generation that leaves no budget, or ends without an end-of-turn token --> DONE

- START builds the first prompt for the plan source (``self``: the policy is asked for a plan only;
  ``teacher``: the row's plan is in the user turn; ``none``: no plan, the single-turn baseline).
- ``rounds`` = K, the number of feedback rounds: at most K + 1 code attempts. Every attempt is run on the
  row's PUBLIC tests (``extra_info["public_tests"]``) through ``mrgrpo.sandbox.run_async``; the reward later
  scores ``final_code`` on the hidden tests.

Token accounting. The trajectory is one token stream: ``prompt_ids`` (the first prompt) followed by
``response_ids`` (every later token). Model tokens are appended exactly as generated
(``ct_merge_assistant_token``: mask 1, their rollout logprobs); injected user turns are rendered by verl's
Continuous Token builder (``ct_merge_context_msg``: mask 0, logprob 0.0, plus the template's boundary
tokens, e.g. Qwen's newline after ``<|im_end|>``). Generated text is decoded only to read it (plan, code);
it is never encoded again.

Qwen3 thinking. ``data.apply_chat_template_kwargs`` (e.g. ``{enable_thinking: false}``) reaches the chat
template through the Continuous Token builder for the first prompt and for every injected turn, so the
generation prompt after each user turn is the one the template defines (with ``enable_thinking: false``,
Qwen3's empty ``<think>\n\n</think>\n\n``). Generated ``<think>`` blocks are kept verbatim in the token
stream: later turns see them and the trainer trains on exactly the same tokens (Qwen3's chat template
would drop earlier turns' reasoning when re-rendering a conversation; this loop never re-renders, so what
the policy saw during rollout and what it is trained on are the same sequence). Thinking never counts as
an answer: plans and code are read from the text after ``</think>`` (``mrgrpo.code_extract``).

Sandbox calls are awaited (never blocking the event loop) behind a per-process semaphore
(``sandbox_concurrency``; env ``MRGRPO_SANDBOX_CONCURRENCY`` overrides).

Budget. Every generation gets ``max_tokens`` = the remaining ``response_length`` (all turns share it; a plan
turn is further capped by ``plan_max_tokens``: a plan cut there is closed with an injected end-of-turn token,
mask 0, and the code is still asked for); an injected turn is appended only if at least
``min_turn_tokens`` remain after it.

``extra_fields`` (fixed keys, ``EXTRA_FIELD_KEYS``; verl merges them into the reward's ``extra_info``):
``final_code`` (program of the last attempt that had one, ``""`` if none), ``plan`` (the teacher's or the
policy's, thinking removed; ``""`` for none), ``rounds`` (code attempts made), ``public_pass`` (one bool per
attempt: passed every public test; ``False`` when it could not be tested), ``stop_reason`` (``STOP_REASONS``),
``plan_source``. Plus the rollout server's ``min/max_global_steps`` etc. and upstream's empty
``turn_scores`` / ``tool_rewards``.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import os
from dataclasses import dataclass, field
from enum import Enum
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput
from verl.utils.profiler import simple_timer

from mrgrpo import prompts
from mrgrpo.code_extract import extract_code, strip_think
from mrgrpo.marker import mark_once

logger = logging.getLogger(__name__)

AGENT_NAME = "plan_code"
PLAN_SOURCES = ("self", "teacher", "none")
# The fixed key set of ``AgentLoopOutput.extra_fields`` written by this loop (the reward reads them).
EXTRA_FIELD_KEYS = ("final_code", "plan", "rounds", "public_pass", "stop_reason", "plan_source")
STOP_REASONS = ("passed", "rounds", "budget", "truncated", "no_public_tests", "infra")

class State(str, Enum):
    START = "start"
    PLAN = "plan"
    ASK_CODE = "ask_code"
    CODE = "code"
    TEST = "test"
    FEEDBACK = "feedback"
    DONE = "done"


# --------------------------------------------------------------------------------------------------
# Sandbox seam: everything the loop needs from mrgrpo.sandbox goes through `_sandbox_module()`.
# Tests replace this one function with a fake module (Job, run_async, Verdict).
# --------------------------------------------------------------------------------------------------


def _sandbox_module():
    return importlib.import_module("mrgrpo.sandbox")


_SEMAPHORE: asyncio.Semaphore | None = None
_SEMAPHORE_KEY: tuple[int, int] | None = None  # (id of the event loop, bound)


def sandbox_semaphore(bound: int) -> asyncio.Semaphore:
    """The per-process semaphore bounding concurrent sandbox jobs (one per event loop and bound)."""
    global _SEMAPHORE, _SEMAPHORE_KEY
    env = os.environ.get("MRGRPO_SANDBOX_CONCURRENCY")
    if env:
        bound = int(env)
    if bound < 1:
        raise ValueError(f"sandbox concurrency must be >= 1, got {bound}")
    key = (id(asyncio.get_running_loop()), bound)
    if _SEMAPHORE is None or _SEMAPHORE_KEY != key:
        _SEMAPHORE = asyncio.Semaphore(bound)
        _SEMAPHORE_KEY = key
    return _SEMAPHORE


# --------------------------------------------------------------------------------------------------
# Row helpers
# --------------------------------------------------------------------------------------------------


def _as_dict(value: Any) -> dict:
    if value is None:
        return {}
    if isinstance(value, dict):
        return value
    if hasattr(value, "item"):  # 0-d numpy object array from the batch
        value = value.item()
        if isinstance(value, dict):
            return value
    raise TypeError(f"extra_info must be a dict, got {type(value).__name__}")


@dataclass(frozen=True)
class PublicTests:
    inputs: list
    outputs: list  # unwrapped for call mode (what mrgrpo.sandbox.Job expects)
    fn_name: str | None


def parse_public_tests(extra_info: dict) -> PublicTests:
    """``extra_info["public_tests"]`` (APPS JSON string ``{"inputs", "outputs", "fn_name"?}``, call outputs
    wrapped as ``[value]`` like ``ground_truth``) -> the sandbox's form."""
    raw = extra_info.get("public_tests")
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return PublicTests([], [], extra_info.get("fn_name") or None)
    data = json.loads(raw) if isinstance(raw, str) else raw
    if not isinstance(data, dict) or "inputs" not in data or "outputs" not in data:
        raise ValueError(f"extra_info.public_tests must be {{'inputs', 'outputs'}}, got {str(raw)[:200]!r}")
    inputs, outputs = list(data["inputs"]), list(data["outputs"])
    if len(inputs) != len(outputs):
        raise ValueError(f"extra_info.public_tests: {len(inputs)} inputs but {len(outputs)} outputs")
    fn_name = data.get("fn_name") or extra_info.get("fn_name") or None
    io_mode = extra_info.get("io_mode") or ("call" if fn_name else "stdio")
    if io_mode == "call":
        if not fn_name:
            raise ValueError("extra_info: io_mode 'call' without fn_name")
        unwrapped = []
        for i, out in enumerate(outputs):
            if not (isinstance(out, list) and len(out) == 1):
                raise ValueError(f"extra_info.public_tests: call-mode output {i} is not wrapped as [value]: {out!r}")
            unwrapped.append(out[0])
        outputs = unwrapped
    else:
        fn_name = None
    return PublicTests(inputs, outputs, fn_name)


def _class_name(extra_info: dict) -> str | None:
    if extra_info.get("class_name"):
        return extra_info["class_name"]
    starter = extra_info.get("starter_code") or ""
    return "Solution" if extra_info.get("io_mode") == "call" and "class Solution" in starter else None


def _problem_fields(extra_info: dict) -> dict:
    missing = [k for k in ("statement", "io_mode") if not extra_info.get(k)]
    if missing:
        raise ValueError(f"extra_info lacks {missing}: the plan source needs the first user turn rebuilt")
    return dict(
        problem_statement=extra_info["statement"],
        starter_code=extra_info.get("starter_code") or "",
        io_mode=extra_info["io_mode"],
        fn_name=extra_info.get("fn_name") or None,
        class_name=_class_name(extra_info),
    )


def _tail(text: str, limit: int) -> str:
    text = text or ""
    return text if len(text) <= limit else f"[... {len(text) - limit} characters cut]\n" + text[-limit:]


def _show(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=repr)


_VERDICT_TEXT = {
    "WA": "WA (wrong answer)",
    "RE": "RE (runtime error)",
    "TLE": "TLE (time limit exceeded)",
    "MLE": "MLE (memory limit exceeded)",
    "OLE": "OLE (output limit exceeded)",
    "SE": "SE (syntax error)",
    "NO_CODE": "NO_CODE (no ```python code block found in your answer)",
}


def _verdict_name(verdict: Any) -> str:
    return str(getattr(verdict, "value", verdict))


# --------------------------------------------------------------------------------------------------
# Trajectory state
# --------------------------------------------------------------------------------------------------


@dataclass
class Trajectory:
    request_id: str
    plan_source: str
    extra_info: dict
    sampling_params: dict
    messages: list[dict] = field(default_factory=list)  # bookkeeping for Continuous Token merges
    token_ids: list[int] = field(default_factory=list)  # prompt + everything after it
    prompt_len: int = 0
    response_mask: list[int] = field(default_factory=list)
    response_logprobs: list[float] | None = None
    plan: str = ""
    last_text: str = ""  # decoded text of the latest generation
    last_complete: bool = True  # the latest generation ended with an end-of-turn token
    last_len: int = 0  # tokens in the latest generation
    attempts: int = 0  # code turns generated
    attempt_code: str | None = None
    final_code: str = ""
    public_pass: list[bool] = field(default_factory=list)
    feedback_rounds: int = 0
    last_result: Any = None
    stop_reason: str = ""
    assistant_turns: int = 0
    user_turns: int = 0
    metrics: dict = field(default_factory=dict)
    gen_extra: dict = field(default_factory=dict)


class PlanCodeAgentLoop(AgentLoopBase):
    """Plan -> code -> public-test feedback -> code ... (see the module docstring).

    Constructor kwargs come from the agent-loop yaml; a non-null ``mrgrpo.agent_loop.<name>`` in the
    trainer config overrides the yaml value (the run script sets them); ``extra_info.plan_source`` of a
    row overrides ``plan_source`` for that row.
    """

    def __init__(
        self,
        *args,
        rounds: int = 2,
        plan_source: str = "teacher",
        plan_max_tokens: int | None = None,
        min_turn_tokens: int = 32,
        feedback_max_chars: int = 400,
        feedback_stderr_chars: int = 400,
        float_tol: float = 1e-6,
        sandbox_concurrency: int = 8,
        **kwargs,
    ):
        super().__init__(*args, **kwargs)
        overrides = self.config.get("mrgrpo", {}) or {}
        overrides = overrides.get("agent_loop", {}) or {}

        def pick(name: str, default: Any) -> Any:
            value = overrides.get(name, None)
            return default if value is None else value

        self.rounds = int(pick("rounds", rounds))
        self.plan_source = str(pick("plan_source", plan_source))
        self.plan_max_tokens = pick("plan_max_tokens", plan_max_tokens)
        self.min_turn_tokens = int(pick("min_turn_tokens", min_turn_tokens))
        self.feedback_max_chars = int(pick("feedback_max_chars", feedback_max_chars))
        self.feedback_stderr_chars = int(pick("feedback_stderr_chars", feedback_stderr_chars))
        self.float_tol = float(pick("float_tol", float_tol))
        self.sandbox_concurrency = int(pick("sandbox_concurrency", sandbox_concurrency))
        if self.rounds < 0:
            raise ValueError(f"PlanCodeAgentLoop: rounds must be >= 0, got {self.rounds}")
        if self.plan_source not in PLAN_SOURCES:
            raise ValueError(f"PlanCodeAgentLoop: plan_source must be one of {PLAN_SOURCES}, got {self.plan_source!r}")
        self.response_length = int(self.rollout_config.response_length)
        self.eos_ids = self._end_of_turn_ids()
        im_end = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.close_turn_id = im_end if im_end in self.eos_ids else int(self.tokenizer.eos_token_id)
        mark_once("agent_loop", cls=type(self).__name__, rounds=self.rounds, plan_source=self.plan_source,
                  response_length=self.response_length)

    def _end_of_turn_ids(self) -> frozenset[int]:
        ids = set()
        if self.tokenizer.eos_token_id is not None:
            ids.add(int(self.tokenizer.eos_token_id))
        for tok in ("<|im_end|>", "<|endoftext|>"):
            tid = self.tokenizer.convert_tokens_to_ids(tok)
            if isinstance(tid, int) and tid != getattr(self.tokenizer, "unk_token_id", None) and tid >= 0:
                ids.add(tid)
        if not ids:
            raise ValueError("PlanCodeAgentLoop: the tokenizer has no end-of-turn token (eos_token_id is None)")
        return frozenset(ids)

    # ------------------------------------------------------------------ run
    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        extra_info = _as_dict(kwargs.get("extra_info"))
        row_source = extra_info.get("plan_source")
        plan_source = str(row_source) if row_source else self.plan_source
        if plan_source not in PLAN_SOURCES:
            raise ValueError(f"extra_info.plan_source must be one of {PLAN_SOURCES}, got {plan_source!r}")
        if "raw_prompt" not in kwargs:
            raise KeyError("PlanCodeAgentLoop needs the row's raw_prompt (data.return_raw_chat=True)")
        traj = Trajectory(
            request_id=self._request_id(kwargs.get("priority", 0)),
            plan_source=plan_source,
            extra_info=extra_info,
            sampling_params=dict(sampling_params),
            messages=[dict(m) for m in kwargs["raw_prompt"]],
        )
        state = State.START
        while state is not State.DONE:
            state = await self._HANDLERS[state](self, traj)
        return self._output(traj)

    def _request_id(self, priority: Any) -> str:
        if getattr(self.rollout_config, "full_determinism", False):
            return f"det-{int(priority)}-{uuid4().hex}"
        return uuid4().hex

    # ------------------------------------------------------------------ state handlers
    async def _on_start(self, t: Trajectory) -> State:
        user_idx = max((i for i, m in enumerate(t.messages) if m.get("role") == "user"), default=None)
        if user_idx is None:
            raise ValueError("raw_prompt has no user message")
        content = t.messages[user_idx].get("content")
        if not isinstance(content, str):
            raise TypeError("PlanCodeAgentLoop supports text prompts only")
        row_plan = (t.extra_info.get("plan") or "").strip()
        if t.plan_source == "teacher":
            if not row_plan:
                raise ValueError(
                    f"plan_source=teacher but row {t.extra_info.get('source_id', '?')} has no extra_info.plan; "
                    "build the data with plans or set plan_source to none/self for it"
                )
            t.plan = row_plan
            if row_plan not in content:
                content = prompts.build_user_prompt(**_problem_fields(t.extra_info), plan=row_plan)
        elif t.plan_source == "none":
            if row_plan and row_plan in content:
                content = prompts.build_user_prompt(**_problem_fields(t.extra_info), plan=None)
        else:  # self
            fields = _problem_fields(t.extra_info)
            content = prompts.build_plan_turn_prompt(
                fields["problem_statement"], fields["starter_code"], fields["io_mode"], fields["fn_name"],
                class_name=fields["class_name"],
            )
        t.messages[user_idx] = {**t.messages[user_idx], "content": content}
        t.token_ids = await self.ct_build_initial_tokens(t.messages)
        t.prompt_len = len(t.token_ids)
        return State.PLAN if t.plan_source == "self" else State.CODE

    async def _on_plan(self, t: Trajectory) -> State:
        await self._generate(t, cap=self.plan_max_tokens)
        t.plan = strip_think(t.last_text).strip()
        if not t.last_complete:
            if self._remaining(t) <= 0:
                return self._stop(t, "budget")
            if self.plan_max_tokens is None or t.last_len < int(self.plan_max_tokens):
                return self._stop(t, "truncated")  # the server stopped without an end-of-turn token
            self._close_turn(t)  # the plan hit plan_max_tokens: end its turn and ask for the code anyway
        if self._out_of_budget(t):
            return self._stop(t, "budget")
        return State.ASK_CODE

    async def _on_ask_code(self, t: Trajectory) -> State:
        ok = await self._append_user(t, prompts.CODE_AFTER_PLAN_PROMPT)
        return State.CODE if ok else self._stop(t, "budget")

    async def _on_code(self, t: Trajectory) -> State:
        await self._generate(t, cap=None)
        t.attempts += 1
        # Only closed fences count, so a block finished before a cut-off still counts as the program.
        t.attempt_code = extract_code(t.last_text)
        if t.attempt_code:
            t.final_code = t.attempt_code
        if not t.last_complete:
            # Cut off mid-answer: not tested (no room, or no sense, to give feedback).
            t.public_pass.append(False)
            return self._stop(t, "budget" if self._remaining(t) <= 0 else "truncated")
        return State.TEST

    async def _on_test(self, t: Trajectory) -> State:
        tests = parse_public_tests(t.extra_info)
        if not tests.inputs:
            t.public_pass.append(False)
            return self._stop(t, "no_public_tests")
        if t.attempt_code is None:
            t.last_result = None  # NO_CODE: feedback without running anything
            t.public_pass.append(False)
        else:
            result = await self._run_sandbox(t, tests)
            t.last_result = result
            verdict = _verdict_name(result.verdict)
            if verdict == "INFRA":
                logger.warning("mrgrpo: sandbox INFRA on public tests (%s); ending the trajectory", result.detail)
                t.public_pass.append(False)
                return self._stop(t, "infra")
            t.public_pass.append(verdict == "AC")
            if verdict == "AC":
                return self._stop(t, "passed")
        if t.feedback_rounds >= self.rounds:
            return self._stop(t, "rounds")
        if self._remaining(t) < self.min_turn_tokens:
            return self._stop(t, "budget")
        return State.FEEDBACK

    async def _on_feedback(self, t: Trajectory) -> State:
        message = self.feedback_message(t.last_result, parse_public_tests(t.extra_info))
        if not await self._append_user(t, message):
            return self._stop(t, "budget")
        t.feedback_rounds += 1
        return State.CODE

    _HANDLERS = {
        State.START: _on_start,
        State.PLAN: _on_plan,
        State.ASK_CODE: _on_ask_code,
        State.CODE: _on_code,
        State.TEST: _on_test,
        State.FEEDBACK: _on_feedback,
    }

    # ------------------------------------------------------------------ pieces
    def _remaining(self, t: Trajectory) -> int:
        return self.response_length - len(t.response_mask)

    def _out_of_budget(self, t: Trajectory) -> bool:
        return self._remaining(t) < self.min_turn_tokens

    @staticmethod
    def _stop(t: Trajectory, reason: str) -> State:
        if reason not in STOP_REASONS:
            raise ValueError(f"unknown stop reason {reason!r}")
        t.stop_reason = reason
        return State.DONE

    async def _generate(self, t: Trajectory, cap: int | None) -> None:
        remaining = self._remaining(t)
        if remaining <= 0:
            raise RuntimeError("PlanCodeAgentLoop: generation requested with no response budget left")
        max_tokens = remaining if cap is None else max(1, min(remaining, int(cap)))
        params = {**t.sampling_params, "max_tokens": max_tokens}
        params.pop("max_new_tokens", None)
        with simple_timer("generate_sequences", t.metrics):
            out = await self.server_manager.generate(
                request_id=t.request_id, prompt_ids=list(t.token_ids), sampling_params=params
            )
        token_ids = list(out.token_ids)[:max_tokens]
        log_probs = list(out.log_probs)[: len(token_ids)] if out.log_probs else None
        if out.num_preempted is not None:
            t.metrics["num_preempted"] = t.metrics.get("num_preempted", 0) + out.num_preempted
        self._merge_generate_extra(t, out.extra_fields or {})
        want_logprobs = log_probs is not None or bool(t.response_logprobs)
        if want_logprobs and log_probs is None and token_ids:
            raise RuntimeError("the rollout server returned no logprobs for a turn after earlier turns had them")
        merge, mask, logprobs = await self.ct_merge_assistant_token(
            t.token_ids,
            token_ids,
            t.response_mask,
            (t.response_logprobs or []) if want_logprobs else None,
            assistant_logprobs=log_probs if want_logprobs else None,
        )
        t.token_ids, t.response_mask = merge.token_ids, mask
        t.response_logprobs = logprobs if want_logprobs else None
        t.assistant_turns += 1
        t.last_complete = bool(token_ids) and token_ids[-1] in self.eos_ids
        t.last_len = len(token_ids)
        # Keep <think>/</think> (special in some tokenizers); drop only the end-of-turn token.
        visible = token_ids[:-1] if t.last_complete else token_ids
        t.last_text = self.tokenizer.decode(visible, skip_special_tokens=False)
        t.messages.append({"role": "assistant", "content": t.last_text})

    @staticmethod
    def _merge_generate_extra(t: Trajectory, extra: dict) -> None:
        if not t.gen_extra:
            t.gen_extra.update(extra)
        elif extra.get("max_global_steps") is not None:
            t.gen_extra["max_global_steps"] = extra["max_global_steps"]

    def _close_turn(self, t: Trajectory) -> None:
        """End an assistant turn cut off at its token cap with the end-of-turn token, injected (mask 0, logprob
        0.0): the model is not trained to emit it there, and the next injected turn renders as the template does."""
        t.token_ids = [*t.token_ids, self.close_turn_id]
        t.response_mask = [*t.response_mask, 0]
        if t.response_logprobs is not None:
            t.response_logprobs = [*t.response_logprobs, 0.0]

    async def _append_user(self, t: Trajectory, content: str) -> bool:
        """Append an injected user turn (mask 0) if it leaves at least ``min_turn_tokens`` to generate."""
        previous = list(t.messages)
        updated = previous + [{"role": "user", "content": content}]
        merge, mask, logprobs = await self.ct_merge_context_msg(
            previous, updated, t.token_ids, t.response_mask, t.response_logprobs
        )
        if self.response_length - len(mask) < self.min_turn_tokens:
            return False
        t.messages = updated
        t.token_ids, t.response_mask = merge.token_ids, mask
        if t.response_logprobs is not None:
            t.response_logprobs = logprobs
        t.user_turns += 1
        return True

    async def _run_sandbox(self, t: Trajectory, tests: PublicTests):
        sandbox = _sandbox_module()
        special = t.extra_info.get("special") or []
        float_tol = self.float_tol if "needs_float_tol" in list(special) else None
        job = sandbox.Job(
            code=t.attempt_code,
            inputs=tests.inputs,
            outputs=tests.outputs,
            fn_name=tests.fn_name,
            float_tol=float_tol,
            stop_on_first_failure=True,
        )
        with simple_timer("tool_calls", t.metrics):
            async with sandbox_semaphore(self.sandbox_concurrency):
                return await sandbox.run_async(job)

    def feedback_message(self, result: Any, tests: PublicTests) -> str:
        """The bounded user turn after a failed attempt: verdict, failing input, expected vs got, stderr tail."""
        limit = self.feedback_max_chars
        if result is None:
            failure = {"verdict": _VERDICT_TEXT["NO_CODE"]}
        else:
            verdict = _verdict_name(result.verdict)
            failing = next((r for r in result.tests if _verdict_name(r.verdict) != "AC"), None)
            failure = {"verdict": _VERDICT_TEXT.get(verdict, verdict)}
            if failing is not None and 0 <= failing.index < len(tests.inputs):
                failure["input"] = _show(tests.inputs[failing.index])
                failure["expected"] = _show(tests.outputs[failing.index])
                if _verdict_name(failing.verdict) == "WA":
                    failure["got"] = failing.stdout
                failure["stderr"] = _tail(failing.stderr or "", self.feedback_stderr_chars)
            elif result.detail:  # no test ran (e.g. a syntax error): the sandbox's detail is the only message
                failure["stderr"] = _tail(result.detail, self.feedback_stderr_chars)
        message = prompts.build_feedback_prompt([failure], n_shown=1, max_chars=limit)
        hard_cap = 6 * limit + 1000
        if len(message) > hard_cap:
            raise RuntimeError(f"feedback message of {len(message)} characters exceeds its bound {hard_cap}")
        return message

    def _output(self, t: Trajectory) -> AgentLoopOutput:
        if not t.stop_reason:
            raise RuntimeError("PlanCodeAgentLoop finished without a stop reason")
        n_resp = len(t.response_mask)
        if n_resp > self.response_length:
            raise RuntimeError(f"response of {n_resp} tokens exceeds response_length {self.response_length}")
        if t.response_logprobs is not None and len(t.response_logprobs) != n_resp:
            raise RuntimeError("response logprobs are misaligned with the response mask")
        prompt_ids = t.token_ids[: len(t.token_ids) - n_resp]
        response_ids = t.token_ids[len(prompt_ids) :]
        if len(prompt_ids) != t.prompt_len:
            raise RuntimeError("the prompt changed during the rollout (Continuous Token merge trimmed the prompt)")
        metrics = AgentLoopMetrics(
            generate_sequences=t.metrics.get("generate_sequences", 0.0),
            tool_calls=t.metrics.get("tool_calls", 0.0),
            num_preempted=int(t.metrics.get("num_preempted", -1)),
        )
        extra_fields = dict(t.gen_extra)
        extra_fields.update(
            {
                "final_code": t.final_code,
                "plan": t.plan,
                "rounds": t.attempts,
                "public_pass": list(t.public_pass),
                "stop_reason": t.stop_reason,
                "plan_source": t.plan_source,
                # upstream loops always write these two; keep the schema identical across loops
                "turn_scores": [],
                "tool_rewards": [],
            }
        )
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=response_ids,
            response_mask=t.response_mask,
            response_logprobs=t.response_logprobs,
            num_turns=1 + t.assistant_turns + t.user_turns,
            metrics=metrics,
            extra_fields=extra_fields,
        )
