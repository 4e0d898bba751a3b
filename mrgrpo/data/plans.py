"""Stage 2: a natural-language plan per problem from a stronger model, cached and resumable.

Backends: ``batch`` (OpenAI-compatible Batch API, `mrgrpo.data.batch`), ``sync`` (chat completions, bounded
concurrency), ``vllm`` (a local ``vllm.LLM``). All HTTP goes through the ``openai`` client that ``make_client``
builds (the seam tests point at a local server); ``vllm`` is imported only by the vllm backend. Every default of
the stage is a field of `PlanOptions`.

Transient failures of any API call (429, 408, 409, 5xx, cut connections, timeouts) are retried by the openai
client itself (``max_retries`` times, exponential backoff with jitter, ``Retry-After`` honoured); a call that
still fails names its step (``batch upload of ... failed after 7 tries: ...``). The one exception,
``batches.create``, is explained in `mrgrpo.data.batch`.

Ctrl-C: queued requests are never sent, plans already answered stay saved, and the stage prints
``interrupted: N saved, re-run to resume`` and leaves with status 130 (``PlansInterrupted``).

Cache: one JSON file per (problem hash, model, plan prompt version) under ``<cache_dir>/<k[:2]>/<k>.json``.
An entry records every attempt with its raw response, so rejected plans are kept. An entry is final
when its plan was accepted or when it used up its attempts; final entries are never requested again
(``retry_failed`` grants failed ones a fresh set of attempts).
"""

from __future__ import annotations

import dataclasses
import os
import queue
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mrgrpo import prompts
from mrgrpo.apps import Problem
from mrgrpo.data import batch, store
from mrgrpo.data.planbase import (  # noqa: F401  (BACKENDS, BatchPending, ...: this stage's names, used by its CLI)
    BACKENDS,
    DASHSCOPE_BASE_URL,
    DEFAULT_MODEL,
    BatchPending,
    Item,
    PlanCache,
    PlanError,
    PlanOptions,
    Recorder,
    Usage,
    after_tries,
    completion_fields,
    describe_error,
    is_final,
    progress_bar,
    request_tries,
    step_error,
)


class PlansInterrupted(SystemExit):
    """Ctrl-C during the plan stage: what was answered is saved; leaves the process with status 130."""

    def __init__(self, message: str, saved: int):
        super().__init__(130)
        self.message, self.saved = message, saved

    def __str__(self) -> str:
        return self.message


# ---------------------------------------------------------------- keys and cache


def plan_problem_hash(p: Problem, include_solution: bool = False) -> str:
    """Hash of what a plan request depends on."""
    d = {
        "statement": p.statement,
        "io_mode": p.io_mode,
        "fn_name": p.fn_name,
        "class_name": p.class_name,
        "starter_code": p.starter_code,
    }
    if include_solution:
        d["reference_solution"] = p.reference_solution
    return store.stable_hash(d)


def plan_key(problem_hash: str, model: str, prompt_version: str) -> str:
    return store.stable_hash({"problem": problem_hash, "model": model, "prompt_version": prompt_version})


# ---------------------------------------------------------------- the HTTP seam


def make_client(opts: PlanOptions):
    """The one place an HTTP client is built. Transient failures (429, 408, 409, 5xx, cut connections, timeouts)
    are retried by the openai client: ``opts.max_retries`` times, exponential backoff with jitter, Retry-After
    (and retry-after-ms) honoured."""
    key = os.environ.get(opts.api_key_env)
    if not key:
        raise PlanError(
            f"environment variable {opts.api_key_env} is not set: it must hold the API key for {opts.base_url} "
            "(choose another variable with --api-key-env)"
        )
    import openai

    return openai.OpenAI(
        api_key=key, base_url=opts.base_url, max_retries=opts.max_retries, timeout=opts.request_timeout_s
    )


