"""Plan generation against a real HTTP server on 127.0.0.1 speaking the OpenAI Files/Batches/Chat endpoints.

Covers: batch happy path, kill -9 after the batch was created and resume (same batch id, no resubmission),
a kill inside the create call (found again through the batch metadata), partial failures (error file,
missing and malformed lines, truncated and code-containing answers) retried in a second batch, items
that keep failing reported after max_attempts, transient failures (5xx, 408, 409, 429 + Retry-After, cut
connections) at every Batch API step retried, a create that failed on the way back adopted rather than
repeated, a step failing for good named in one line, sync with 429 + Retry-After, malformed JSON, cut
responses, Ctrl-C during sync (queued requests never sent, exit 130, resume), and idempotency (a second run
makes no HTTP request at all).

Injected faults carry Retry-After / retry-after-ms of a few milliseconds, so retries wait next to nothing.
"""

from __future__ import annotations

import email.parser
import email.policy
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from mrgrpo.apps import bundled_sample_path, read_problems
from mrgrpo.data import pipeline, store
from mrgrpo.data.plans import PlanError, PlanOptions, generate_plans, make_client
from mrgrpo.data.validate import ValidateOptions
from mrgrpo.prompts import plan_request_messages

REPO = Path(__file__).resolve().parents[2]
KEY_ENV = "MRGRPO_TEST_KEY"


def good_plan(tag: str) -> str:
    return (
        f"Plan {tag}. Read the numbers, then sort them and sweep once from left to right while keeping a running "
        "count of the best value seen so far. Handle the empty case separately. The running time is O(n log n)."
    )


def problem_tag(body: dict) -> str:
    """A stable tag of the problem a request is about (from the statement text)."""
    text = body["messages"][-1]["content"]
    return store.sha256_text(text)[:10]


