"""A bounded pool of sandbox slots. A slot is one worker (launcher + fork server, see worker.py) and its pipes.

Parent side, trusted. One pool per process (recreated after fork), `size` slots started lazily; a slot serves one
job at a time. Each slot lives in its own namespaces with its own tmpfs and (as root) its own uid, so that a
fork bomb in one slot cannot starve another.
"""

from __future__ import annotations

import atexit
import functools
import json
import logging
import marshal
import os
import queue
import select
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from contextlib import contextmanager

from . import admission, cgroups
from .protocol import HEADER, RAW_FIELDS
from .rootfs import remove_tree

logger = logging.getLogger("mrgrpo.sandbox")

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker.py")
# The worker is loaded as a module, not run as a script: a script is compiled from source at every start, and the
# compiler's leftovers stay in the heap that the fork server's fork copies for every test (~2 MB of its ~9 MB); a
# module loads from its cached bytecode (written here once, when missing or stale, if the directory is writable), and
# so do the modules it loads (this directory's, as a private package: worker.py).
_BOOT = ("import importlib.util as u, sys\n"
         "s = u.spec_from_file_location('_mrgrpo_sandbox_worker', sys.argv[1])\n"
         "m = u.module_from_spec(s)\n"
         "s.loader.exec_module(m)\n"
         "m.main(sys.argv[2])\n")
_START_TIMEOUT_S = 60.0
TMPFS_BYTES = 64 << 20  # per slot: all files of the running test together (tmpfs size)
TMPFS_INODES = 4096
_UID_BASE = 1_000_000_000  # per-slot uids (root only): BASE + k, k leased node-wide (admission.lease_uid_index)

# The environment every test sees (nothing is inherited from the parent).
SANDBOX_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "PYTHONHASHSEED": "0",
    "PYTHONIOENCODING": "utf-8",
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "NUMEXPR_NUM_THREADS": "1",
    # The dynamic linker binds every symbol when the worker starts: a test process would otherwise resolve each
    # libc or libpython function the fork server never called on its first call (a symbol lookup, and a copy of the
    # page of the binding table it writes), in every test.
    "LD_BIND_NOW": "1",
}


# Layers to leave out, for tests of the degraded modes only ("namespaces", "landlock"). Never set in production.
DISABLE: set[str] = set()


class SandboxFailure(Exception):
    """The sandbox itself failed (worker died, protocol broke, a test could not be set up): INFRA."""


def _interpreter() -> str:
    """The real interpreter: sys.executable, unless it is a script (a pyenv/asdf shim costs ~90 ms per start)."""
    exe = sys.executable
    with open(exe, "rb") as f:
        if f.read(2) == b"#!":
            return os.path.realpath(exe)
    return exe


@functools.cache
def _cache_worker_bytecode() -> None:
    """Write the cached bytecode of worker.py and of the modules it loads (every module of its directory) where it
    is missing or stale (once per process; the worker runs with -B and writes none). Only speed depends on it:
    without it (a read-only install without bytecode) the worker compiles them from source, as a script would."""
    import compileall

    compileall.compile_dir(os.path.dirname(WORKER), maxlevels=0, quiet=2)


_site_lock = threading.Lock()


@functools.cache
def _site_paths() -> tuple[str, ...]:
    paths: list[str] = []
    for key in ("purelib", "platlib"):
        p = sysconfig.get_paths().get(key)
        if p and os.path.isdir(p) and p not in paths:
            paths.append(p)
    return tuple(paths)


def _site_packages() -> list[str]:
    """The interpreter's site-packages directories. Slots start from many threads at once, and `sysconfig`'s first
    call is not thread-safe (a second caller can iterate its config dict while the first still fills it:
    "dictionary changed size during iteration"), so the first call is made under a lock and its answer kept."""
    with _site_lock:
        return list(_site_paths())


