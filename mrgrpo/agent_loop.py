"""`PlanCodeAgentLoop`: mrGRPO's plan -> code -> public-test feedback rollout, as a verl agent loop.

What the loop does (states, stop reasons, budget, token accounting, Qwen3 thinking, ``extra_fields``) is
described once, in docs/architecture.md ("The agent loop"). Reading this file:

- one async handler per `State` (``_HANDLERS``), each returning the next state; `_stop` ends the trajectory with a
  reason from ``STOP_REASONS``; `run` turns an exception into the typed ``error`` outcome (`_error_output`).
- settings: ``self.config.mrgrpo.agent_loop`` (every key in ``SETTINGS``), as verl's ToolAgentLoop reads
  ``actor_rollout_ref.rollout.multi_turn``; their defaults live in the trainer yaml (``TRAINER_YAML``) only.
  ``mrgrpo/config/agent_loop.yaml`` names the class for verl's registry and nothing else.
- the token stream is only appended to, through verl's Continuous Token helpers (`_generate`: model tokens,
  mask 1; `_append_user`: injected tokens, mask 0); generated text is decoded to be read, never encoded again.
- the budget edge: the response never exceeds ``response_length``. A generation gets at most the remaining budget;
  an injected turn (user message, template boundary, next generation prompt) is appended only if
  ``min_turn_tokens`` remain after it; the ``<|im_end|>`` that closes an assistant turn which did not end with it
  (another end token such as ``<|endoftext|>``, or a plan cut at ``plan_max_tokens``) is the first token of the
  NEXT injected turn and is budgeted with it (`_append_user`), never appended on its own. So no model token is
  ever cut to make room, and a trajectory whose last turn used the budget up ends on that turn's own last token.
- the sandbox is reached only through the class attribute ``judge`` (a subclass or a test replaces it), public
  tests are decoded by `mrgrpo.testset`, and the feedback turn is worded by `mrgrpo.prompts.feedback_turn`.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from enum import Enum
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput
from verl.utils.profiler import simple_timer

from mrgrpo import prompts, sandbox
from mrgrpo.code_extract import extract_code, strip_think
from mrgrpo.config import TRAINER_YAML, recipe_settings  # noqa: F401  (its mrgrpo.agent_loop: every SETTINGS default)
from mrgrpo.first_turn import PLAN_SOURCES, first_turn_messages, plan_source_of
from mrgrpo.marker import mark_once
from mrgrpo.testset import LimitsOverride, TestSet

logger = logging.getLogger(__name__)

SETTINGS = ("rounds", "plan_source", "plan_max_tokens", "min_turn_tokens", "feedback_max_chars",
            "feedback_stderr_chars", "sandbox_concurrency", "sandbox_time_s", "sandbox_wall_s")
# The fixed key set of ``AgentLoopOutput.extra_fields`` written by this loop (the reward and the dashboard read them).
EXTRA_FIELD_KEYS = ("final_code", "plan", "plan_source", "attempts", "public_pass", "public_verdicts", "stop_reason",
                    "error", "model_tokens", "injected_tokens", "plan_tokens", "sandbox_s")
# Former keys of this section for the public tests' limits. They stay in the trainer yaml (null) only so that an old
# override reaches `limits_override`'s message: the limits are the run's one override, mrgrpo.limits, which the
# reward reads for the hidden tests too.
RETIRED_SETTINGS = {"sandbox_time_s": "mrgrpo.limits.time_s", "sandbox_wall_s": "mrgrpo.limits.wall_s"}
STOP_REASONS = ("passed", "rounds", "budget", "truncated", "no_public_tests", "infra", "error")
# A trajectory that raised is kept as a typed `error` outcome (no gradient); this many in a row in one process
# means the run itself is broken: the loop then raises.
MAX_CONSECUTIVE_ERRORS = 32
# verl's Continuous Token merge of appended non-assistant messages: ``ct_merge_context_msg`` in 0.9.1, renamed
# ``ct_merge_non_assistant_msg`` (same parameters and result) on verl's main and neo (`mrgrpo upstream` checks both).
CT_MERGE_NAMES = ("ct_merge_context_msg", "ct_merge_non_assistant_msg")
CT_MERGE_USER = next((n for n in CT_MERGE_NAMES if hasattr(AgentLoopBase, n)), None)
if CT_MERGE_USER is None:
    raise ImportError(f"verl's AgentLoopBase has none of {CT_MERGE_NAMES}: run `mrgrpo upstream`")
_consecutive_errors = 0


class State(str, Enum):
    START = "start"
    PLAN = "plan"
    ASK_CODE = "ask_code"
    CODE = "code"
    TEST = "test"
    FEEDBACK = "feedback"
    DONE = "done"


_SEMAPHORE: asyncio.Semaphore | None = None
_SEMAPHORE_KEY: tuple[int, int] | None = None  # (id of the event loop, bound)


def sandbox_semaphore(bound: int) -> asyncio.Semaphore:
    """The per-process semaphore bounding concurrent sandbox jobs (one per event loop and bound)."""
    global _SEMAPHORE, _SEMAPHORE_KEY
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


def limits_override(config) -> LimitsOverride:
    """The run's override of the per-test limits: ``mrgrpo.limits`` of the trainer config (absent or null: none),
    the section the reward gets as ``reward_kwargs.limits``. A retired ``mrgrpo.agent_loop.sandbox_*`` key with a
    value raises, naming its new key."""
    mrgrpo_config = config.get("mrgrpo") or {}
    section = mrgrpo_config.get("agent_loop") or {}
    for old, new in RETIRED_SETTINGS.items():
        if section.get(old) is not None:
            raise ValueError(f"PlanCodeAgentLoop: mrgrpo.agent_loop.{old} is retired: set {new} (one override for "
                             "the agent loop's public tests and the reward's hidden tests)")
    return LimitsOverride.from_config(mrgrpo_config.get("limits"), where="mrgrpo.limits")


def parse_public_tests(extra_info: dict) -> TestSet:
    """``extra_info["public_tests"]`` (the test JSON of `mrgrpo.testset`, written by ``mrgrpo data build``) ->
    a `TestSet`; an empty one when the row has no public tests. Its ``float_tol`` is the data's."""
    raw = extra_info.get("public_tests")
    where = f"row {extra_info.get('source_id', '?')} extra_info.public_tests"
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return TestSet([], [], where=where)
    tests = TestSet.from_json(raw, where=where)
    if len(tests) and (extra_info.get("io_mode") == "call") != (tests.fn_name is not None):
        raise ValueError(f"{where}: io_mode {extra_info.get('io_mode')!r} but fn_name {tests.fn_name!r}")
    return tests


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
    turn_open: bool = False  # the stream does not end with close_turn_id: an injected turn must close it first
    attempts: int = 0  # code turns generated
    attempt_code: str | None = None
    final_code: str = ""
    public_pass: list[bool] = field(default_factory=list)
    public_verdicts: list[str] = field(default_factory=list)
    sandbox_s: list[float] = field(default_factory=list)  # wall seconds of each public-test sandbox call
    plan_tokens: int = 0
    priority: int = 0
    error: str = ""
    feedback_rounds: int = 0
    last_result: Any = None
    stop_reason: str = ""
    assistant_turns: int = 0
    user_turns: int = 0
    metrics: dict = field(default_factory=dict)
    gen_extra: dict = field(default_factory=dict)


