"""The messages between the trusted parent (pool.py, runner.py) and a slot's worker, and a test's control message.

Loaded by both sides: the parent imports it with the package, the worker through worker.py. Standard library only.

Framing: a message is its length (`HEADER`, 8 bytes little-endian) and a marshal body of plain data. A reply may
carry raw buffers after its body: their lengths are the body's `raw` list, in the order of `RAW_FIELDS`; the parent
puts their bytes under those keys (pool.Slot._recv).

parent -> worker, one request per test (runner._request):
    code_id   int: the submission (the worker compiles a program once per code_id)
    code      str: the program, left out when the slot already holds code_id
    limits    {time_s, wall_s, memory_mb, output_bytes, file_bytes, nproc, wall_cap_s} (runner._limits_dict)
    fn_name   str | None
    mode      "stdio", with stdin: bytes; or "call", with args: marshal bytes of the argument list
worker -> parent:
    at start  {ready: True, layers: {layer: state}, warnings: [str]}
    per test  {exit, sig, cpu, wall, tle, ole, oom, starved (only when starved), infra (set-up failed),
               raw: [len(out), len(err), len(ctl)]} and those bytes; or {se: str} (it does not compile, no fork); or
              {infra: str} (the test could not start)
A test's control channel (its descriptor 3, `ctl`): JSON {"kind": "ok" | "result" | "badtype" | "exc" | "memory",
"value": the return value's JSON (result), "detail": str (badtype, exc)}; a stdio program that ran to its end
writes exactly `CTL_OK`.
"""

from __future__ import annotations

import json
import marshal
import os
import struct

HEADER = struct.Struct("<Q")
OK = {"kind": "ok"}  # the control message of a stdio program that ran to its end ...
CTL_OK = json.dumps(OK).encode()  # ... written as these bytes, made once (the runner compares them as they are)
RAW_FIELDS = ("out", "err", "ctl")  # the raw buffers after a test's reply: stdout, stderr, control channel


def send(fd: int, obj, buffers: list = ()) -> None:
    """A framed marshal message; then, for each buffer (`parts`: bytearrays, `wipe()`), its length in the message
    and its raw bytes, after which it is wiped."""
    # Plain loops, no comprehensions: each comprehension is a function of its own that the fork server would touch
    # (and so copy on write) after every test's fork.
    parts, raw = [], []
    for b in buffers:
        n = 0
        for p in b.parts:
            parts.append(p)
            n += len(p)
        raw.append(n)
    if buffers:
        obj = dict(obj, raw=raw)
    data = marshal.dumps(obj)
    views = [memoryview(HEADER.pack(len(data)) + data)]
    for p in parts:
        if p:
            views.append(memoryview(p))
    try:
        # One writev for the whole reply (the usual case): one system call here, one wake-up of the judging
        # process, which reads it in one go. At most IOV_MAX (1024) pieces a call; a partial write goes on from
        # where it stopped.
        while views:
            n = os.writev(fd, views[:1024])
            while views and n >= len(views[0]):
                n -= len(views[0])
                del views[0]
            if n:
                views[0] = views[0][n:]
    finally:
        for b in buffers:
            b.wipe()


def recv(fd: int):
    """One framed message, or None at EOF."""
    head = _read_exact(fd, HEADER.size)
    if head is None:
        return None
    (size,) = HEADER.unpack(head)
    body = _read_exact(fd, size)
    if body is None:
        raise EOFError("truncated message")
    return marshal.loads(body)


def _read_exact(fd: int, size: int) -> bytes | None:
    chunks, got = [], 0
    while got < size:
        chunk = os.read(fd, min(size - got, 1 << 20))
        if not chunk:
            if got == 0:
                return None
            raise EOFError("truncated message")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)
