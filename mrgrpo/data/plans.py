"""Stage 2: a natural-language plan per problem from a stronger model, cached and resumable.

Backends: ``batch`` (OpenAI-compatible Batch API: upload JSONL, create, poll, download output + error
files), ``sync`` (chat completions, bounded concurrency), ``vllm`` (a local ``vllm.LLM``). All HTTP goes
through the ``openai`` client that ``make_client`` builds (the seam tests point at a local server); ``vllm``
is imported only by the vllm backend.

Transient failures of any API call (429, 408, 409, 5xx, cut connections, timeouts) are retried by the openai
client itself (``max_retries`` times, exponential backoff with jitter, ``Retry-After`` honoured); a call that
still fails names its step (``batch upload of ... failed after 7 tries: ...``). ``batches.create`` alone is
retried here, one request at a time, so that between tries the batch list can show whether a failed-looking
create reached the server: that batch is adopted, never submitted twice.

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
import random
import sys
import threading
import time
import uuid
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
TERMINAL_BATCH_STATUSES = ("completed", "failed", "expired", "cancelled")


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


def _is_transient(exc: Exception) -> bool:
    """What the openai client retries: connection errors and timeouts, 408, 409, 429 and 5xx."""
    import openai

    if isinstance(exc, openai.APIConnectionError):  # includes APITimeoutError
        return True
    return isinstance(exc, openai.APIStatusError) and (exc.status_code in (408, 409, 429) or exc.status_code >= 500)


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


def _step_error(step: str, exc: Exception, opts: PlanOptions, tries: int | None = None, then: str = "") -> PlanError:
    """One line: the step, how many requests were tried, the last error, the server and model."""
    tries = tries if tries is not None else _tries(exc)
    return PlanError(f"{step} failed{_after(tries)}: {_describe(exc)} [{opts.base_url}, model {opts.model!r}]" + then)


def _call(step: str, fn: Callable[[], Any], opts: PlanOptions, then: str = "") -> Any:
    """``fn()`` (one client call, retried by the client); its final failure becomes a PlanError naming ``step``."""
    try:
        return fn()
    except Exception as exc:
        raise _step_error(step, exc, opts, then=then) from exc


def _retry_wait(exc: Exception, n: int, opts: PlanOptions) -> float | None:
    """Seconds to wait before try ``n + 2`` (the openai client's rule): the server's Retry-After (-ms) when it is
    in (0, 120] s, else ``backoff_s * 2**n`` capped at ``backoff_max_s``, minus up to 25% jitter. None: the
    server asks for more than 120 s, give up."""
    headers = getattr(getattr(exc, "response", None), "headers", None) or {}
    for name, scale in (("retry-after-ms", 1e-3), ("retry-after", 1.0)):
        try:
            wait = float(headers.get(name)) * scale
        except (TypeError, ValueError):
            continue
        if 0 < wait <= 120:
            return wait
        if wait > 120:
            return None
        break
    return min(opts.backoff_s * 2**n, opts.backoff_max_s) * (1 - 0.25 * random.random())


# ---------------------------------------------------------------- sync backend


def _completion_fields(resp: Any) -> tuple[str | None, str | None, dict]:
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
    bar = _bar(progress, len(items), "plans (sync)")

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
            content, finish, usage = _completion_fields(resp)
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
        raise _step_error("chat completion", fatal[0], opts)


# ---------------------------------------------------------------- batch backend


class BatchState:
    """``<plans dir>/batch_state.json``: every batch this output dir created, saved before and after each
    remote call so that a kill at any point resumes without submitting the same requests twice."""

    def __init__(self, path: Path):
        self.path = path
        self.data = store.read_json(path, {"batches": []}) or {"batches": []}

    @property
    def batches(self) -> list[dict]:
        return self.data["batches"]

    def save(self) -> None:
        store.write_text_if_changed(self.path, store.dump_json(self.data))


def _custom_id(key: str, n: int) -> str:
    return f"p{key[:24]}a{n}"


_RESUME = "; the batch state is saved in plans/batch_state.json: run the same command again to resume"


def _find_created_batch(client, b: dict, opts: PlanOptions) -> Any:
    """The batch of ``b`` if a create call reached the server but its answer did not reach us (a kill during
    create, or a create that failed on the way back), found by its ``mrgrpo_local_id`` metadata or input file."""
    step = f"batch list (looking for batch {b['local_id']}, whose create call may have reached the server)"
    try:
        page = client.batches.list(limit=100)
    except Exception as exc:
        if _is_transient(exc):  # unknown whether it exists: creating another one could run the requests twice
            raise _step_error(step, exc, opts, then=_RESUME) from exc
        return None  # the server cannot list batches: nothing to adopt
    for found in getattr(page, "data", []) or []:
        meta = getattr(found, "metadata", None) or {}
        if meta.get("mrgrpo_local_id") == b["local_id"] or (
            b["input_file_id"] and found.input_file_id == b["input_file_id"]
        ):
            return found
    return None


def _submit(
    client,
    rec: Recorder,
    state: BatchState,
    items: list[Item],
    opts: PlanOptions,
    plans_dir: Path,
    sleep: Callable[[float], None] = time.sleep,
) -> dict:
    local_id = f"b{len(state.batches) + 1:04d}-{uuid.uuid4().hex[:8]}"
    bdir = plans_dir / "batches" / local_id
    ids = {}
    lines = []
    for it in items:
        entry = rec.cache.get(it.key)
        cid = _custom_id(it.key, len(entry["attempts"]) if entry else 0)
        ids[cid] = it.key
        lines.append(
            {"custom_id": cid, "method": "POST", "url": "/v1/chat/completions", "body": opts.request_body(it.messages)}
        )
    input_path = bdir / "input.jsonl"
    store.write_text_if_changed(input_path, "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines))
    b = {
        "local_id": local_id,
        "phase": "uploading",
        "input_path": str(input_path.relative_to(plans_dir)),
        "custom_ids": ids,
        "model": opts.model,
        "base_url": opts.base_url,
        "input_file_id": None,
        "batch_id": None,
        "remote_status": None,
        "output_file_id": None,
        "error_file_id": None,
        "request_counts": None,
        "created_at": int(time.time()),
    }
    state.batches.append(b)
    state.save()
    _ensure_created(client, b, opts, plans_dir, state, sleep)
    return b


def _create_batch(client, b: dict, opts: PlanOptions, sleep: Callable[[float], None]) -> Any:
    """``batches.create``, retried here rather than by the client: a create whose answer is lost may still have
    made the batch, so before each new try the batch list is checked and such a batch is adopted."""
    once = client.with_options(max_retries=0)
    step = f"batch create ({b['local_id']}, input file {b['input_file_id']})"
    for n in range(opts.max_retries + 1):
        try:
            return once.batches.create(
                input_file_id=b["input_file_id"],
                endpoint="/v1/chat/completions",
                completion_window="24h",
                metadata={"mrgrpo_local_id": b["local_id"]},
            )
        except Exception as exc:
            wait = _retry_wait(exc, n, opts) if _is_transient(exc) and n < opts.max_retries else None
            if wait is None:
                raise _step_error(step, exc, opts, tries=n + 1, then=_RESUME) from exc
        sleep(wait)
        found = _find_created_batch(client, b, opts)
        if found is not None:
            return found
    raise AssertionError("unreachable")


def _ensure_created(
    client, b: dict, opts: PlanOptions, plans_dir: Path, state: BatchState, sleep: Callable[[float], None]
) -> None:
    if b["batch_id"]:
        return
    if b["phase"] == "creating":
        found = _find_created_batch(client, b, opts)
        if found is not None:
            b.update(batch_id=found.id, phase="submitted", remote_status=found.status)
            state.save()
            return
    if not b["input_file_id"]:
        path = plans_dir / b["input_path"]
        with open(path, "rb") as f:  # a seekable file: the client rewinds it before each retry
            fobj = _call(
                f"batch upload of {path}",
                lambda: client.files.create(file=(f"mrgrpo-{b['local_id']}.jsonl", f), purpose="batch"),
                opts,
                then=_RESUME,
            )
        b.update(input_file_id=fobj.id)
        state.save()
    b["phase"] = "creating"
    state.save()
    batch = _create_batch(client, b, opts, sleep)
    b.update(batch_id=batch.id, phase="submitted", remote_status=batch.status)
    state.save()


def _poll(client, b: dict, opts: PlanOptions, state: BatchState, sleep: Callable[[float], None], bar) -> Any:
    deadline = time.monotonic() + opts.max_wait_s
    while True:
        batch = _call(f"batch poll of {b['batch_id']}", lambda: client.batches.retrieve(b["batch_id"]), opts, _RESUME)
        counts = batch.request_counts.model_dump() if getattr(batch, "request_counts", None) else None
        b.update(
            remote_status=batch.status,
            request_counts=counts,
            output_file_id=batch.output_file_id,
            error_file_id=batch.error_file_id,
        )
        state.save()
        if counts and bar is not None:
            bar.n = counts.get("completed", 0) + counts.get("failed", 0)
            bar.total = counts.get("total") or bar.total
            bar.set_postfix_str(batch.status)
            bar.refresh()
        if batch.status in TERMINAL_BATCH_STATUSES:
            return batch
        if time.monotonic() > deadline:
            raise BatchPending(
                f"batch {b['batch_id']} is still {batch.status!r} after {opts.max_wait_s:.0f}s; "
                "its id is saved: run the same command again to keep polling it"
            )
        sleep(opts.poll_interval_s)


def _download(client, kind: str, b: dict, file_id: str | None, dest: Path, opts: PlanOptions) -> str:
    if not file_id:
        return ""
    if dest.is_file():
        return dest.read_text(encoding="utf-8")
    step = f"batch {kind} file download ({file_id} of batch {b['batch_id']})"
    resp = _call(step, lambda: client.files.content(file_id), opts, _RESUME)
    text = resp.content.decode("utf-8", errors="replace") if hasattr(resp, "content") else str(resp)
    store.write_text_if_changed(dest, text)
    return text


def _ingest(client, b: dict, batch: Any, rec: Recorder, opts: PlanOptions, plans_dir: Path) -> dict:
    """Record one attempt for every request of a finished batch; returns counts of what was found."""
    bdir = plans_dir / "batches" / b["local_id"]
    found: dict[str, int] = {"ok_lines": 0, "error_lines": 0, "malformed_lines": 0, "missing": 0}
    seen: set[str] = set()
    for kind, fid in (("output", b.get("output_file_id")), ("error", b.get("error_file_id"))):
        text = _download(client, kind, b, fid, bdir / f"{kind}.jsonl", opts)
        for line in text.split("\n"):  # JSON Lines: "\n" only (U+2028 and friends may sit raw in a plan)
            line = line.removesuffix("\r")
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                cid = row["custom_id"]
            except (json.JSONDecodeError, KeyError, TypeError):
                found["malformed_lines"] += 1
                continue
            key = b["custom_ids"].get(cid)
            if key is None or cid in seen:
                found["malformed_lines"] += 1
                continue
            if key not in rec.items:  # the input changed since this batch was submitted: kept on disk only
                seen.add(cid)
                found["stale"] = found.get("stale", 0) + 1
                continue
            seen.add(cid)
            resp = row.get("response") or {}
            status_code = resp.get("status_code") if isinstance(resp, dict) else None
            err = row.get("error")
            if err or (status_code is not None and status_code != 200):
                body = resp.get("body") if isinstance(resp, dict) else None
                detail = err or (body.get("error") if isinstance(body, dict) else body)
                rec.record(
                    key,
                    backend="batch",
                    batch_id=b["batch_id"],
                    error=f"api_error: status {status_code}: {json.dumps(detail)[:300]}",
                )
                found["error_lines"] += 1
                continue
            content, finish, usage = _completion_fields(resp.get("body") if isinstance(resp, dict) else None)
            rec.record(key, backend="batch", batch_id=b["batch_id"], content=content, finish_reason=finish, usage=usage)
            found["ok_lines"] += 1
    for cid, key in b["custom_ids"].items():
        if cid not in seen and key in rec.items:
            reason = f"missing: no result for this request in batch {b['batch_id']} (status {batch.status})"
            errs = getattr(batch, "errors", None)
            if errs is not None and getattr(errs, "data", None):
                reason += f": {errs.data[0].message}"
            rec.record(key, backend="batch", batch_id=b["batch_id"], error=reason)
            found["missing"] += 1
    return found


def run_batch(
    items: list[Item],
    rec: Recorder,
    opts: PlanOptions,
    client,
    plans_dir: Path,
    progress: bool = False,
    sleep: Callable[[float], None] = time.sleep,
    log: Callable[[str], None] = print,
) -> None:
    state = BatchState(plans_dir / "batch_state.json")
    while True:
        for b in state.batches:
            if b["phase"] == "ingested":
                continue
            _ensure_created(client, b, opts, plans_dir, state, sleep)
            log(f"[plans] polling batch {b['batch_id']} ({len(b['custom_ids'])} requests)")
            bar = _bar(progress, len(b["custom_ids"]), f"batch {b['batch_id'][:20]}")
            try:
                batch = _poll(client, b, opts, state, sleep, bar)
            finally:
                bar.close()
            found = _ingest(client, b, batch, rec, opts, plans_dir)
            b.update(phase="ingested", ingest=found)
            state.save()
            log(f"[plans] batch {b['batch_id']} {batch.status}: {found}")
        pending = [it for it in items if not is_final(rec.cache.get(it.key))]
        if not pending:
            return
        _submit(client, rec, state, pending, opts, plans_dir, sleep)
        log(f"[plans] submitted batch {state.batches[-1]['batch_id']} with {len(pending)} requests")


# ---------------------------------------------------------------- vllm backend


def run_vllm(items: list[Item], rec: Recorder, opts: PlanOptions, progress: bool = False) -> None:
    """Local generation with ``vllm.LLM`` (GPU). Not exercised by the CPU tests: kept thin on purpose."""
    if opts.model == DEFAULT_MODEL:
        raise PlanError("--plans vllm needs --model set to a local path or Hugging Face id (e.g. Qwen/Qwen3-32B)")
    try:
        from vllm import LLM, SamplingParams
    except ImportError as e:
        raise PlanError(f"--plans vllm needs the vllm package (pip install 'mrgrpo[vllm]'): {e}") from e
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


def _bar(progress: bool, total: int, desc: str):
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
    # An unfinished batch in the state file is always resumed, even if the cache says all is done.
    state_path = plans_dir / "batch_state.json"
    unfinished = opts.backend == "batch" and any(
        b["phase"] != "ingested" for b in (store.read_json(state_path, {"batches": []}) or {"batches": []})["batches"]
    )
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
                    run_batch(pending, rec, opts, client, plans_dir, progress, sleep, log)
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
