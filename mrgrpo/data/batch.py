"""The Batch API backend of the plan stage (`mrgrpo.data.plans`): a state machine over OpenAI-compatible batches.

A batch goes ``uploading`` (input JSONL written, file uploaded) -> ``creating`` (``batches.create``) ->
``submitted`` (polled until a terminal status) -> ``ingested`` (output and error files downloaded, one attempt
recorded per request). ``<plans dir>/batch_state.json`` is saved before and after every remote call, so a kill
at any point resumes without submitting the same requests twice: a batch whose create call may have reached the
server is looked up in the batch list (by its ``mrgrpo_local_id`` metadata or input file) and adopted.

Every call is retried by the openai client (`mrgrpo.data.plans.make_client`) except ``batches.create``, which is
retried here, one request at a time, so that the batch list can be checked between tries.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mrgrpo.data import store
from mrgrpo.data.planbase import (
    BatchPending,
    Item,
    PlanOptions,
    Recorder,
    completion_fields,
    is_final,
    progress_bar,
    step_error,
)

STATE_FILE = "batch_state.json"
TERMINAL_BATCH_STATUSES = ("completed", "failed", "expired", "cancelled")


def has_unfinished(plans_dir: Path) -> bool:
    """Whether the state file lists a batch not yet ingested (it is resumed even if the cache says all is done)."""
    state = store.read_json(plans_dir / STATE_FILE, {"batches": []}) or {"batches": []}
    return any(b["phase"] != "ingested" for b in state["batches"])


def _is_transient(exc: Exception) -> bool:
    """What the openai client retries: connection errors and timeouts, 408, 409, 429 and 5xx."""
    import openai

    if isinstance(exc, openai.APIConnectionError):  # includes APITimeoutError
        return True
    return isinstance(exc, openai.APIStatusError) and (exc.status_code in (408, 409, 429) or exc.status_code >= 500)


def _call(step: str, fn: Callable[[], Any], opts: PlanOptions, then: str = "") -> Any:
    """``fn()`` (one client call, retried by the client); its final failure becomes a PlanError naming ``step``."""
    try:
        return fn()
    except Exception as exc:
        raise step_error(step, exc, opts, then=then) from exc


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


_RESUME = f"; the batch state is saved in plans/{STATE_FILE}: run the same command again to resume"


def _find_created_batch(client, b: dict, opts: PlanOptions) -> Any:
    """The batch of ``b`` if a create call reached the server but its answer did not reach us (a kill during
    create, or a create that failed on the way back), found by its ``mrgrpo_local_id`` metadata or input file."""
    step = f"batch list (looking for batch {b['local_id']}, whose create call may have reached the server)"
    try:
        page = client.batches.list(limit=100)
    except Exception as exc:
        if _is_transient(exc):  # unknown whether it exists: creating another one could run the requests twice
            raise step_error(step, exc, opts, then=_RESUME) from exc
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
                raise step_error(step, exc, opts, tries=n + 1, then=_RESUME) from exc
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
            content, finish, usage = completion_fields(resp.get("body") if isinstance(resp, dict) else None)
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


def request_plans(
    items: list[Item],
    rec: Recorder,
    opts: PlanOptions,
    client,
    plans_dir: Path,
    progress: bool = False,
    sleep: Callable[[float], None] = time.sleep,
    log: Callable[[str], None] = print,
) -> None:
    """Plans for ``items`` through the Batch API until each is final: first every batch of the state file not yet
    ingested is finished (created, polled, downloaded, recorded), then the pending items go in a new batch, and
    so on. A batch still running after ``opts.max_wait_s`` raises `BatchPending` (resumable)."""
    state = BatchState(plans_dir / STATE_FILE)
    while True:
        for b in state.batches:
            if b["phase"] == "ingested":
                continue
            _ensure_created(client, b, opts, plans_dir, state, sleep)
            log(f"[plans] polling batch {b['batch_id']} ({len(b['custom_ids'])} requests)")
            bar = progress_bar(progress, len(b["custom_ids"]), f"batch {b['batch_id'][:20]}")
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
