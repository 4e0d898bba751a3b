"""On-disk helpers of the data pipeline: atomic writes, tolerant JSONL reading, stable hashes, stage state.

Every file the pipeline writes goes through ``write_text_if_changed`` / ``write_bytes_if_changed``: a file
whose content would not change is not touched (same bytes, same mtime), which is what makes a second
``mrgrpo data prepare`` a no-op.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

_UMASK = os.umask(0)
os.umask(_UMASK)


class DataError(RuntimeError):
    """A failure of a data-pipeline stage as a whole (not of one input record, which is quarantined)."""


def to_jsonable(value: Any) -> Any:
    """A JSON-representable version of ``value``: tuples -> lists, sets -> sorted lists, bytes -> str.

    Non-finite floats are kept (Python's json writes NaN/Infinity); ``is_json_exact`` tells whether
    anything was lost.
    """
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, (set, frozenset)):
        items = [to_jsonable(v) for v in value]
        try:
            return sorted(items)
        except TypeError:
            return sorted(items, key=repr)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, complex):
        return repr(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def is_json_exact(value: Any) -> bool:
    """True when ``value`` survives a strict JSON round trip unchanged (types included: a tuple does not)."""
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return _same(json.loads(text), value)


def _same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, float) and (math.isnan(a) or math.isnan(b)):
        return False
    return a == b


def canonical_json(value: Any) -> str:
    return json.dumps(to_jsonable(value), sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def stable_hash(value: Any) -> str:
    return sha256_text(canonical_json(value))


def file_sha256(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_bytes_if_changed(path: str | os.PathLike, data: bytes) -> bool:
    """Atomically write ``data`` to ``path`` unless it already holds exactly that. Returns True if written."""
    path = Path(path)
    if path.is_file() and path.stat().st_size == len(data) and path.read_bytes() == data:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp creates 0600; give the file the usual permissions
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return True


def write_text_if_changed(path: str | os.PathLike, text: str) -> bool:
    return write_bytes_if_changed(path, text.encode("utf-8"))


def dump_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def jsonl_text(rows: Iterable[Any]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows)


def read_jsonl(path: str | os.PathLike, *, tolerate_bad_lines: bool = False) -> Iterator[dict]:
    """Rows of a JSONL file we wrote. A line that does not parse raises, naming file and line, unless
    ``tolerate_bad_lines`` (for append-only files whose last line a kill may have cut)."""
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                if tolerate_bad_lines:
                    continue
                raise ValueError(f"{path}:{lineno}: not valid JSON ({e.msg})") from e
            yield row


def append_jsonl(path: str | os.PathLike, row: Any) -> None:
    """Append one line and fsync (append-only logs and caches survive a kill, except the line being written)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_json(path: str | os.PathLike, default: Any = None) -> Any:
    path = Path(path)
    if not path.is_file():
        return default
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e.msg}); delete it to start this stage over") from e


class StageState:
    """``DIR/state.json``: per stage, the fingerprint of the inputs and options it last completed with."""

    def __init__(self, out_dir: str | os.PathLike):
        self.path = Path(out_dir) / "state.json"
        self.data: dict = read_json(self.path, {}) or {}

    def is_done(self, stage: str, fingerprint: str, outputs: Iterable[str | os.PathLike] = ()) -> bool:
        entry = self.data.get(stage) or {}
        return entry.get("fingerprint") == fingerprint and all(Path(p).exists() for p in outputs)

    def mark_done(self, stage: str, fingerprint: str, **info: Any) -> None:
        self.data[stage] = {"fingerprint": fingerprint, **info}
        write_text_if_changed(self.path, dump_json(self.data))
