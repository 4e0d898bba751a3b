"""Fakes of the rollout server and of the sandbox for the agent loop's tests, and the helpers that build the loop.

They stand in for the real things where the loop cannot tell the difference:

- `FakeServer` answers scripted turns as vLLM's server does through verl (`TokenOutput`): a turn stops at its
  end-of-turn token, at ``max_tokens``, at the model's context limit (``max_model_len``: vLLM clamps the new
  tokens to ``max_model_len - len(prompt)``), or is aborted (no tokens); so a turn can stop short of its cap
  without an end token, as a real server does. Logprobs are distinct per turn and token and kept in
  ``logprobs`` to compare with the loop's output.
- `FakeSandbox` is `mrgrpo.sandbox`'s ``run_async``: it RUNS the program (in this process, on a step budget) and
  judges it with the sandbox's own comparators, returning what `mrgrpo.sandbox.run` returns for the same job:
  the first failing test and its index, SE without tests, TLE, RE with the traceback, the job's ``float_tol``.
  INFRA (the sandbox failing, never the program) is injected per program. ``tests/test_agent_loop_on_cpu.py``
  checks it against the real sandbox on the same jobs.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import io
import json
import linecache
import math
import sys
import time
import traceback
import typing
from typing import Any

from mrgrpo.code_extract import extract_code
from mrgrpo.config import TRAINER_YAML  # the recipe trainer yaml, shipped in the package
from mrgrpo.sandbox import ExecResult, Job, Limits, TestResult, Verdict
from mrgrpo.sandbox.compare import parse_json_value, stdout_equal, values_equal
from mrgrpo.sandbox.runner import failure_detail
from mrgrpo.sandbox.testproc import entry_point  # the real sandbox's rule: Solution().<fn> first, else <fn>

# The tests' problem: read n, print n + 1; a right, a wrong (fails public test 0) and a crashing answer.
STATEMENT = "Read n and print n + 1."
PLAN = "Read the integer, add one, print it."
GOOD = "```python\nprint(int(input()) + 1)\n```"
BAD = "```python\nprint(int(input()))\n```"
CRASH = "```python\nprint(1 // 0)\n```"
PUBLIC = {"inputs": ["1\n", "5\n"], "outputs": ["2\n", "6\n"]}
GEN = "<|im_start|>assistant\n<think>\n\n</think>\n\n"  # the generation prompt, thinking off


# ------------------------------------------------------------------ rollout server
class FakeServer:
    """verl's server manager with scripted turns. A turn is ``text`` (ends with ``<|im_end|>``), ``("eot", text)``
    (ends with ``<|endoftext|>``), ``("cut", text)`` (no end token: the model keeps going, so the turn runs to its
    limit and ``text`` must be at least that long) or ``("abort", "")`` (aborted: no tokens, as verl's vLLM server
    returns when the request is aborted). ``max_model_len``: the context limit, as in vLLM (None: none).
    ``logprobs``, ``extra_fields``: one value for every turn or a list with one per turn; ``num_preempted`` is
    reported with every turn."""

    def __init__(
        self,
        tokenizer,
        script: list,
        logprobs: bool | list[bool] = True,
        max_model_len: int | None = None,
        num_preempted: int | None = 0,
        extra_fields: dict | list[dict] | None = None,
    ):
        self.tok = tokenizer
        self.script = list(script)
        self.want_logprobs = logprobs
        self.max_model_len = max_model_len
        self.num_preempted = num_preempted
        self.extra_fields = {"max_global_steps": 1} if extra_fields is None else extra_fields
        self.calls: list[dict] = []
        self.outputs: list[list[int]] = []  # the token ids of each turn, as returned
        self.logprobs: list[list[float]] = []  # their logprobs, as returned

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        self.calls.append(
            {
                "request_id": request_id,
                "prompt_ids": list(prompt_ids),
                "params": dict(sampling_params),
                "priority": kwargs.get("priority"),
            }
        )
        if not self.script:
            raise AssertionError("the loop asked for more turns than scripted")
        limit = int(sampling_params["max_tokens"])
        if self.max_model_len is not None:
            room = self.max_model_len - len(prompt_ids)
            if room < 1:  # verl's vLLM server refuses such a request
                raise ValueError(
                    f"Prompt length ({len(prompt_ids)}) leaves no room to generate within the model's "
                    f"maximum context length ({self.max_model_len})"
                )
            limit = min(limit, room)
        turn = self.script.pop(0)
        kind, text = turn if isinstance(turn, tuple) else ("end", turn)
        if kind not in ("end", "eot", "cut", "abort"):
            raise AssertionError(f"unknown turn kind {kind!r}")
        ids = [] if kind == "abort" else self.tok.encode(text, add_special_tokens=False)
        if kind == "cut" and len(ids) < limit:
            raise AssertionError(
                f"a turn without an end token runs to its limit of {limit} tokens; the script has only {len(ids)}"
            )
        if kind in ("end", "eot"):
            ids = ids + [self.tok.convert_tokens_to_ids("<|im_end|>" if kind == "end" else "<|endoftext|>")]
        ids = ids[:limit]
        turn_no = len(self.outputs) + 1
        lps = [-(turn_no + (i + 1) / 1024) for i in range(len(ids))]  # distinct and exact in binary
        self.outputs.append(ids)
        self.logprobs.append(lps)
        await asyncio.sleep(0)
        want = self.want_logprobs[turn_no - 1] if isinstance(self.want_logprobs, list) else self.want_logprobs
        extra = self.extra_fields[turn_no - 1] if isinstance(self.extra_fields, list) else self.extra_fields
        return TokenOutput(
            token_ids=ids,
            log_probs=lps if want and ids else None,
            stop_reason="aborted" if kind == "abort" else "completed",
            num_preempted=self.num_preempted,
            extra_fields=dict(extra),
        )


# ------------------------------------------------------------------ sandbox
class _OutOfSteps(BaseException):
    """The program used up its step budget (the fake's CPU time limit)."""


_CALL_PREAMBLE = {name: getattr(typing, name) for name in ("List", "Dict", "Tuple", "Set", "Optional", "Any")}
_CALL_PREAMBLE.update({"math": math, "sys": sys})


class FakeSandbox:
    """`mrgrpo.sandbox` for the agent loop (``Job``, ``Limits``, ``run_async``): runs each test of the job in this
    process and returns the `ExecResult` the real sandbox returns for it. It isolates nothing: only for the tests'
    own programs.

    - tests run in order; with ``stop_on_first_failure`` the first failing one ends the job and is the last of
      ``tests`` (index as the real sandbox reports it); ``passed`` counts the AC tests, ``detail`` is
      ``"test I: V"`` (``": <last stderr line>"`` when there is one) or ``"all tests passed"``;
    - a program that does not compile is SE with no tests and the compiler's message; an empty one NO_CODE;
    - an exception is RE with the traceback as stderr; ``exit(n)`` is RE unless n is 0/None; MemoryError is MLE;
    - more than ``steps`` executed lines is TLE (its buffered output is lost, as when the real test is killed);
    - stdio output is compared by `mrgrpo.sandbox.compare.stdout_equal`, call-mode return values (as JSON) by
      ``values_equal``, both with the job's ``float_tol``;
    - ``infra={program: index}``: the sandbox fails at that test of that program (INFRA, as after its retry);
      a program is given as the answer text (its fenced code is taken) or as the code itself;
    - ``delay``: seconds each job waits (on the event loop) before it runs; ``jobs``, ``max_in_flight`` record
      what the loop asked for.
    """

    Job = Job
    Limits = Limits

    def __init__(self, infra: dict[str, int] | None = None, delay: float = 0.0, steps: int = 100_000):
        self.infra = {extract_code(k) or k: int(v) for k, v in (infra or {}).items()}
        self.delay = delay
        self.steps = steps
        self.jobs: list[Job] = []
        self.in_flight = 0
        self.max_in_flight = 0

    async def run_async(self, job: Job) -> ExecResult:
        self.jobs.append(job)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.delay)
        finally:
            self.in_flight -= 1
        return self.run(job)

    def run(self, job: Job) -> ExecResult:
        start = time.monotonic()
        total = len(job.inputs)
        if total == 0:
            raise ValueError("Job has no tests")
        if not job.code.strip():
            return ExecResult(Verdict.NO_CODE, 0, total, (), time.monotonic() - start, "no code")
        try:
            compiled = compile(job.code, "solution.py", "exec", dont_inherit=True)
        except (SyntaxError, ValueError) as exc:
            where = f" (line {exc.lineno})" if isinstance(exc, SyntaxError) and exc.lineno else ""
            message = f"{type(exc).__name__}: {getattr(exc, 'msg', None) or exc}{where}"
            return ExecResult(Verdict.SE, 0, total, (), time.monotonic() - start, message)
        tests: list[TestResult] = []
        verdict, detail = Verdict.AC, ""
        for index in range(total):
            if self.infra.get(job.code) == index:
                tests.append(TestResult(index, Verdict.INFRA, 0.0, "", ""))
                verdict, detail = Verdict.INFRA, "sandbox failed: worker died (fake)"
                break
            test = self._test(job, compiled, index)
            tests.append(test)
            if test.verdict is not Verdict.AC and verdict is Verdict.AC:
                verdict, detail = test.verdict, failure_detail(test)
                if job.stop_on_first_failure:
                    break
        passed = sum(t.verdict is Verdict.AC for t in tests)
        return ExecResult(verdict, passed, total, tuple(tests), time.monotonic() - start, detail or "all tests passed")

    def _test(self, job: Job, compiled, index: int) -> TestResult:
        call_mode = job.fn_name is not None
        stdin = io.StringIO("" if call_mode else job.inputs[index])
        out, err = io.StringIO(), io.StringIO()
        namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": __builtins__}
        if call_mode:
            namespace.update(_CALL_PREAMBLE)
        linecache.cache["solution.py"] = (len(job.code), None, job.code.splitlines(keepends=True), "solution.py")
        steps = 0

        def count_lines(frame, event, arg):
            nonlocal steps
            if event == "line":
                steps += 1
                if steps > self.steps:
                    raise _OutOfSteps
            return count_lines

        def trace(frame, event, arg):
            return count_lines if frame.f_code.co_filename == "solution.py" else None

        status, value_json, kind = 0, None, "ok"
        old_stdin, old_trace = sys.stdin, sys.gettrace()
        sys.stdin = stdin
        sys.settrace(trace)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    exec(compiled, namespace)
                    if call_mode:
                        value = entry_point(namespace, job.fn_name)(*copy.deepcopy(job.inputs[index]))
                        try:
                            value_json = json.dumps(value, allow_nan=True)
                        except (TypeError, ValueError):
                            kind = "badtype"
                except SystemExit as exc:
                    status = 0 if exc.code is None else exc.code if isinstance(exc.code, int) else 1
                    if not isinstance(exc.code, (int, type(None))):
                        print(exc.code, file=sys.stderr)
                    if call_mode and value_json is None and kind == "ok":
                        status = status or 1
        except _OutOfSteps:
            kind = "tle"
        except MemoryError:
            kind = "memory"
        except Exception as exc:  # the program's own exception, reported as the interpreter does
            status = 1
            tb = exc.__traceback__
            while tb is not None and tb.tb_frame.f_code.co_filename != "solution.py":
                tb = tb.tb_next
            err.write("".join(traceback.format_exception(type(exc), exc, tb)))
        finally:
            sys.settrace(old_trace)
            sys.stdin = old_stdin
        stdout, stderr = out.getvalue(), err.getvalue()
        if call_mode:
            stdout = value_json if value_json is not None else stdout

        def result(verdict: Verdict, shown: str = stdout) -> TestResult:
            return TestResult(index, verdict, 0.001, shown, stderr)

        if kind == "tle":
            return result(Verdict.TLE, "")
        if kind == "memory":
            return result(Verdict.MLE)
        if status != 0:
            return result(Verdict.RE)
        if not call_mode:
            return result(Verdict.AC if stdout_equal(job.outputs[index], stdout, job.float_tol) else Verdict.WA)
        if kind == "badtype":
            return result(Verdict.WA, "")
        ok = values_equal(job.outputs[index], parse_json_value(value_json), job.float_tol)
        return result(Verdict.AC if ok else Verdict.WA)