class FakeOpenAI:
    """State of the fake server. ``behave(kind, tag, n)`` decides the answer to the n-th request (0-based)
    about problem ``tag`` through ``kind`` ("batch" or "chat"); it returns one of:
    ("ok", text) | ("finish_length", text) | ("error", status) | ("drop", None) | ("malformed", None) |
    ("429", None) | ("500", None) | ("badjson", None) | ("cut", None)."""

    def __init__(self, behave=None, polls_to_complete: int = 2):
        self.behave = behave or (lambda kind, tag, n: ("ok", good_plan(tag)))
        self.polls_to_complete = polls_to_complete
        self.hold = False  # keep batches in_progress
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, dict] = {}
        self.calls: list[tuple[str, str]] = []
        self.seen: dict[tuple[str, str], int] = {}
        self.lock = threading.Lock()
        self.faults: dict[str, list] = {}  # step -> faults for its next requests (see ``fault``)
        self.forever: dict[str, object] = {}
        self.chat_received = 0
        self.hold_chat_after: int | None = None  # chat requests past this many wait for ``release``
        self.release = threading.Event()

    def fault(self, step: str, *faults, forever: bool = False) -> None:
        """The next requests of ``step`` ("upload", "create", "retrieve", "list", "content", "chat") fail, one
        fault each: a status code (answered with retry-after-ms: 1), ``(status, headers)``, "cut" (the answer
        stops half way and the connection closes), or ``("after", status)`` (create only: the batch is made,
        then the status is answered). ``forever``: every request gets the one fault given."""
        if forever:
            self.forever[step] = faults[0]
        else:
            self.faults.setdefault(step, []).extend(faults)

    def take_fault(self, step: str, when: str):
        """The fault for this request of ``step`` at moment ``when`` ("before" or "after" handling it), or None."""
        with self.lock:
            queue = self.faults.get(step)
            fault = self.forever.get(step, queue[0] if queue else None)
            if fault is None or (isinstance(fault, tuple) and fault[0] == "after") != (when == "after"):
                return None
            if step not in self.forever:
                queue.pop(0)
            return fault

    def count(self, method: str, prefix: str) -> int:
        return sum(1 for m, p in self.calls if m == method and p.startswith(prefix))

    def _next(self, kind: str, tag: str):
        with self.lock:
            n = self.seen.get((kind, tag), 0)
            self.seen[(kind, tag)] = n + 1
        return self.behave(kind, tag, n)

    @staticmethod
    def completion(text: str, finish: str = "stop") -> dict:
        return {
            "id": "chatcmpl-" + uuid.uuid4().hex[:8],
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "choices": [{"index": 0, "finish_reason": finish, "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 50, "total_tokens": 150},
        }

    def file_obj(self, fid: str, purpose: str) -> dict:
        return {
            "id": fid,
            "object": "file",
            "bytes": len(self.files[fid]),
            "created_at": 0,
            "filename": fid + ".jsonl",
            "purpose": purpose,
            "status": "processed",
        }

    def batch_obj(self, b: dict) -> dict:
        return {k: v for k, v in b.items() if not k.startswith("_")}

    def advance(self, b: dict) -> None:
        if b["status"] in ("completed", "failed", "expired", "cancelled") or self.hold:
            return
        b["_polls"] += 1
        if b["_polls"] < self.polls_to_complete:
            b["status"] = "in_progress"
            return
        out, err = [], []
        for line in self.files[b["input_file_id"]].decode().split("\n")[:-1]:  # JSON Lines: "\n" only
            req = json.loads(line)
            cid = req["custom_id"]
            what, arg = self._next("batch", problem_tag(req["body"]))
            if what in ("ok", "finish_length"):
                comp = self.completion(arg, "length" if what == "finish_length" else "stop")
                out.append(
                    json.dumps(
                        {
                            "id": "r",
                            "custom_id": cid,
                            "error": None,
                            "response": {"status_code": 200, "request_id": "q", "body": comp},
                        },
                        ensure_ascii=False,  # UTF-8 as is: U+2028 and friends raw inside a line
                    )
                )
            elif what == "error":
                err.append(
                    json.dumps(
                        {
                            "id": "r",
                            "custom_id": cid,
                            "error": {"code": "server_error", "message": "boom"},
                            "response": {"status_code": arg, "request_id": "q", "body": None},
                        }
                    )
                )
            elif what == "malformed":
                out.append('{"id": "r", "custom_id": "' + cid + '", "response": {"status_code": 200, "bo')
            # "drop": no line at all
        done = sum(1 for x in out if x.endswith("}"))
        b.update(
            status="completed", request_counts={"total": len(out) + len(err), "completed": done, "failed": len(err)}
        )
        for name, lines in (("output_file_id", out), ("error_file_id", err)):
            if lines:
                fid = "file-" + uuid.uuid4().hex[:12]
                self.files[fid] = ("\n".join(lines) + "\n").encode()
                b[name] = fid


def make_handler(state: FakeOpenAI):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def _send(self, code, payload, headers=None, raw=None, declared=None, ctype="application/json"):
            body = raw if raw is not None else json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("content-type", ctype)
            self.send_header("content-length", str(declared if declared is not None else len(body)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)
            if declared is not None:
                self.close_connection = True

        def _body(self) -> bytes:
            return self.rfile.read(int(self.headers.get("content-length") or 0))

        def _fault(self, step: str, when: str = "before") -> bool:
            """Answer with the next injected fault of ``step`` if there is one; True when it was sent."""
            fault = state.take_fault(step, when)
            if fault is None:
                return False
            if fault == "cut":
                self._send(200, None, raw=b'{"id": "x", "obj', declared=400)
                return True
            if isinstance(fault, tuple) and fault[0] == "after":
                fault = fault[1]
            status, headers = fault if isinstance(fault, tuple) else (fault, {"retry-after-ms": "1"})
            self._send(status, {"error": {"message": f"injected {status}", "type": "server_error"}}, headers)
            return True

        def do_GET(self):
            path = self.path.split("?")[0]
            state.calls.append(("GET", path))
            m = re.fullmatch(r"/v1/files/([^/]+)/content", path)
            if m:
                if self._fault("content"):
                    return None
                return self._send(200, None, raw=state.files[m.group(1)], ctype="application/octet-stream")
            m = re.fullmatch(r"/v1/batches/([^/]+)", path)
            if m:
                if self._fault("retrieve"):
                    return None
                b = state.batches[m.group(1)]
                state.advance(b)
                return self._send(200, state.batch_obj(b))
            if path == "/v1/batches":
                if self._fault("list"):
                    return None
                data = [state.batch_obj(b) for b in state.batches.values()]
                return self._send(200, {"object": "list", "data": data, "has_more": False})
            self._send(404, {"error": {"message": "no such path"}})

        def do_POST(self):
            path = self.path.split("?")[0]
            state.calls.append(("POST", path))
            raw = self._body()
            if path == "/v1/files":
                if self._fault("upload"):
                    return None
                msg = email.parser.BytesParser(policy=email.policy.default).parsebytes(
                    b"content-type: " + self.headers["content-type"].encode() + b"\r\n\r\n" + raw
                )
                fields = {
                    p.get_param("name", header="content-disposition"): p.get_payload(decode=True)
                    for p in msg.iter_parts()
                }
                fid = "file-batch-" + uuid.uuid4().hex[:12]
                state.files[fid] = fields["file"]
                return self._send(200, state.file_obj(fid, fields["purpose"].decode()))
            if path == "/v1/batches":
                if self._fault("create"):
                    return None
                req = json.loads(raw)
                bid = "batch_" + uuid.uuid4().hex[:12]
                state.batches[bid] = {
                    "id": bid,
                    "object": "batch",
                    "endpoint": req["endpoint"],
                    "input_file_id": req["input_file_id"],
                    "completion_window": req["completion_window"],
                    "status": "validating",
                    "created_at": 0,
                    "metadata": req.get("metadata"),
                    "output_file_id": None,
                    "error_file_id": None,
                    "request_counts": {"total": 0, "completed": 0, "failed": 0},
                    "_polls": 0,
                }
                if self._fault("create", when="after"):
                    return None
                return self._send(200, state.batch_obj(state.batches[bid]))
            if path == "/v1/chat/completions":
                req = json.loads(raw)
                with state.lock:
                    state.chat_received += 1
                    n_chat = state.chat_received
                if state.hold_chat_after is not None and n_chat > state.hold_chat_after:
                    state.release.wait(60)
                what, arg = state._next("chat", problem_tag(req))
                if what == "429":
                    return self._send(
                        429,
                        {"error": {"message": "rate limited", "type": "rate_limit"}},
                        headers={"retry-after": "0.01"},
                    )
                if what == "500":
                    return self._send(500, {"error": {"message": "internal"}}, headers={"retry-after-ms": "1"})
                if what == "badjson":
                    return self._send(200, None, raw=b'{"id": "x", "choices": [{"mess')
                if what == "cut":
                    return self._send(200, None, raw=b'{"id": "x", "cho', declared=400)
                if what == "error":
                    return self._send(arg, {"error": {"message": "bad request"}})
                return self._send(200, state.completion(arg, "length" if what == "finish_length" else "stop"))
            self._send(404, {"error": {"message": "no such path"}})

    return Handler


@pytest.fixture
def server():
    state = FakeOpenAI()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(state))
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    state.base_url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    yield state
    state.release.set()
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def problems():
    return [p for p in read_problems(bundled_sample_path())][:12]


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-test")
    for k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(k, raising=False)


def opts(server, **kw) -> PlanOptions:
    base = dict(
        backend="batch",
        base_url=server.base_url,
        api_key_env=KEY_ENV,
        poll_interval_s=0.01,
        backoff_s=0.001,
        backoff_max_s=0.01,
        max_attempts=3,
        concurrency=4,
        request_timeout_s=10,
    )
    base.update(kw)
    return PlanOptions(**base)


def gen(problems, o, tmp_path, **kw):
    return generate_plans(problems, o, tmp_path / "plans", log=lambda s: None, **kw)


def no_client(_opts):
    raise AssertionError("the API client must not be built when every plan is cached")


def test_batch_happy_path_and_idempotent(server, problems, tmp_path):
    res = gen(problems, opts(server), tmp_path)
    assert res.counts["ok"] == len(problems) and res.counts["failed"] == 0
    assert server.count("POST", "/v1/batches") == 1 and server.count("POST", "/v1/files") == 1
    assert res.usage_now.prompt_tokens == 100 * len(problems) and res.usage_now.completion_tokens == 50 * len(problems)
    # batch price = discount * (100 * 1.2 + 50 * 6.0) / 1e6 per request
    assert res.usage_now.cost_usd == pytest.approx(len(problems) * 0.5 * (100 * 1.2 + 50 * 6.0) / 1e6)
    req = json.loads((tmp_path / "plans" / "batches").glob("*/input.jsonl").__next__().read_text().splitlines()[0])
    assert req["url"] == "/v1/chat/completions" and req["body"]["model"] == "qwen3-max"
    assert all(r["plan"].startswith("Plan ") for r in res.rows)
    n_calls = len(server.calls)
    again = gen(problems, opts(server), tmp_path, client_factory=no_client)
    assert len(server.calls) == n_calls and again.requested == 0
    assert [r["plan"] for r in again.rows] == [r["plan"] for r in res.rows]
    assert again.usage_total.prompt_tokens == res.usage_total.prompt_tokens


def test_batch_output_lines_end_at_newline_only(server, problems, tmp_path):
    """A plan holding U+2028, U+2029 or U+0085 (written raw by the server) is one output line, not three."""
    server.behave = lambda kind, tag, n: ("ok", good_plan(tag).replace(". ", ".\u2028", 1).replace(". ", ".\u0085 ", 1))
    res = gen(problems, opts(server), tmp_path)
    assert res.counts["ok"] == len(problems) and res.counts["attempts"] == len(problems)
    state = json.loads((tmp_path / "plans" / "batch_state.json").read_text())
    assert state["batches"][0]["ingest"]["malformed_lines"] == 0


def test_batch_partial_failures_are_retried_then_reported(server, problems, tmp_path):
    tags = sorted({problem_tag({"messages": plan_request_messages(p)}) for p in problems})
    script = {  # tag -> answers of successive batches
        tags[0]: [("error", 500), ("ok", None)],
        tags[1]: [("drop", None), ("ok", None)],
        tags[2]: [("malformed", None), ("ok", None)],
        tags[3]: [("finish_length", "Plan cut off in the mid"), ("ok", None)],
        tags[4]: [("ok", "Here you go:\n```python\nn = int(input())\nprint(n)\n```\nThat is all, it is simple.")]
        + [("ok", None)],
        tags[5]: [("error", 400)] * 10,  # never succeeds
    }

    def behave(kind, tag, n):
        seq = script.get(tag)
        what, text = seq[min(n, len(seq) - 1)] if seq else ("ok", None)
        return what, (text if text is not None else good_plan(tag))

    server.behave = behave
    res = gen(problems, opts(server), tmp_path)
    by_tag = {}
    for p, row in zip(problems, res.rows, strict=True):
        by_tag[problem_tag({"messages": plan_request_messages(p)})] = row
    assert res.counts["ok"] == len(problems) - 1
    bad = by_tag[tags[5]]
    assert bad["status"] == "failed" and bad["attempts"] == 3 and "status 400" in bad["reason"]
    assert server.count("POST", "/v1/batches") == 3  # first batch, retry of 6 failures, retry of the last one
    # the rejected raw answers are kept
    rejected = [json.loads(x) for x in (tmp_path / "plans" / "rejected.jsonl").read_text().splitlines()]
    reasons = " | ".join(r["reason"] for r in rejected)
    assert "truncated" in reasons and "code: fenced block" in reasons
    assert any("```python" in r["raw"] for r in rejected)
    state = json.loads((tmp_path / "plans" / "batch_state.json").read_text())
    first = state["batches"][0]["ingest"]
    assert first["error_lines"] == 2 and first["missing"] == 2 and first["malformed_lines"] == 1
    # reported, and not requested again on the next run
    calls = len(server.calls)
    again = gen(problems, opts(server), tmp_path, client_factory=no_client)
    assert again.counts["failed"] == 1 and len(server.calls) == calls
    # --retry-failed grants new attempts to the failed item only
    again = gen(problems, opts(server, retry_failed=True), tmp_path)
    assert again.requested == 1 and again.counts["failed"] == 1
    assert server.count("POST", "/v1/batches") == 6  # three more attempts, one batch each


class Crash(BaseException):
    pass


class CrashingClient:
    """Wraps an OpenAI client; raises Crash right after a chosen call went through (a kill at that point)."""

    def __init__(self, inner, after: str):
        self._inner, self._after = inner, after
        outer = self

        class Batches:
            def create(self, **kw):
                b = inner.batches.create(**kw)
                if outer._after == "create":
                    raise Crash()
                return b

            def retrieve(self, bid):
                inner.batches.retrieve(bid)
                raise Crash()

            def list(self, **kw):
                return inner.batches.list(**kw)

        self.batches = Batches()
        self.files = inner.files

    def with_options(self, **kw):
        return CrashingClient(self._inner.with_options(**kw), self._after)


@pytest.mark.parametrize("after", ["create", "retrieve"])
def test_batch_crash_then_resume_never_resubmits(server, problems, tmp_path, after):
    o = opts(server)
    with pytest.raises(Crash):
        gen(problems, o, tmp_path, client_factory=lambda op: CrashingClient(make_client(op), after))
    assert server.count("POST", "/v1/batches") == 1
    state = json.loads((tmp_path / "plans" / "batch_state.json").read_text())
    assert len(state["batches"]) == 1
    if after == "retrieve":  # the batch id was saved before polling started
        assert state["batches"][0]["batch_id"] in server.batches
    res = gen(problems, o, tmp_path)
    assert res.counts["ok"] == len(problems)
    assert server.count("POST", "/v1/batches") == 1 and server.count("POST", "/v1/files") == 1
    state = json.loads((tmp_path / "plans" / "batch_state.json").read_text())
    assert [b["batch_id"] for b in state["batches"]] == list(server.batches)


def test_kill_9_during_polling_then_resume(server, tmp_path):
    """A real `mrgrpo data plans` process killed with SIGKILL while it polls; the rerun adopts its batch."""
    out = tmp_path / "out"
    pipeline.run_validate(out, None, ValidateOptions(run_reference=False))
    server.hold = True
    cmd = [
        sys.executable,
        "-m",
        "mrgrpo.cli",
        "data",
        "plans",
        "--out",
        str(out),
        "--plans",
        "batch",
        "--base-url",
        server.base_url,
        "--api-key-env",
        KEY_ENV,
        "--poll-interval",
        "0.05",
        "--quiet",
    ]
    env = {**os.environ, KEY_ENV: "sk-test"}
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    state_path = out / "plans" / "batch_state.json"
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            st = store.read_json(state_path, None) if state_path.exists() else None
            if st and st["batches"] and st["batches"][0].get("batch_id") and server.count("GET", "/v1/batches/") >= 2:
                break
            assert proc.poll() is None, proc.stdout.read().decode()
            time.sleep(0.05)
        else:
            pytest.fail("the plans process never started polling")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    batch_id = store.read_json(state_path)["batches"][0]["batch_id"]
    assert list(server.batches) == [batch_id]
    server.hold = False
    loud = [c for c in cmd if c != "--quiet"]  # --quiet silences the progress lines this checks
    r = subprocess.run(loud, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"polling batch {batch_id}" in r.stderr  # progress on stderr, machine output alone on stdout
    assert server.count("POST", "/v1/batches") == 1 and server.count("POST", "/v1/files") == 1
    rows = list(store.read_jsonl(out / "plans.jsonl"))
    assert len(rows) == 150 and all(r["status"] == "ok" for r in rows)
    # a third run: no HTTP at all, plans.jsonl unchanged
    before = (out / "plans.jsonl").stat().st_mtime_ns
    calls = len(server.calls)
    r = subprocess.run(cmd, cwd=REPO, env={**env, KEY_ENV: ""}, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert len(server.calls) == calls and (out / "plans.jsonl").stat().st_mtime_ns == before


def test_sync_rate_limits_malformed_and_cut_responses(server, problems, tmp_path):
    script = [
        ("429", None),
        ("429", None),
        ("badjson", None),
        ("cut", None),
        ("500", None),
        ("finish_length", "Plan that was cut"),
        ("ok", None),
    ]

    def behave(kind, tag, n):
        what, text = script[min(n, len(script) - 1)]
        return what, (text if text is not None else good_plan(tag))

    server.behave = behave
    o = opts(server, backend="sync", max_attempts=4, max_retries=3)
    res = gen(problems[:4], o, tmp_path)
    # attempt 1: 429, 429, badjson -> failed; attempt 2: cut (retried), 500 (retried), finish_length -> rejected;
    # attempt 3: ok
    assert res.counts["ok"] == 4, res.rows
    assert all(r["attempts"] == 3 for r in res.rows)
    assert server.count("POST", "/v1/chat/completions") == 4 * len(script)
    entry = json.loads(next((tmp_path / "plans" / "cache").rglob("*.json")).read_text())
    assert [a["status"] for a in entry["attempts"]] == ["failed", "rejected", "ok"]
    assert "JSONDecodeError" in entry["attempts"][0]["reason"]
    assert entry["attempts"][1]["raw"] == "Plan that was cut"
    # only the three answered attempts count tokens
    assert res.usage_now.requests == 4 * 3 and res.usage_now.prompt_tokens == 4 * 2 * 100


def test_sync_gives_up_after_max_attempts_and_auth_error_aborts(server, problems, tmp_path):
    server.behave = lambda kind, tag, n: ("429", None)
    o = opts(server, backend="sync", max_attempts=2, max_retries=1)
    res = gen(problems[:2], o, tmp_path)
    assert res.counts["failed"] == 2 and all("RateLimitError 429" in r["reason"] for r in res.rows)
    assert server.count("POST", "/v1/chat/completions") == 2 * 2 * 2
    server.behave = lambda kind, tag, n: ("error", 401)
    with pytest.raises(PlanError, match="AuthenticationError 401"):
        gen(problems[2:4], o, tmp_path / "b")


def test_missing_api_key_is_a_clear_error(problems, tmp_path, monkeypatch):
    monkeypatch.delenv(KEY_ENV)
    o = PlanOptions(backend="sync", api_key_env=KEY_ENV)
    with pytest.raises(PlanError, match=f"environment variable {KEY_ENV} is not set"):
        gen(problems[:1], o, tmp_path)


# ---------------------------------------------------------------- transient failures of the Batch API


def input_lines(server) -> int:
    """Lines of the one batch input file the server received."""
    (b,) = server.batches.values()
    return len(server.files[b["input_file_id"]].decode().splitlines())


@pytest.mark.parametrize(
    "step, fault",
    [
        ("upload", 503),
        ("upload", 408),
        ("upload", "cut"),
        ("create", 503),
        ("create", 409),
        ("retrieve", 502),
        ("retrieve", "cut"),
        ("content", 500),
        ("content", "cut"),
    ],
)
def test_batch_step_retries_a_transient_failure(server, problems, tmp_path, step, fault):
    server.fault(step, fault)
    res = gen(problems, opts(server), tmp_path)
    assert res.counts["ok"] == len(problems) and res.counts["failed"] == 0
    assert server.faults[step] == []  # the fault was served, and the step was tried again
    assert len(server.batches) == 1 and input_lines(server) == len(problems)  # a retried upload is complete


def test_batch_create_that_failed_on_the_way_back_is_adopted_not_repeated(server, problems, tmp_path):
    server.fault("create", ("after", 503))  # the server makes the batch, then answers 503
    res = gen(problems, opts(server), tmp_path)
    assert res.counts["ok"] == len(problems)
    assert server.count("POST", "/v1/batches") == 1 and len(server.batches) == 1
    state = json.loads((tmp_path / "plans" / "batch_state.json").read_text())
    assert [b["batch_id"] for b in state["batches"]] == list(server.batches)


@pytest.mark.parametrize("step", ["upload", "retrieve", "create"])
def test_batch_429_waits_for_retry_after(server, problems, tmp_path, monkeypatch, step):
    """The wait after a 429 is the server's Retry-After, not the client's own backoff (0.5 s and up, jittered)."""
    server.fault(step, (429, {"retry-after": "0.0123"}))
    slept: list[float] = []
    real_sleep = time.sleep

    def sleep(s: float) -> None:
        slept.append(s)
        real_sleep(s)

    monkeypatch.setattr(time, "sleep", sleep)  # the openai client's waits
    res = gen(problems, opts(server), tmp_path, sleep=sleep)  # our waits (create, polls)
    assert res.counts["ok"] == len(problems)
    assert server.faults[step] == [] and 0.0123 in slept


def test_batch_step_failing_for_good_is_one_line_naming_the_step_then_resumes(server, tmp_path):
    out = tmp_path / "out"
    server.fault("upload", 503, forever=True)
    cmd = [
        sys.executable,
        "-m",
        "mrgrpo.cli",
        "data",
        "prepare",
        "--out",
        str(out),
        "--plans",
        "batch",
        "--no-run-reference",
        "--base-url",
        server.base_url,
        "--api-key-env",
        KEY_ENV,
        "--max-retries",
        "2",
        "--poll-interval",
        "0.05",
        "--quiet",
    ]
    env = {**os.environ, KEY_ENV: "sk-test"}
    r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert re.search(r"batch upload of \S+input\.jsonl failed after 3 tries: InternalServerError 503", line), line
    assert server.base_url in line and "run the same command again to resume" in line
    assert server.count("POST", "/v1/files") == 3 and not server.batches
    # the outage ends: the plan stage picks up the saved batch (same input file, one batch)
    del server.forever["upload"]
    res = pipeline.run_plans(out, opts(server), log=lambda s: None)
    assert res.info["ok"] == 150 and res.info["requested_now"] == 150
    assert len(server.batches) == 1 and input_lines(server) == 150
    state = json.loads((out / "plans" / "batch_state.json").read_text())
    assert len(state["batches"]) == 1 and state["batches"][0]["batch_id"] in server.batches


# ---------------------------------------------------------------- Ctrl-C during sync


def test_ctrl_c_during_sync_sends_nothing_more_keeps_answers_and_exits_130(server, tmp_path):
    """SIGINT to a real `mrgrpo data plans --plans sync` while 3 requests hang on the server and 142 are queued:
    it exits 130 without waiting for them or sending the queue, says how many plans are saved, and a rerun
    requests exactly the rest."""
    out = tmp_path / "out"
    pipeline.run_validate(out, None, ValidateOptions(run_reference=False))
    answered, concurrency = 5, 3
    server.hold_chat_after = answered  # chat requests after the 5th hang until server.release
    cmd = [
        sys.executable,
        "-m",
        "mrgrpo.cli",
        "data",
        "plans",
        "--out",
        str(out),
        "--plans",
        "sync",
        "--concurrency",
        str(concurrency),
        "--base-url",
        server.base_url,
        "--api-key-env",
        KEY_ENV,
        "--quiet",
    ]
    env = {**os.environ, KEY_ENV: "sk-test"}
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    cache = out / "plans" / "cache"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            saved = len(list(cache.rglob("*.json"))) if cache.exists() else 0
            if saved == answered and server.chat_received == answered + concurrency:
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        else:
            pytest.fail(f"the plans process never had {answered} plans saved and {concurrency} requests in flight")
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 130, stdout + stderr
    assert stderr.strip() == f"interrupted: {answered} saved, re-run to resume", stderr
    assert server.chat_received == answered + concurrency  # the queued requests were never sent
    assert len(list(cache.rglob("*.json"))) == answered
    server.hold_chat_after = None
    server.release.set()
    loud = [c for c in cmd if c != "--quiet"]  # --quiet silences the progress lines this checks
    r = subprocess.run(loud, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"{150 - answered} of 150 plans to request" in r.stderr
    assert server.chat_received == answered + concurrency + 150 - answered
    rows = list(store.read_jsonl(out / "plans.jsonl"))
    assert len(rows) == 150 and all(row["status"] == "ok" and row["attempts"] == 1 for row in rows)
