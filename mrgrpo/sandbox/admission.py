"""Node-wide admission and uid leases: one sandbox budget per machine, shared by every process.

Admission. At most `capacity` sandbox jobs run at once on this machine, whichever process (agent-loop worker,
reward worker, `mrgrpo score`) submits them. The budget is N lock files `slot-<i>` in a node-wide directory; a
job runs while it holds an exclusive `flock` on one of them. The kernel drops a lock when the last descriptor of
its open file is closed, so a process that dies (even by SIGKILL) gives its slots back: nothing leaks.

Waiting. A job first tries every slot without blocking (skipping those a shared busy byte marks as held: a hint
that saves the system calls of a lock doomed to fail). If all are taken it queues on the `queue` lock file
(blocking flock: one waiter at a time is the head); the head retries the slots whenever a releaser writes a byte
into the `wake` FIFO, and every 50 ms anyway; at least every 50 ms it tries every slot, busy byte or not (a holder
that died wakes nobody and leaves its byte set). So at most one process polls, and a freed slot is handed over
within microseconds. Waiting happens on the calling thread; `run_async` runs on its own thread pool, so an event
loop never waits.

Uid leases. As root every sandbox slot drops its tests to a uid of its own. `lease_uid_index()` hands out the
lowest free index `k` node-wide (lock file `uid-<k>`); the worker inherits the descriptor, so the lease lasts as
long as the parent's slot or the worker (and, through the worker's PID namespace, every process of its tests)
lives, whichever is longer. Two live slots never share a uid, for any number of slots and processes.

Configuration (environment): MRGRPO_SANDBOX_SLOTS (capacity; 0 switches admission off, for measurements only),
MRGRPO_SANDBOX_ADMISSION_DIR (the directory of the budget; default /dev/shm/mrgrpo-admission-<uid>, else under
$TMPDIR). Processes that should share a budget must see the same directory (containers: `--ipc=host` shares
/dev/shm). Uid leases always use the default directory.
"""

from __future__ import annotations

import errno
import fcntl
import math
import mmap
import os
import random
import select
import stat
import tempfile
import threading
import time
from contextlib import contextmanager

ENV_SLOTS = "MRGRPO_SANDBOX_SLOTS"
ENV_DIR = "MRGRPO_SANDBOX_ADMISSION_DIR"
_HEAD_POLL_S = 0.05
_HINT_BYTES = 4096  # the busy hints: one byte per slot, for the first 4096 slots (later slots are always tried)


def default_dir() -> str:
    name = f"mrgrpo-admission-{os.geteuid()}"
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK | os.X_OK):
        return os.path.join("/dev/shm", name)
    return os.path.join(tempfile.gettempdir(), name)


def _cgroup_cpu_limit() -> int | None:
    """CPUs allowed by this process's cgroup CPU quota (v2 cpu.max, v1 cfs quota), None when unlimited."""
    best: float | None = None
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":
            files = [("/sys/fs/cgroup", "cpu.max", None)]
        elif "cpu" in controllers.split(","):
            files = [(f"/sys/fs/cgroup/{d}", "cpu.cfs_quota_us", "cpu.cfs_period_us")
                     for d in ("cpu", "cpu,cpuacct", "cpuacct,cpu")]
        else:
            continue
        for root, quota_name, period_name in files:
            if not os.path.isdir(root):
                continue
            rel = path.strip("/")
            while True:  # this cgroup and its ancestors: the smallest quota applies
                d = os.path.join(root, rel) if rel else root
                try:
                    if period_name is None:
                        with open(os.path.join(d, quota_name)) as f:
                            quota_s, period_s = f.read().split()
                        quota = None if quota_s == "max" else int(quota_s)
                        period = int(period_s)
                    else:
                        with open(os.path.join(d, quota_name)) as f:
                            quota = int(f.read())
                        with open(os.path.join(d, period_name)) as f:
                            period = int(f.read())
                        quota = None if quota < 0 else quota
                    if quota is not None and period > 0:
                        cpus = quota / period
                        best = cpus if best is None else min(best, cpus)
                except (OSError, ValueError):
                    pass
                if not rel:
                    break
                rel = os.path.dirname(rel)
    return None if best is None else max(1, math.ceil(best))