class PlanCodeAgentLoop(AgentLoopBase):
    """Plan -> code -> public-test feedback -> code ... (docs/architecture.md, "The agent loop").

    Settings: ``mrgrpo.agent_loop.*`` of the trainer config (``SETTINGS``, defaults in ``TRAINER_YAML``); a row's
    ``extra_info.plan_source`` overrides ``plan_source`` for that row.

    ``judge``: everything the loop needs of the sandbox, ``await judge.run_async(job)`` -> an `ExecResult` for a
    `mrgrpo.sandbox.Job`; `mrgrpo.sandbox` itself unless a subclass, an instance or a test sets another.
    """

    judge: Any = sandbox

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        section = (self.config.get("mrgrpo") or {}).get("agent_loop") or {}
        missing = [k for k in SETTINGS if k not in section]
        if missing:
            raise KeyError(f"PlanCodeAgentLoop: the trainer config has no mrgrpo.agent_loop.{{{','.join(missing)}}}; "
                           f"compose it from {TRAINER_YAML.name} (mrgrpo/config), whose mrgrpo.agent_loop "
                           "section holds every setting's default")
        self.rounds = int(section["rounds"])
        self.plan_source = str(section["plan_source"])
        self.plan_max_tokens = section["plan_max_tokens"]
        self.min_turn_tokens = int(section["min_turn_tokens"])
        self.feedback_max_chars = int(section["feedback_max_chars"])
        self.feedback_stderr_chars = int(section["feedback_stderr_chars"])
        self.sandbox_concurrency = int(section["sandbox_concurrency"])
        # Per-test limits of the public-test runs: each problem's own (its test JSON), under the run's override
        # mrgrpo.limits, by the rule the reward applies to the hidden tests (mrgrpo.testset.TestSet.limits).
        self.limits_override = limits_override(self.config)
        if self.min_turn_tokens < 1:
            raise ValueError(f"PlanCodeAgentLoop: min_turn_tokens must be >= 1, got {self.min_turn_tokens}")
        if self.rounds < 0:
            raise ValueError(f"PlanCodeAgentLoop: rounds must be >= 0, got {self.rounds}")
        if self.plan_source not in PLAN_SOURCES:
            raise ValueError(f"PlanCodeAgentLoop: plan_source must be one of {PLAN_SOURCES}, got {self.plan_source!r}")
        self.response_length = int(self.rollout_config.response_length)
        if self.response_length < 1:
            raise ValueError(f"PlanCodeAgentLoop: rollout.response_length must be >= 1, got {self.response_length}")
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
        """One trajectory. It always ends as a typed outcome: an exception inside it (a bad row, a failed
        generation, a broken contract found by `_output`) is logged with its traceback and becomes
        ``stop_reason="error"`` with every response token masked (no gradient; the reward and the dashboard count it
        as excluded, ``mrgrpo.metrics.EXCLUDING_STOP_REASONS``) instead of being dropped or crashing the worker.
        `_error_output` builds that outcome without raising."""
        global _consecutive_errors
        if "raw_prompt" not in kwargs:
            raise KeyError("PlanCodeAgentLoop needs the row's raw_prompt (data.return_raw_chat=True)")
        extra_info = _as_dict(kwargs.get("extra_info"))
        priority = int(kwargs.get("priority", 0) or 0)
        traj = Trajectory(
            request_id=self._request_id(priority),
            plan_source=plan_source_of(extra_info, self.plan_source),
            extra_info=extra_info,
            sampling_params=dict(sampling_params),
            messages=[dict(m) for m in kwargs["raw_prompt"]],
            priority=priority,
        )
        state = State.START
        try:
            while state is not State.DONE:
                state = await self._HANDLERS[state](self, traj)
            output = self._output(traj)
        except Exception as exc:  # one bad trajectory must not vanish from the batch: see `run`
            logger.exception("mrgrpo: trajectory of row %s failed in state %s", extra_info.get("source_id", "?"),
                             state.value)
            _consecutive_errors += 1
            if _consecutive_errors >= MAX_CONSECUTIVE_ERRORS:
                raise RuntimeError(f"{_consecutive_errors} trajectories in a row failed; last: {exc!r}") from exc
            return await self._error_output(traj, exc)
        _consecutive_errors = 0
        return output

    def _request_id(self, priority: int) -> str:
        # As verl's own loops: one id per trajectory (prefix cache, sticky routing), reproducible under full
        # determinism.
        if getattr(self.rollout_config, "full_determinism", False):
            return f"det-{priority}"
        return uuid4().hex

    # ------------------------------------------------------------------ state handlers
    async def _on_start(self, t: Trajectory) -> State:
        # The same function MrGRPODataset applied before verl's overlong filter (a no-op on such rows).
        t.messages = first_turn_messages(t.messages, t.extra_info, t.plan_source)
        if t.plan_source == "teacher":
            t.plan = (t.extra_info.get("plan") or "").strip()
        t.token_ids = await self.ct_build_initial_tokens(t.messages)
        t.prompt_len = len(t.token_ids)
        return State.PLAN if t.plan_source == "self" else State.CODE

    async def _on_plan(self, t: Trajectory) -> State:
        await self._generate(t, cap=self.plan_max_tokens)
        t.plan = strip_think(t.last_text).strip()
        t.plan_tokens = t.last_len
        if not t.last_complete:
            if self._remaining(t) <= 0:
                return self._stop(t, "budget")
            if self.plan_max_tokens is None or t.last_len < int(self.plan_max_tokens):
                return self._stop(t, "truncated")  # the server stopped without an end-of-turn token
            # The plan hit plan_max_tokens: ask for the code anyway; ASK_CODE's injected turn closes the plan's.
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
            self._record(t, "NOT_RUN")
            return self._stop(t, "budget" if self._remaining(t) <= 0 else "truncated")
        return State.TEST

    async def _on_test(self, t: Trajectory) -> State:
        tests = parse_public_tests(t.extra_info)
        if not len(tests):
            self._record(t, "NOT_RUN")
            return self._stop(t, "no_public_tests")
        if t.attempt_code is None:
            t.last_result = None  # NO_CODE: feedback without running anything
            self._record(t, "NO_CODE")
        else:
            result = await self._run_sandbox(t, tests)
            t.last_result = result
            verdict = result.verdict.value
            self._record(t, verdict)
            if verdict == "INFRA":
                logger.warning("mrgrpo: sandbox INFRA on public tests (%s); ending the trajectory", result.detail)
                return self._stop(t, "infra")
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
    def _record(t: Trajectory, verdict: str) -> None:
        """The public-test outcome of the latest attempt (``NOT_RUN`` when it could not be tested)."""
        t.public_verdicts.append(verdict)
        t.public_pass.append(verdict == "AC")

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
                request_id=t.request_id, prompt_ids=list(t.token_ids), sampling_params=params, priority=t.priority
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
        # Ended with another end token (e.g. <|endoftext|>) or none: the next injected turn, if one fits, starts
        # with the template's <|im_end|> (`_append_user`); nothing is appended here, where no budget may be left.
        t.turn_open = not (token_ids and token_ids[-1] == self.close_turn_id)
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

    def _closed_stream(self, t: Trajectory) -> tuple[list[int], list[int], list[float] | None]:
        """The stream, mask and logprobs with the open assistant turn closed (``t.turn_open``): one injected
        end-of-turn token (mask 0, logprob 0.0; the model is not trained to emit it there), so the next injected
        turn renders as the template does. A new list each time: ``t`` is not touched."""
        if not t.turn_open:
            return list(t.token_ids), list(t.response_mask), t.response_logprobs
        logprobs = None if t.response_logprobs is None else [*t.response_logprobs, 0.0]
        return [*t.token_ids, self.close_turn_id], [*t.response_mask, 0], logprobs

    async def _append_user(self, t: Trajectory, content: str) -> bool:
        """Append an injected user turn (mask 0) if at least ``min_turn_tokens`` remain to generate after it. The
        turn is everything injected before the next generation: the closing token of an open assistant turn, the
        template's boundary, the user message and the generation prompt; all of it or none is appended."""
        tokens, mask, logprobs = self._closed_stream(t)
        previous = list(t.messages)
        updated = previous + [{"role": "user", "content": content}]
        merge, mask, logprobs = await getattr(self, CT_MERGE_USER)(previous, updated, tokens, mask, logprobs)
        if self.response_length - len(mask) < self.min_turn_tokens:
            return False
        t.messages = updated
        t.token_ids, t.response_mask = merge.token_ids, mask
        if t.response_logprobs is not None:
            t.response_logprobs = logprobs
        t.turn_open = False
        t.user_turns += 1
        return True

    async def _run_sandbox(self, t: Trajectory, tests: TestSet):
        job = tests.job(t.attempt_code, stop_on_first_failure=True, limits=tests.limits(self.limits_override))
        timing: dict = {}
        with simple_timer("tool_calls", t.metrics), simple_timer("call", timing):
            async with sandbox_semaphore(self.sandbox_concurrency):
                result = await self.judge.run_async(job)
        t.sandbox_s.append(round(float(timing.get("call", 0.0)), 6))
        return result

    def feedback_message(self, result: Any, tests: TestSet) -> str:
        """The user turn after a failed attempt (`mrgrpo.prompts.feedback_turn`) for the sandbox's ``result`` on the
        public ``tests`` (None: the answer had no program)."""
        limits = {"max_chars": self.feedback_max_chars, "stderr_chars": self.feedback_stderr_chars}
        if result is None:
            return prompts.feedback_turn("NO_CODE", tests.inputs, tests.outputs, **limits)
        failing = next((r for r in result.tests if r.verdict.value != "AC"), None)
        if failing is None:
            return prompts.feedback_turn(result.verdict.value, tests.inputs, tests.outputs, detail=result.detail,
                                         **limits)
        return prompts.feedback_turn(result.verdict.value, tests.inputs, tests.outputs, failing.index,
                                     failing_verdict=failing.verdict.value, stdout=failing.stdout,
                                     stderr=failing.stderr, detail=result.detail, **limits)

    async def _error_output(self, t: Trajectory, exc: Exception) -> AgentLoopOutput:
        """The typed outcome of a trajectory that raised: what was generated stays, every response token is masked
        (mask 0, logprob 0.0: no gradient), ``stop_reason="error"`` and ``error`` says what happened.

        It never raises, whatever state ``t`` was left in (the exception may be `_output` finding a broken
        contract): the response is cut to ``response_length`` (one injected end-of-turn token when empty, as verl
        needs one), logprobs are zeros whenever the sampling asked for them (verl concatenates them across the
        batch), and a prompt the template cannot render becomes the one end-of-turn token, with ``error`` saying
        so."""
        t.error = f"{type(exc).__name__}: {exc}"
        t.stop_reason = "error"
        while len(t.public_verdicts) < t.attempts:  # an attempt made but not tested when it failed
            self._record(t, "NOT_RUN")
        if t.prompt_len:
            prompt_ids, response_ids = t.token_ids[: t.prompt_len], t.token_ids[t.prompt_len :]
        else:  # it failed before the first prompt existed: render the row's prompt as given
            prompt_ids, response_ids = await self._error_prompt(t), []
        if len(response_ids) > self.response_length:
            t.error += f" (response of {len(response_ids)} tokens cut to response_length {self.response_length})"
            response_ids = response_ids[: self.response_length]
        response_ids = response_ids or [self.close_turn_id]
        t.error = t.error[:500]
        n_resp = len(response_ids)
        want_logprobs = t.response_logprobs is not None or bool(t.sampling_params.get("logprobs"))
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=response_ids,
            response_mask=[0] * n_resp,
            response_logprobs=[0.0] * n_resp if want_logprobs else None,
            num_turns=1 + t.assistant_turns + t.user_turns,
            metrics=self._metrics(t),
            extra_fields=self._extra_fields(t, n_model=0, n_injected=n_resp),
        )

    async def _error_prompt(self, t: Trajectory) -> list[int]:
        """The row's first prompt for an error outcome, or one end-of-turn token when the template cannot render
        it (a malformed row); ``t.error`` then says so."""
        try:
            return await self.ct_build_initial_tokens(t.messages)
        except Exception as exc:  # the outcome is already an error; the prompt is only kept to be read
            logger.warning("mrgrpo: the failed trajectory's prompt cannot be rendered either: %r", exc)
            t.error += f" (its prompt cannot be rendered: {type(exc).__name__}: {exc})"
            return [self.close_turn_id]

    def _output(self, t: Trajectory) -> AgentLoopOutput:
        """The finished trajectory as verl's output. It checks the loop's own contracts (budget, alignment, an
        untouched prompt) and raises on a broken one: `run` turns that into the masked ``error`` outcome."""
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
        n_model = sum(t.response_mask)
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=response_ids,
            response_mask=t.response_mask,
            response_logprobs=t.response_logprobs,
            num_turns=1 + t.assistant_turns + t.user_turns,
            metrics=self._metrics(t),
            extra_fields=self._extra_fields(t, n_model=n_model, n_injected=n_resp - n_model),
        )

    @staticmethod
    def _metrics(t: Trajectory) -> AgentLoopMetrics:
        return AgentLoopMetrics(
            generate_sequences=t.metrics.get("generate_sequences", 0.0),
            tool_calls=t.metrics.get("tool_calls", 0.0),
            num_preempted=int(t.metrics.get("num_preempted", -1)),
        )

    @staticmethod
    def _extra_fields(t: Trajectory, n_model: int, n_injected: int) -> dict[str, Any]:
        """``EXTRA_FIELD_KEYS`` (the same keys for every outcome, errors included) over the server's fields."""
        extra_fields = dict(t.gen_extra)
        extra_fields.update(
            {
                "final_code": t.final_code,
                "plan": t.plan,
                "plan_source": t.plan_source,
                "attempts": t.attempts,
                "public_pass": list(t.public_pass),
                "public_verdicts": list(t.public_verdicts),
                "stop_reason": t.stop_reason,
                "error": t.error,
                "model_tokens": n_model,
                "injected_tokens": n_injected,
                "plan_tokens": t.plan_tokens,
                "sandbox_s": list(t.sandbox_s),
                # upstream loops always write these two; keep the schema identical across loops
                "turn_scores": [],
                "tool_rewards": [],
            }
        )
        return extra_fields


def build_loop(cfg, server_manager, tokenizer, hf_model_type: str | None = "qwen3") -> PlanCodeAgentLoop:
    """The loop on a composed trainer config `cfg` (a DictConfig with ``mrgrpo.agent_loop``), with verl's
    `RLHFDataset` as its dataset class: for callers that drive ``run()`` themselves (the learnability study's SFT
    transcripts, tests)."""
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap
    from verl.utils.dataset.rl_dataset import RLHFDataset

    return PlanCodeAgentLoop(
        trainer_config=DictConfigWrap(cfg),
        server_manager=server_manager,
        tokenizer=tokenizer,
        processor=None,
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(cfg.data),
        hf_model_type=hf_model_type,
    )