class Slot:
    def __init__(self, index: int, base_dir: str):
        self.index = index
        self.dir = os.path.join(base_dir, f"slot{index}")
        self.proc: subprocess.Popen | None = None
        self._rbuf = bytearray()  # what the worker sent that the last read took beyond what was asked for
        self.code_id: int | None = None
        self.layers: dict = {}
        self.warnings: list[str] = []
        self._stderr = None
        self._lease_fd: int | None = None  # holds this slot's node-wide uid index (root only)
        self.uid: int | None = None
        self.cgroup: cgroups.SlotCgroup | None = None

    def start(self) -> None:
        os.makedirs(self.dir, exist_ok=True)
        os.chmod(self.dir, 0o711)  # the per-slot uid must reach its test directory (also without a tmpfs)
        pass_fds: tuple[int, ...] = ()
        name = f"mrgrpo-{os.getpid()}-{self.index}"
        if os.geteuid() == 0 and self._lease_fd is None:
            k, self._lease_fd = admission.lease_uid_index()
            self.uid = _UID_BASE + k
        if self._lease_fd is not None:
            pass_fds = (self._lease_fd,)  # the worker keeps the lease until it and its tests are gone
            name = f"mrgrpo-slot-{self.uid - _UID_BASE}"  # unique on the node while the lease is held
        if self.cgroup is None and not {"cgroup_v1", "cgroup_v2"} <= DISABLE and "parent_cgroup" not in DISABLE:
            disable = tuple(DISABLE)
            if os.environ.get("MRGRPO_SANDBOX_CGROUP_AUTO_PARENT", "1") == "0":  # keep out of others' cgroups
                disable += ("cgroup_auto_parent",)
            self.cgroup = cgroups.SlotCgroup(name, disable, os.environ.get("MRGRPO_SANDBOX_CGROUP_PARENT"))
        cg_cfg = self.cgroup.config() if self.cgroup is not None and self.cgroup.procs else None
        cfg = {"slot_dir": self.dir, "uid": self.uid, "tmpfs_bytes": TMPFS_BYTES, "tmpfs_inodes": TMPFS_INODES,
               "extra_sys_path": _site_packages(), "disable": sorted(DISABLE), "cgroup": cg_cfg, "cgroup_name": name}
        self._stderr = tempfile.TemporaryFile()
        self._rbuf = bytearray()
        _cache_worker_bytecode()
        try:
            self.proc = subprocess.Popen(
                [_interpreter(), "-I", "-S", "-B", "-c", _BOOT, WORKER, json.dumps(cfg)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, env=SANDBOX_ENV,
                close_fds=True, pass_fds=pass_fds, start_new_session=True, cwd="/",
            )
        except OSError as exc:
            raise SandboxFailure(f"cannot start the sandbox worker: {exc}") from exc
        ready = self._recv(time.monotonic() + _START_TIMEOUT_S)
        if not ready.get("ready"):
            raise SandboxFailure(f"worker sent {ready!r} instead of ready")
        self.layers, self.warnings = ready["layers"], ready["warnings"]
        self.code_id = None

    def request(self, req: dict, timeout_s: float) -> dict:
        if self.proc is None:
            self.start()
        body = marshal.dumps(req)
        data = memoryview(HEADER.pack(len(body)) + body)
        try:
            fd = self.proc.stdin.fileno()
            while data:  # one write for a request that fits the pipe (almost all); the rest as the worker reads
                data = data[os.write(fd, data):]
        except (BrokenPipeError, OSError) as exc:
            raise SandboxFailure(f"worker gone: {exc}{self._stderr_tail()}") from exc
        return self._recv(time.monotonic() + timeout_s)

    def _recv(self, deadline: float) -> dict:
        head = self._read_exact(HEADER.size, deadline)
        (size,) = HEADER.unpack(head)
        msg = marshal.loads(self._read_exact(size, deadline))
        if "raw" in msg:  # stdout, stderr, control channel of a test, sent raw after the message
            for key, n in zip(RAW_FIELDS, msg.pop("raw"), strict=True):
                msg[key] = self._read_exact(n, deadline)
        return msg

    def _read_exact(self, size: int, deadline: float) -> bytes:
        """`size` bytes of the worker's answer. Reads what the pipe holds (at least what is missing, up to 1 MiB)
        and keeps the rest for the next call: a reply that the worker wrote in one piece (header, message, outputs)
        costs one wait and one read, not one of each per field."""
        buf = self._rbuf
        if len(buf) < size:
            fd = self.proc.stdout.fileno()
            while len(buf) < size:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([fd], [], [], left)[0]:
                    raise SandboxFailure("worker did not answer in time")
                chunk = os.read(fd, min(max(size - len(buf), 1 << 16), 1 << 20))
                if not chunk:
                    raise SandboxFailure(f"worker exited unexpectedly{self._stderr_tail()}")
                buf += chunk
        if len(buf) == size:  # the usual case: the answer ends here
            data = bytes(buf)
            buf.clear()
            return data
        with memoryview(buf) as view:
            data = bytes(view[:size])
        del buf[:size]
        return data

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        try:
            self._stderr.seek(0, os.SEEK_END)
            size = self._stderr.tell()
            self._stderr.seek(max(0, size - 1500))
            text = self._stderr.read().decode("utf-8", "replace").strip()
        except (OSError, ValueError):
            return ""
        return f": {text}" if text else ""

    def stop(self, force: bool = False) -> None:
        """Stop the worker and release the pipes. An idle worker exits on EOF; `force` (or a worker that does not
        exit within 2 s) kills its process group, and its PID namespace and every test in it die with it."""
        proc, self.proc = self.proc, None
        self.code_id = None
        self._rbuf = bytearray()
        if proc is not None:
            for stream in (proc.stdin, proc.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
            try:
                if force:
                    raise subprocess.TimeoutExpired(proc.args, 0)
                proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        if self.cgroup is not None:  # empty once the worker's PID namespace is gone; that can take a moment
            for _ in range(50):
                if self.cgroup.remove():
                    break
                time.sleep(0.02)
            self.cgroup = None
        if self._lease_fd is not None:  # the worker is gone (or going): its copy of the lease goes with it
            admission.release_uid_lease(self._lease_fd)
            self._lease_fd, self.uid = None, None

    def abandon(self) -> None:
        """In a forked child process: drop our copies of the parent's pipes without touching its workers."""
        if self.proc is not None:
            for stream in (self.proc.stdin, self.proc.stdout):
                try:
                    os.close(stream.fileno())
                except OSError:
                    pass
            self.proc = None
        self._stderr = None
        self._lease_fd = None  # closed by admission's at-fork handler
        self.cgroup = None  # the parent's to remove


class Pool:
    def __init__(self, size: int):
        if size < 1:
            raise ValueError(f"pool size must be >= 1, got {size}")
        self.size = size
        self.pid = os.getpid()
        self.base_dir = tempfile.mkdtemp(prefix="mrgrpo-sandbox-")
        os.chmod(self.base_dir, 0o711)
        self._idle: queue.LifoQueue[Slot] = queue.LifoQueue()
        self._slots: list[Slot] = []
        self._lock = threading.Lock()
        self._closed = False
        self._warned = False

    def grow(self, size: int) -> None:
        with self._lock:
            self.size = max(self.size, size)

    @contextmanager
    def slot(self):
        slot = self._acquire()
        try:
            yield slot
        finally:
            self._idle.put(slot)

    def _acquire(self) -> Slot:
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            pass
        with self._lock:
            if self._closed:
                raise RuntimeError("sandbox pool is closed")
            if len(self._slots) < self.size:
                slot = Slot(len(self._slots), self.base_dir)
                self._slots.append(slot)
                return slot
        return self._idle.get()

    def note_started(self, slot: Slot) -> None:
        if not self._warned:
            self._warned = True
            for text in slot.warnings:
                logger.warning("mrgrpo.sandbox: %s", text)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            slots = list(self._slots)
        if os.getpid() != self.pid:
            return
        for slot in slots:
            slot.stop()
        remove_tree(self.base_dir)


_pool: Pool | None = None
_pool_lock = threading.Lock()


def default_workers() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def get_pool(min_size: int | None = None) -> Pool:
    """The process-wide pool (default size: the CPUs this process may use)."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool.pid != os.getpid():
            _pool = Pool(max(default_workers(), min_size or 1))
        elif min_size:
            _pool.grow(min_size)
        return _pool


def shutdown() -> None:
    """Stop every worker of this process's pool (a later call starts a new pool)."""
    global _pool
    with _pool_lock:
        pool, _pool = _pool, None
    if pool is not None:
        pool.close()


def _after_fork_in_child() -> None:
    global _pool, _pool_lock
    _pool_lock = threading.Lock()
    if _pool is not None:
        for slot in _pool._slots:
            slot.abandon()
        _pool = None


atexit.register(shutdown)
os.register_at_fork(after_in_child=_after_fork_in_child)
