"""One `MRGRPO_MARKER component=... pid=...` line per (component, process), so a training log shows where
mrgrpo's code ran inside verl's Ray workers (`grep MRGRPO_MARKER`).

The line goes to stderr: it is a diagnostic (Ray forwards both streams to the driver's log), and it stays out of
what a function's caller reads on stdout (a doctest, a command's output)."""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

_seen: set[tuple[str, int]] = set()
_lock = threading.Lock()


def mark_once(component: str, **fields: Any) -> None:
    key = (component, os.getpid())
    with _lock:
        if key in _seen:
            return
        _seen.add(key)
    extra = "".join(f" {k}={v}" for k, v in fields.items())
    print(f"MRGRPO_MARKER component={component} pid={key[1]}{extra}", file=sys.stderr, flush=True)
