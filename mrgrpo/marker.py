"""One `MRGRPO_MARKER component=... pid=...` line per (component, process), so a training log shows where
mrgrpo's code ran inside verl's Ray workers (`grep MRGRPO_MARKER`)."""

from __future__ import annotations

import os
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
    print(f"MRGRPO_MARKER component={component} pid={key[1]}{extra}", flush=True)