def node_capacity() -> int:
    """Sandbox jobs this node runs at once: MRGRPO_SANDBOX_SLOTS, else its CPUs (or the cgroup CPU quota if
    smaller). 0 means admission is off."""
    env = os.environ.get(ENV_SLOTS, "").strip()
    if env:
        value = int(env)
        if value < 0:
            raise ValueError(f"{ENV_SLOTS} must be >= 0, got {env!r}")
        return value
    cpus = os.cpu_count() or 1
    quota = _cgroup_cpu_limit()
    return min(cpus, quota) if quota else cpus


def _private_dir(path: str) -> str:
    """Create (or check) a directory only we can write: it holds our locks, and a stranger must not own it."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise RuntimeError(f"sandbox admission directory {path} is not a directory owned by uid {os.geteuid()} "
                           f"and writable only by it; set {ENV_DIR}")
    return path


def _map_hints(path: str) -> mmap.mmap:
    """The shared busy bytes (every process maps the same file). A byte is set by the holder of its slot just after
    locking it and cleared just before unlocking: a hint, never trusted alone. A set byte whose holder died (no
    release) costs at most one poll interval: the queue's head tries every slot at least every 50 ms."""
    fd = _open_lock(path)
    try:
        if os.fstat(fd).st_size < _HINT_BYTES:
            os.ftruncate(fd, _HINT_BYTES)  # only ever grows it: no process maps past the end
        return mmap.mmap(fd, _HINT_BYTES)
    finally:
        os.close(fd)


def _open_lock(path: str) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return False
        raise


# Descriptors that hold a lock on behalf of this process: closed in a forked child so that a fork never keeps a
# slot or a lease alive (the child would share the open file, and with it the lock).
_held: set[int] = set()
_held_lock = threading.Lock()
# A held slot's descriptor -> (the busy bytes of its directory, its index): whichever Admission object of this
# process releases it clears its byte.
_marks: dict[int, tuple[mmap.mmap, int]] = {}


def _hold(fd: int) -> None:
    with _held_lock:
        _held.add(fd)


def _drop(fd: int) -> None:
    with _held_lock:
        _held.discard(fd)
    os.close(fd)


def _after_fork_in_child() -> None:
    global _held_lock
    _held_lock = threading.Lock()
    for fd in list(_held):
        try:
            os.close(fd)
        except OSError:
            pass
    _held.clear()
    _marks.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