# ------------------------------------------------------------------ building the loop
def recipe_loop_settings() -> dict:
    """The recipe trainer yaml's ``mrgrpo.agent_loop`` section: the loop's only defaults, so tests follow it."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(TRAINER_YAML).mrgrpo.agent_loop)


def make_config(response_length=512, prompt_length=1024, enable_thinking=False, **settings):
    """A trainer config as the loop sees it: the recipe's ``mrgrpo.agent_loop`` section with ``settings`` on top."""
    from omegaconf import OmegaConf

    unknown = set(settings) - set(recipe_loop_settings())
    if unknown:
        raise AssertionError(f"not settings of the recipe yaml: {unknown}")
    return OmegaConf.create(
        {
            "actor_rollout_ref": {
                "rollout": {
                    "prompt_length": prompt_length,
                    "response_length": response_length,
                    "full_determinism": False,
                }
            },
            "data": {"apply_chat_template_kwargs": {"enable_thinking": enable_thinking}},
            "mrgrpo": {"agent_loop": {**recipe_loop_settings(), **settings}},
        }
    )


def make_loop(tokenizer, server, cfg=None, **settings):
    """The loop on ``cfg`` (default `make_config()`), with ``settings`` (``mrgrpo.agent_loop.*``) set on it."""
    from mrgrpo.agent_loop import build_loop

    cfg = cfg if cfg is not None else make_config()
    for key, value in settings.items():
        cfg.mrgrpo.agent_loop[key] = value
    return build_loop(cfg, server, tokenizer)


