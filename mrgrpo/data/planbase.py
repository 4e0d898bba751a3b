"""What every backend of the plan stage shares (`mrgrpo.data.plans`: sync, vllm; `mrgrpo.data.batch`): the
options, the items, the cache and the recorder of attempts, and the one-line error of a failed API step."""

from __future__ import annotations

import json
import os
import threading
import time
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


# ---------------------------------------------------------------- API errors and responses


def request_tries(exc: Exception) -> int | None:
    """How many requests the openai client sent for the call that raised ``exc`` (it numbers its retries in a
    request header); None when unknown."""
    request = getattr(exc, "request", None)
    try:
        return int(request.headers["x-stainless-retry-count"]) + 1
    except (AttributeError, KeyError, TypeError, ValueError):
        return None


def describe_error(exc: Exception) -> str:
    status = getattr(exc, "status_code", None)
    msg = " ".join(str(exc).split())[:300]
    return f"{type(exc).__name__}" + (f" {status}" if status else "") + f": {msg}"


def after_tries(tries: int | None) -> str:
    return "" if tries is None else f" after {tries} {'try' if tries == 1 else 'tries'}"


def step_error(step: str, exc: Exception, opts: PlanOptions, tries: int | None = None, then: str = "") -> PlanError:
    """One line: the step, how many requests were tried, the last error, the server and model."""
    tries = tries if tries is not None else request_tries(exc)
    where = f" [{opts.base_url}, model {opts.model!r}]"
    return PlanError(f"{step} failed{after_tries(tries)}: {describe_error(exc)}{where}" + then)


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


def progress_bar(progress: bool, total: int, desc: str):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="plan", disable=not progress, leave=False)