class Admission:
    """A counting semaphore of `capacity` slots shared by every process that uses the same directory."""

    def __init__(self, directory: str, capacity: int):
        if capacity < 1:
            raise ValueError(f"admission capacity must be >= 1, got {capacity}")
        self.dir = _private_dir(directory)
        self.capacity = capacity
        self._slot_paths = [os.path.join(self.dir, f"slot-{i}") for i in range(capacity)]
        self._queue_path = os.path.join(self.dir, "queue")
        self._wake_path = os.path.join(self.dir, "wake")
        self._busy = _map_hints(os.path.join(self.dir, "busy"))
        try:
            os.mkfifo(self._wake_path, 0o600)
        except FileExistsError:
            if not stat.S_ISFIFO(os.lstat(self._wake_path).st_mode):
                raise RuntimeError(f"{self._wake_path} exists and is not a FIFO") from None

    def _try_all(self, trust_hints: bool = True) -> int | None:
        """A free slot's descriptor, or None. With `trust_hints`, slots whose busy byte is set are skipped: under
        load most slots are held, and reading a byte costs no system call where trying a lock costs three."""
        start = random.randrange(self.capacity)
        busy = self._busy
        for k in range(self.capacity):
            i = (start + k) % self.capacity
            if trust_hints and i < _HINT_BYTES and busy[i]:
                continue
            fd = _open_lock(self._slot_paths[i])
            if _try_lock(fd):
                _hold(fd)
                if i < _HINT_BYTES:
                    busy[i] = 1  # only the holder of slot i writes byte i
                _marks[fd] = (busy, i)
                return fd
            os.close(fd)
        return None

    def try_acquire(self) -> int | None:
        """A slot's descriptor if one is free now, else None (never waits; every slot is tried, hints or not)."""
        return self._try_all(trust_hints=False)

    def acquire(self) -> int:
        """Block until a slot is ours; returns the descriptor that holds it (give it to `release`)."""
        fd = self._try_all()
        if fd is not None:
            return fd
        queue_fd = _open_lock(self._queue_path)
        try:
            fcntl.flock(queue_fd, fcntl.LOCK_EX)  # one head at a time; the others sleep in the kernel
            # O_RDWR keeps a writer on the FIFO, so poll() never reports a hang-up once a releaser has closed it.
            wake_fd = os.open(self._wake_path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
            try:
                full_scan_at = time.monotonic() + _HEAD_POLL_S
                while True:
                    # Every 50 ms the head tries every slot, marks or not: a holder that died left its mark set (and
                    # woke nobody); under load the wake-ups never stop, so this must not wait for a silent poll.
                    now = time.monotonic()
                    full_scan = now >= full_scan_at
                    if full_scan:
                        full_scan_at = now + _HEAD_POLL_S
                    fd = self._try_all(trust_hints=not full_scan)
                    if fd is not None:
                        return fd
                    if select.select([wake_fd], [], [], _HEAD_POLL_S)[0]:
                        try:
                            while os.read(wake_fd, 4096):
                                pass
                        except BlockingIOError:
                            pass
            finally:
                os.close(wake_fd)
        finally:
            os.close(queue_fd)  # closing drops the queue lock: the next waiter becomes the head

    def release(self, fd: int) -> None:
        busy, i = _marks.pop(fd, (None, _HINT_BYTES))
        if i < _HINT_BYTES:
            busy[i] = 0  # before the unlock, while slot i is still ours
        _drop(fd)  # closing the only descriptor of the open file releases the lock
        try:
            wake = os.open(self._wake_path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:  # ENXIO: nobody is waiting
            return
        try:
            os.write(wake, b"x")
        except OSError:  # EAGAIN: the head has enough wake-ups queued already
            pass
        finally:
            os.close(wake)

    @contextmanager
    def hold(self):
        fd = self.acquire()
        try:
            yield
        finally:
            self.release(fd)


_admission: Admission | None = None
_admission_key: tuple | None = None
_admission_lock = threading.Lock()


def get_admission() -> Admission | None:
    """The node-wide admission for the current environment (None when MRGRPO_SANDBOX_SLOTS=0)."""
    global _admission, _admission_key
    key = (os.environ.get(ENV_SLOTS, ""), os.environ.get(ENV_DIR, ""))
    with _admission_lock:
        if _admission_key != key:
            capacity = node_capacity()
            _admission = Admission(os.environ.get(ENV_DIR) or default_dir(), capacity) if capacity else None
            _admission_key = key
        return _admission


@contextmanager
def admitted():
    """Hold one node-wide sandbox slot for the duration of the block (no-op when admission is off)."""
    adm = get_admission()
    if adm is None:
        yield
    else:
        with adm.hold():
            yield


def lease_uid_index(directory: str | None = None) -> tuple[int, int]:
    """(k, fd): the lowest index no live slot on this node holds, and the descriptor holding its lease.

    Close `fd` to give the lease back (never unlock it: a worker that inherited the descriptor shares the lock).
    The leases live in the default node-wide directory whatever MRGRPO_SANDBOX_ADMISSION_DIR says: a uid (and
    the slot cgroup named after it) must be unique among ALL slots of the node, not among those sharing a budget.
    """
    k = 0
    while True:
        fd = _open_lock(_uid_lease_path(k, directory))
        if _try_lock(fd):
            _hold(fd)
            return k, fd
        os.close(fd)
        k += 1


def uid_index_leased(k: int, directory: str | None = None) -> bool:
    """Whether a live slot on this node (in any process, this one included) holds uid index `k` now."""
    fd = _open_lock(_uid_lease_path(k, directory))
    try:
        return not _try_lock(fd)
    finally:
        os.close(fd)  # drops the lock if we just took it


def _uid_lease_path(k: int, directory: str | None) -> str:
    return os.path.join(_private_dir(os.path.join(_private_dir(directory or default_dir()), "uids")), f"uid-{k}")


def release_uid_lease(fd: int) -> None:
    _drop(fd)