def _is_fatal(exc: Exception) -> bool:
    import openai

    return isinstance(exc, (openai.AuthenticationError, openai.PermissionDeniedError, openai.NotFoundError))



# ---------------------------------------------------------------- sync backend



def run_sync(items: list[Item], rec: Recorder, opts: PlanOptions, client, progress: bool = False) -> None:
    """``opts.concurrency`` worker threads take items from a queue, one chat completion at a time.

    Ctrl-C (KeyboardInterrupt in the calling thread): no queued item is started, the recorder is closed (answers
    to requests in flight are dropped, nothing is written after this returns) and the interrupt propagates.
    The workers are daemon threads, so a request in flight does not hold the process.
    """
    todo: queue.SimpleQueue[Item] = queue.SimpleQueue()
    for it in items:
        todo.put(it)
    stop = threading.Event()
    fatal: list[Exception] = []
    crashed: list[BaseException] = []
    bar = progress_bar(progress, len(items), "plans (sync)")

    def plan(item: Item) -> None:
        while not stop.is_set() and not is_final(rec.cache.get(item.key)):
            try:
                resp = client.chat.completions.create(**opts.request_body(item.messages))
            except Exception as exc:
                if _is_fatal(exc):
                    fatal.append(exc)
                    stop.set()
                    return
                error = f"api_error: {describe_error(exc)}{after_tries(request_tries(exc))}"
                rec.record(item.key, backend="sync", error=error)
                continue
            content, finish, usage = completion_fields(resp)
            rec.record(item.key, backend="sync", content=content, finish_reason=finish, usage=usage)

    def worker() -> None:
        while not stop.is_set():
            try:
                item = todo.get_nowait()
            except queue.Empty:
                return
            try:
                plan(item)
            except BaseException as exc:  # a fault of ours (e.g. a corrupt cache entry): stop, re-raise below
                crashed.append(exc)
                stop.set()
                return
            bar.update(1)

    threads = [
        threading.Thread(target=worker, name=f"mrgrpo-plans-{i}", daemon=True)
        for i in range(min(opts.concurrency, len(items)))
    ]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    except KeyboardInterrupt:
        stop.set()
        rec.close()
        raise
    finally:
        bar.close()
    if crashed:
        raise crashed[0]
    if fatal:
        raise step_error("chat completion", fatal[0], opts)


# ---------------------------------------------------------------- vllm backend


def run_vllm(items: list[Item], rec: Recorder, opts: PlanOptions, progress: bool = False) -> None:
    """Local generation with ``vllm.LLM`` (GPU). Not exercised by the CPU tests: kept thin on purpose."""
    if opts.model == DEFAULT_MODEL:
        raise PlanError("--plans vllm needs --model set to a local path or Hugging Face id (e.g. Qwen/Qwen3-32B)")
    try:
        from vllm import LLM, SamplingParams
    except ImportError as e:
        raise PlanError(f"--plans vllm needs the vllm package (pip install 'mrgrpo[gpu]'): {e}") from e
    llm = LLM(model=opts.model, **opts.vllm_kwargs)
    params = SamplingParams(temperature=opts.temperature, max_tokens=opts.max_tokens)
    chat_kwargs = {"chat_template_kwargs": dict(opts.extra_body)} if opts.extra_body else {}
    while True:
        pending = [it for it in items if not is_final(rec.cache.get(it.key))]
        if not pending:
            return
        outs = llm.chat([it.messages for it in pending], params, use_tqdm=progress, **chat_kwargs)
        for it, out in zip(pending, outs, strict=True):
            gen = out.outputs[0]
            usage = {"prompt_tokens": len(out.prompt_token_ids or []), "completion_tokens": len(gen.token_ids or [])}
            rec.record(it.key, backend="vllm", content=gen.text, finish_reason=gen.finish_reason, usage=usage)


# ---------------------------------------------------------------- the stage



