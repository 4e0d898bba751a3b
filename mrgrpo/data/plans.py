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
import json
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
from mrgrpo.data import store
from mrgrpo.data.plancheck import check_plan

DASHSCOPE_BASE_URL = "https://dashscope.aliyuncs.com/compatible-mode/v1"
DEFAULT_MODEL = "qwen3-max"
BACKENDS = ("batch", "sync", "vllm")


class PlanError(store.DataError):
    """A failure of the plan stage as a whole (bad key, unreachable server, bad options), not of one item."""


class BatchPending(PlanError):
    """The batch is still running after ``max_wait_s``; its id is saved, run the command again to resume."""


class PlansInterrupted(SystemExit):
    """Ctrl-C during the plan stage: what was answered is saved; leaves the process with status 130."""

    def __init__(self, message: str, saved: int):
        super().__init__(130)
        self.message, self.saved = message, saved

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class PlanOptions:
    backend: str = "batch"
    model: str = DEFAULT_MODEL
    base_url: str = DASHSCOPE_BASE_URL
    api_key_env: str = "DASHSCOPE_API_KEY"
    include_solution: bool = False
    temperature: float = 0.3
    max_tokens: int = 1024
    extra_body: dict | None = None  # merged into every request body, e.g. {"enable_thinking": false}
    max_attempts: int = 3  # attempts per item (API error, truncated, rejected) before it is reported failed
    retry_failed: bool = False
    concurrency: int = 8  # sync
    max_retries: int = 6  # every API call: retries of 429, 408, 409, 5xx, cut connections and timeouts
    backoff_s: float = 0.5  # batches.create (our own retries): first wait, doubled each try, with jitter...
    backoff_max_s: float = 8.0  # ... capped here (the openai client's schedule for every other call)
    request_timeout_s: float = 180.0
    poll_interval_s: float = 30.0  # batch
    max_wait_s: float = 48 * 3600.0  # batch: stop polling (resumable) after this long
    price_in_per_m: float = 1.2  # USD per 1M prompt tokens (check your provider's price list)
    price_out_per_m: float = 6.0  # USD per 1M completion tokens
    batch_discount: float = 0.5  # batch price = discount * sync price
    vllm_kwargs: dict = field(default_factory=dict)  # passed to vllm.LLM(...)

    def __post_init__(self):
        if self.backend not in BACKENDS:
            raise ValueError(f"PlanOptions.backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.max_attempts < 1 or self.concurrency < 1:
            raise ValueError("PlanOptions: max_attempts and concurrency must be >= 1")
        if self.max_retries < 0:
            raise ValueError(f"PlanOptions.max_retries must be >= 0, got {self.max_retries}")

    @property
    def prompt_version(self) -> str:
        return prompts.plan_prompt_version(self.include_solution)

    def request_body(self, messages: list[dict]) -> dict:
        body = {
            "model": self.model,
            "messages": messages,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
        }
        body.update(self.extra_body or {})
        return body

    def price(self, prompt_tokens: int, completion_tokens: int, backend: str) -> float:
        if backend == "vllm":
            return 0.0
        usd = (prompt_tokens * self.price_in_per_m + completion_tokens * self.price_out_per_m) / 1e6
        return usd * (self.batch_discount if backend == "batch" else 1.0)


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


@dataclass
class Item:
    key: str
    problem: Problem
    messages: list[dict]


class PlanCache:
    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self._lock = threading.Lock()

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict | None:
        path = self.path(key)
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except json.JSONDecodeError as e:
            raise PlanError(f"plan cache entry {path} is not valid JSON ({e.msg}); delete it to redo that plan") from e

    def put(self, entry: dict) -> None:
        store.write_text_if_changed(self.path(entry["key"]), store.dump_json(entry))


def _new_entry(item: Item, opts: PlanOptions) -> dict:
    return {
        "key": item.key,
        "source_id": item.problem.source_id,
        "model": opts.model,
        "prompt_version": opts.prompt_version,
        "status": "pending",
        "plan": "",
        "reason": "",
        "attempts": [],
        "budget": opts.max_attempts,
    }


def is_final(entry: dict | None) -> bool:
    if entry is None:
        return False
    return entry["status"] == "ok" or len(entry["attempts"]) >= entry.get("budget", 0)


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    requests: int = 0
    cost_usd: float = 0.0

    def add(self, other: Usage) -> None:
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.requests += other.requests
        self.cost_usd += other.cost_usd


class Recorder:
    """Turns one response (or error) for an item into an attempt in its cache entry. Thread safe."""

    def __init__(self, cache: PlanCache, opts: PlanOptions, items: dict[str, Item], rejected_log: Path):
        self.cache, self.opts, self.items, self.rejected_log = cache, opts, items, rejected_log
        self.usage = Usage()
        self.closed = False
        self._lock = threading.Lock()

    def close(self) -> None:
        """Record nothing more (answers arriving after Ctrl-C are dropped); waits for a write in progress."""
        with self._lock:
            self.closed = True

    def record(
        self,
        key: str,
        *,
        backend: str,
        content: str | None = None,
        finish_reason: str | None = None,
        usage: dict | None = None,
        error: str | None = None,
        batch_id: str | None = None,
    ) -> dict:
        item = self.items[key]
        u = usage or {}
        pt, ct = int(u.get("prompt_tokens") or 0), int(u.get("completion_tokens") or 0)
        if error:
            status, reason, plan = "failed", error, ""
        elif content is None:
            status, reason, plan = "failed", "malformed: response has no message content", ""
        elif finish_reason == "length":
            status, reason, plan = (
                "rejected",
                f"truncated: finish_reason=length at max_tokens={self.opts.max_tokens}",
                "",
            )
        else:
            chk = check_plan(content, item.problem.reference_solution)
            status, reason, plan = ("ok", "", chk.plan) if chk.ok else ("rejected", chk.reason, "")
        attempt = {
            "backend": backend,
            "status": status,
            "reason": reason,
            "raw": content,
            "finish_reason": finish_reason,
            "usage": {"prompt_tokens": pt, "completion_tokens": ct},
            "batch_id": batch_id,
            "at": int(time.time()),
        }
        with self._lock:
            entry = self.cache.get(key) or _new_entry(item, self.opts)
            if self.closed or entry["status"] == "ok":  # interrupted, or a late duplicate of an accepted plan
                return entry
            entry["attempts"].append(attempt)
            entry.update(
                status="ok" if status == "ok" else ("failed" if status == "failed" else "rejected"),
                plan=plan,
                reason=reason,
            )
            self.cache.put(entry)
            self.usage.add(Usage(pt, ct, 1, self.opts.price(pt, ct, backend)))
            if status == "rejected" and content is not None:
                store.append_jsonl(
                    self.rejected_log,
                    {"key": key, "source_id": item.problem.source_id, "reason": reason, "raw": content},
                )
        return entry


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


def _tries(exc: Exception) -> int | None:
    """How many requests the openai client sent for the call that raised ``exc`` (it numbers its retries in a
    request header); None when unknown."""
    request = getattr(exc, "request", None)
    try:
        return int(request.headers["x-stainless-retry-count"]) + 1
    except (AttributeError, KeyError, TypeError, ValueError):
        return None


def _describe(exc: Exception) -> str:
    status = getattr(exc, "status_code", None)
    msg = " ".join(str(exc).split())[:300]
    return f"{type(exc).__name__}" + (f" {status}" if status else "") + f": {msg}"


def _after(tries: int | None) -> str:
    return "" if tries is None else f" after {tries} {'try' if tries == 1 else 'tries'}"


def step_error(step: str, exc: Exception, opts: PlanOptions, tries: int | None = None, then: str = "") -> PlanError:
    """One line: the step, how many requests were tried, the last error, the server and model."""
    tries = tries if tries is not None else _tries(exc)
    return PlanError(f"{step} failed{_after(tries)}: {_describe(exc)} [{opts.base_url}, model {opts.model!r}]" + then)


# ---------------------------------------------------------------- sync backend


def completion_fields(resp: Any) -> tuple[str | None, str | None, dict]:
    """(content, finish_reason, usage) from a chat completion object or dict; content None if malformed."""
    if hasattr(resp, "model_dump"):
        resp = resp.model_dump()
    if not isinstance(resp, dict):
        return None, None, {}
    usage = resp.get("usage") or {}
    choices = resp.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        return None, None, usage
    msg = choices[0].get("message") or {}
    content = msg.get("content") if isinstance(msg, dict) else None
    return (content if isinstance(content, str) else None), choices[0].get("finish_reason"), usage


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
                rec.record(item.key, backend="sync", error=f"api_error: {_describe(exc)}{_after(_tries(exc))}")
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


def progress_bar(progress: bool, total: int, desc: str):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="plan", disable=not progress, leave=False)


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
    from mrgrpo.data import batch  # it builds on this module

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