def run_loop(loop, row: dict, sampling_params: dict | None = None):
    """One trajectory of ``row`` (``raw_prompt``, ``extra_info``, ...) on the loop's event loop."""
    params = sampling_params or {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True}
    return loop.loop.run_until_complete(loop.run(params, **row))


# ------------------------------------------------------------------ rows and checks
def make_row(plan: str = "", plan_in_prompt: bool | None = None, **extra) -> dict:
    """A dataset row of the ``STATEMENT`` problem (stdio, public tests ``PUBLIC``) as the loop receives it."""
    from mrgrpo import prompts

    plan_in_prompt = bool(plan) if plan_in_prompt is None else plan_in_prompt
    messages = prompts.build_messages(STATEMENT, "", "stdio", None, plan if plan_in_prompt else None)
    extra_info = {
        "index": 0,
        "source_id": "t:0",
        "plan": plan,
        "io_mode": "stdio",
        "fn_name": None,
        "class_name": None,
        "public_tests": json.dumps(PUBLIC),
        "special": [],
        "statement": STATEMENT,
        "starter_code": "",
        **extra,
    }
    return {"raw_prompt": messages, "extra_info": extra_info}


def initial_ids(tok, messages, enable_thinking=False):
    """The chat template's rendering of ``messages`` with the generation prompt."""
    return list(
        tok.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, return_dict=False, enable_thinking=enable_thinking
        )
    )