@dataclass
class PlansResult:
    rows: list[dict]  # one per problem, in order: source_id, key, status ("ok"|"failed"), plan, reason, ...
    usage_now: Usage
    usage_total: Usage
    requested: int  # items that needed the API in this run
    counts: dict = field(default_factory=dict)


def make_items(problems: Sequence[Problem], opts: PlanOptions) -> list[Item]:
    return [
        Item(
            plan_key(plan_problem_hash(p, opts.include_solution), opts.model, opts.prompt_version),
            p,
            prompts.plan_request_messages(p, include_solution=opts.include_solution),
        )
        for p in problems
    ]


def generate_plans(
    problems: Sequence[Problem],
    opts: PlanOptions,
    plans_dir: str | os.PathLike,
    cache_dir: str | os.PathLike | None = None,
    client_factory: Callable[[PlanOptions], Any] = make_client,
    progress: bool = False,
    sleep: Callable[[float], None] = time.sleep,
    log: Callable[[str], None] = print,
) -> PlansResult:
    plans_dir = Path(plans_dir)
    cache = PlanCache(cache_dir or plans_dir / "cache")
    items = make_items(problems, opts)
    by_key: dict[str, Item] = {}
    for it in items:
        by_key.setdefault(it.key, it)
    if opts.retry_failed:
        for key in by_key:
            e = cache.get(key)
            if e and e["status"] != "ok" and is_final(e):
                e["budget"] = len(e["attempts"]) + opts.max_attempts
                cache.put(e)
    rec = Recorder(cache, opts, by_key, plans_dir / "rejected.jsonl")
    unique = list(by_key.values())
    unfinished = opts.backend == "batch" and batch.has_unfinished(plans_dir)
    pending = [it for it in unique if not is_final(cache.get(it.key))]
    if pending or unfinished:
        log(f"[plans] {len(pending)} of {len(unique)} plans to request ({opts.backend}, model {opts.model})")
        try:
            if opts.backend == "vllm":
                run_vllm(pending, rec, opts, progress)
            else:
                client = client_factory(opts)
                if opts.backend == "sync":
                    run_sync(pending, rec, opts, client, progress)
                else:
                    batch.request_plans(pending, rec, opts, client, plans_dir, progress, sleep, log)
        except KeyboardInterrupt:
            rec.close()
            saved = sum(is_final(cache.get(it.key)) for it in unique)
            message = f"interrupted: {saved} saved, re-run to resume"
            print(message, file=sys.stderr, flush=True)
            raise PlansInterrupted(message, saved) from None
    rows, total = [], Usage()
    counts = {"ok": 0, "failed": 0, "rejected_attempts": 0, "attempts": 0}
    for it in items:
        e = cache.get(it.key)
        if e is None:  # cannot happen after the backends ran; keep the report honest if it does
            e = {"status": "failed", "reason": "no attempt recorded", "attempts": [], "plan": ""}
        ok = e["status"] == "ok"
        counts["ok" if ok else "failed"] += 1
        counts["attempts"] += len(e["attempts"])
        counts["rejected_attempts"] += sum(a["status"] == "rejected" for a in e["attempts"])
        for a in e["attempts"] if it is by_key[it.key] else []:
            pt, ct = a["usage"]["prompt_tokens"], a["usage"]["completion_tokens"]
            total.add(Usage(pt, ct, 1, opts.price(pt, ct, a["backend"])))
        rows.append(
            {
                "source_id": it.problem.source_id,
                "key": it.key,
                "status": "ok" if ok else "failed",
                "plan": e.get("plan", "") if ok else "",
                "reason": "" if ok else e.get("reason", ""),
                "model": opts.model,
                "prompt_version": opts.prompt_version,
                "attempts": len(e["attempts"]),
            }
        )
    return PlansResult(rows, rec.usage, total, len(pending), counts)


def usage_dict(u: Usage) -> dict:
    d = dataclasses.asdict(u)
    d["cost_usd"] = round(d["cost_usd"], 6)
    return d