def check_accounting(tok, out, server, enable_thinking=False):
    """Mask-1 tokens are exactly the generated ones in order, with their logprobs; every generate call saw
    the exact stream so far; masks/logprobs are aligned (injected tokens: logprob 0.0)."""
    from mrgrpo.agent_loop import EXTRA_FIELD_KEYS

    n = len(out.response_ids)
    assert len(out.response_mask) == n
    assert out.response_logprobs is None or len(out.response_logprobs) == n
    generated = [t for t, m in zip(out.response_ids, out.response_mask, strict=True) if m == 1]
    assert generated == [t for turn in server.outputs for t in turn]
    if out.response_logprobs is not None:
        lps = [lp for lp, m in zip(out.response_logprobs, out.response_mask, strict=True) if m == 1]
        assert lps == [lp for turn in server.logprobs for lp in turn]  # the server's values, in order
        assert all(lp == 0.0 for lp, m in zip(out.response_logprobs, out.response_mask, strict=True) if m == 0)
    stream = out.prompt_ids + out.response_ids
    for call in server.calls:
        assert stream[: len(call["prompt_ids"])] == call["prompt_ids"]
    assert server.calls[0]["prompt_ids"] == out.prompt_ids
    assert set(out.extra_fields) >= set(EXTRA_FIELD_KEYS)
    assert len(out.extra_fields["public_pass"]) == out.extra_fields["attempts"]


def decoded_response(tok, out) -> str:
    """The response tokens as text, special tokens included."""
    return tok.decode(out.response_ids, skip_special_tokens=False)
