"""cgroups of a sandbox slot (v2, else v1): CPU accounting, a memory limit and a one-CPU quota per slot.

`SlotCgroup` (in the parent) makes a slot's cgroups and removes them; `CgroupHandle` (in the fork server) holds
descriptors of their files, opened once, for the per-test reads and writes; `private_slot_cgroup` makes the slot
cgroup in a cgroup2 mounted in the slot's own mount namespace where the host's cgroup file system is read-only.
Where the slot cgroups go: docs/sandbox.md ("slot cgroup").
"""

from __future__ import annotations

import os

from .libc import MS_NODEV, MS_NOEXEC, MS_NOSUID, mount


def _cgroup_mounts() -> tuple[str | None, dict[str, tuple[str, str]]]:
    """(cgroup2 mount point or None, {v1 controller: (mount point, mount root)}) from /proc/self/mountinfo."""
    v2, v1 = None, {}
    try:
        with open("/proc/self/mountinfo") as f:
            lines = f.read().splitlines()
    except OSError:
        return None, {}
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, rfields = left.split(), right.split()
        if len(fields) < 5 or len(rfields) < 3:
            continue
        root, mountpoint, fstype = fields[3], fields[4], rfields[0]
        if fstype == "cgroup2" and v2 is None and root == "/":
            v2 = mountpoint
        elif fstype == "cgroup":
            for opt in rfields[2].split(","):
                if opt in ("cpu", "cpuacct", "memory") and opt not in v1:
                    v1[opt] = (mountpoint, root)
    return v2, v1


def _own_cgroups() -> dict[str, str]:
    """{"": v2 path, controller: v1 path} of this process (/proc/self/cgroup)."""
    out = {}
    try:
        with open("/proc/self/cgroup") as f:
            for line in f.read().splitlines():
                parts = line.split(":", 2)
                if len(parts) == 3:
                    for c in parts[1].split(",") if parts[1] else [""]:
                        out[c] = parts[2]
    except OSError:
        pass
    return out


def _under(mountpoint: str, mount_root: str, path: str) -> str | None:
    if mount_root != "/" and not (path == mount_root or path.startswith(mount_root + "/")):
        return None
    rel = path[len(mount_root):] if mount_root != "/" else path
    return os.path.join(mountpoint, rel.lstrip("/"))


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def join_cgroup(procs: str) -> None:
    """Move the calling process into the cgroup whose `cgroup.procs` file this is (its future children follow)."""
    _write(procs, "0")


def _read_words(path: str) -> list[str]:
    try:
        with open(path) as f:
            return f.read().split()
    except OSError:
        return []


def _memory_for_children(d: str, controller: str = "memory") -> bool:
    """Whether cgroup v2 directory `d` gives its children the memory (or another) controller, enabling it when it
    may (only a cgroup without processes of its own can)."""
    if controller in _read_words(os.path.join(d, "cgroup.subtree_control")):
        return True
    if controller not in _read_words(os.path.join(d, "cgroup.controllers")):
        return False
    try:
        _write(os.path.join(d, "cgroup.subtree_control"), f"+{controller}")
    except OSError:
        return False
    return True


CPU_PERIOD_US = 100_000  # a slot's CPU quota: this many microseconds of CPU in every period of as many: one CPU


def nearest_memory_ancestor(mount: str, own_dir: str) -> str | None:
    """The nearest proper ancestor of cgroup v2 directory `own_dir`, inside the hierarchy mounted at `mount`,
    that already gives its children the memory controller: a sibling made there gets a memory controller that
    our own cgroup, which holds processes, cannot give (e.g. `/process_api` for `/process_api/<id>`, a Slurm
    step's `user/` for its `task_0`). None when `own_dir` is the mount's root or no ancestor does."""
    mount, d = os.path.normpath(mount), os.path.normpath(own_dir)
    while d != mount and d.startswith(mount + os.sep):
        d = os.path.dirname(d)
        if "memory" in _read_words(os.path.join(d, "cgroup.subtree_control")):
            return d
    return None


_AUTO_PARENT_PREFIX = "mrgrpo-sandbox-"


def _remove_stale_parents(ancestor: str) -> None:
    """rmdir the empty `mrgrpo-sandbox-<pid>` parents (and their empty slot cgroups) of processes that are gone."""
    try:
        names = [n for n in os.listdir(ancestor) if n.startswith(_AUTO_PARENT_PREFIX)]
    except OSError:
        return
    for n in names:
        pid = n[len(_AUTO_PARENT_PREFIX):]
        if not pid.isdigit() or os.path.exists(f"/proc/{pid}"):
            continue
        d = os.path.join(ancestor, n)
        try:
            for child in os.listdir(d):
                if os.path.isdir(os.path.join(d, child)):
                    os.rmdir(os.path.join(d, child))  # fails, and keeps it, while a process is in it
            os.rmdir(d)
        except OSError:
            pass


def auto_memory_parent(mount: str, own_dir: str) -> str | None:
    """Make (or reuse) `mrgrpo-sandbox-<pid>` under the nearest ancestor that gives its children the memory
    controller, and give it to its own children: the parent of this process's slot cgroups when its own cgroup
    cannot be one. None, leaving nothing behind, when there is no such ancestor or we may not write there."""
    ancestor = nearest_memory_ancestor(mount, own_dir)
    if ancestor is None:
        return None
    _remove_stale_parents(ancestor)
    d = os.path.join(ancestor, f"{_AUTO_PARENT_PREFIX}{os.getpid()}")
    made = False
    try:
        os.mkdir(d)
        made = True
    except FileExistsError:
        pass
    except OSError:
        return None
    if _memory_for_children(d):
        return d
    if made:
        try:
            os.rmdir(d)
        except OSError:
            pass
    return None


class SlotCgroup:
    """The cgroup(s) of one sandbox slot: CPU accounting (v2 `cpu.stat` or v1 `cpuacct`) and a memory limit
    (v2 `memory.max` or v1 `memory.limit_in_bytes`), created under this process's own cgroups. On v2 the parent
    is `v2_parent` when given (a cgroup prepared for us), else our own cgroup when it can give its children the
    memory controller, else `mrgrpo-sandbox-<pid>` made next to it under the nearest ancestor that gives its
    children that controller (`auto_memory_parent`; removed with the last slot), else our own cgroup (CPU
    accounting only).

    Only test processes join it (the fork server stays outside), so its counters between two reads are exactly what
    the processes of one test used, including children still alive when the test's PID 1 exited.

    CPU quota: one CPU per slot (`CPU_PERIOD_US` in every period), whatever a test forks, so that admission's "one
    slot per CPU" holds. On v2 it is the slot cgroup's `cpu.max` (where the parent gives the cpu controller); else,
    with a v1 `cpu` hierarchy, a cgroup of that hierarchy with `cpu.cfs_quota_us` that the slot's worker joins at
    its start (`cpu_procs`), so that the fork server and every test it forks share the one CPU, at no cost per test.
    `cpu_max` says which: ("v2", path of cpu.max) or ("v1", directory), None without a quota.
    """

    def __init__(self, name: str, disable: tuple[str, ...] = (), v2_parent: str | None = None):
        self.dirs: list[str] = []  # created, removed by remove()
        self.procs: list[str] = []  # cgroup.procs files a test process writes "0" to
        self.cpu: tuple[str, str] | None = None  # (file, "v2" | "v1")
        self.mem: tuple[str, str] | None = None  # (directory, "v2" | "v1")
        self.errors: list[str] = []
        self.auto_parent: str | None = None  # our mrgrpo-sandbox-<pid>, shared by this process's slots
        self.cpu_max: tuple[str, str] | None = None  # the CPU quota: see the class docstring
        self.cpu_procs: str | None = None  # the v1 cpu cgroup the worker joins (its tests inherit it)
        v2, v1 = _cgroup_mounts()
        own = _own_cgroups()
        v2_dir = None
        if v2 and ("" in own or v2_parent) and "cgroup_v2" not in disable:
            # cgroup v2 enables a controller for children only in a cgroup without processes of its own; ours
            # usually has some, so the memory limit needs a parent prepared for us (MRGRPO_SANDBOX_CGROUP_PARENT)
            # or one we make next to our cgroup where an ancestor already delegates memory.
            own_dir = _under(v2, "/", own[""]) if "" in own else None
            base = v2_parent or own_dir
            memory = base is not None and _memory_for_children(base)
            if not memory and not v2_parent and own_dir and "cgroup_auto_parent" not in disable:
                self.auto_parent = auto_memory_parent(v2, own_dir)
                if self.auto_parent:
                    base, memory = self.auto_parent, True
            cpu_quota = memory and _memory_for_children(base, "cpu")  # a parent without processes of its own
            try:
                v2_dir = self._make(base, name)
                self.cpu = (os.path.join(v2_dir, "cpu.stat"), "v2")
                if memory and os.path.exists(os.path.join(v2_dir, "memory.max")):
                    self.mem = (v2_dir, "v2")
                if cpu_quota and os.path.exists(os.path.join(v2_dir, "cpu.max")):
                    _write(os.path.join(v2_dir, "cpu.max"), f"{CPU_PERIOD_US} {CPU_PERIOD_US}")
                    self.cpu_max = ("v2", os.path.join(v2_dir, "cpu.max"))
            except OSError as exc:
                self.errors.append(f"cgroup v2: {exc}")
        if "cgroup_v1" not in disable:
            for controller in ("cpuacct", "memory"):
                if (controller == "cpuacct" and self.cpu) or (controller == "memory" and self.mem):
                    continue
                if controller not in v1 or controller not in own:
                    continue
                base = _under(v1[controller][0], v1[controller][1], own[controller])
                try:
                    d = self._make(base, name)
                except OSError as exc:
                    self.errors.append(f"cgroup v1 {controller}: {exc}")
                    continue
                if controller == "cpuacct":
                    self.cpu = (os.path.join(d, "cpuacct.usage"), "v1")
                else:
                    self.mem = (d, "v1")
            if self.cpu_max is None and "cpu" in v1 and "cpu" in own:
                try:
                    self._v1_cpu_quota(_under(v1["cpu"][0], v1["cpu"][1], own["cpu"]), name)
                except OSError as exc:
                    self.errors.append(f"cgroup v1 cpu: {exc}")

    def _v1_cpu_quota(self, base: str | None, name: str) -> None:
        if base is None or not os.path.isdir(base):
            raise OSError(2, f"no cgroup directory {base}")
        d = os.path.join(base, name)
        if d in self.dirs:  # cpu co-mounted with cpuacct: the slot cgroup the tests join already
            joined = True
        else:
            try:
                os.mkdir(d)
            except FileExistsError:
                pass
            self.dirs.append(d)
            joined = False
        _write(os.path.join(d, "cpu.cfs_period_us"), str(CPU_PERIOD_US))
        _write(os.path.join(d, "cpu.cfs_quota_us"), str(CPU_PERIOD_US))
        self.cpu_max = ("v1", d)
        if not joined:
            self.cpu_procs = os.path.join(d, "cgroup.procs")

    def _make(self, base: str | None, name: str) -> str:
        if base is None or not os.path.isdir(base):
            raise OSError(2, f"no cgroup directory {base}")
        d = os.path.join(base, name)
        try:
            os.mkdir(d)
        except FileExistsError:  # left by a slot that held the same lease and was killed: empty, reuse it
            pass
        self.dirs.append(d)
        procs = os.path.join(d, "cgroup.procs")
        if not os.access(procs, os.W_OK):
            raise OSError(13, f"cannot write {procs}")
        self.procs.append(procs)
        return d

    def config(self) -> dict:
        return {"procs": list(self.procs), "cpu": self.cpu, "mem": self.mem, "cpu_max": self.cpu_max,
                "cpu_procs": self.cpu_procs}

    def remove(self) -> bool:
        """rmdir every directory (they are empty once the slot's processes are gone); True when all are gone. The
        shared auto parent goes with the last slot of this process (while others remain, its rmdir fails)."""
        ok = True
        for d in reversed(self.dirs):
            try:
                os.rmdir(d)
            except FileNotFoundError:
                pass
            except OSError:
                ok = False
        if ok and self.auto_parent:
            try:
                os.rmdir(self.auto_parent)
            except OSError:
                pass
        return ok


def private_slot_cgroup(mountpoint: str, name: str) -> tuple[dict, tuple[int, str]]:
    """Mount cgroup2 at `mountpoint` (call in a private mount namespace) and make the slot cgroup `name` under
    this process's cgroup there. Returns (SlotCgroup config, (descriptor of its parent directory, name))."""
    os.makedirs(mountpoint, exist_ok=True)
    mount("cgroup2", mountpoint, "cgroup2", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    own = _own_cgroups().get("")
    base = _under(mountpoint, "/", own) if own else mountpoint
    cg = SlotCgroup(name, disable=("cgroup_v1",), v2_parent=base)
    if cg.cpu is None:
        raise OSError(2, f"no cgroup v2 CPU accounting under {base}: {'; '.join(cg.errors)}")
    return cg.config(), (os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), name)


def _field(data: bytes, key: bytes) -> int | None:
    """The integer after `key` (its name and a space) at the start of a line of a flat-keyed cgroup file."""
    if data.startswith(key):
        start = len(key)
    else:
        at = data.find(b"\n" + key)
        if at < 0:
            return None
        start = at + 1 + len(key)
    end = data.find(b"\n", start)
    return int(data[start:end] if end >= 0 else data[start:])


class CgroupHandle:
    """The fork server's side of a SlotCgroup: descriptors for joining and reading, opened once."""

    def __init__(self, cfg: dict):
        self.procs_fds = [os.open(p, os.O_WRONLY | os.O_CLOEXEC) for p in cfg["procs"]]
        self.cpu_kind = cfg["cpu"][1] if cfg["cpu"] else None
        self.cpu_fd = os.open(cfg["cpu"][0], os.O_RDONLY | os.O_CLOEXEC) if cfg["cpu"] else None
        self.mem_kind = cfg["mem"][1] if cfg["mem"] else None
        self.mem_limit = None
        self.mem_fds: dict[str, int] = {}
        # What `renew_memory` reopens: the files of the memory cgroup's directory, (name, mode, descriptor) each
        self.mem_parent_fd, self.mem_name, self.mem_files = None, None, []
        cpu_max = cfg.get("cpu_max")
        self.quota_in_mem_dir = False  # a v2 cpu.max in that same directory (written again after a renewal)
        if cfg["mem"]:
            d = cfg["mem"][0]
            self.mem_parent_fd = os.open(os.path.dirname(d), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            self.mem_name = os.path.basename(d)
            for path, fd in zip(cfg["procs"], self.procs_fds, strict=True):
                if os.path.dirname(path) == d:
                    self.mem_files.append((os.path.basename(path), os.O_WRONLY, fd))
            if cfg["cpu"] and os.path.dirname(cfg["cpu"][0]) == d:
                self.mem_files.append((os.path.basename(cfg["cpu"][0]), os.O_RDONLY, self.cpu_fd))
            self.quota_in_mem_dir = bool(cpu_max and cpu_max[0] == "v2" and os.path.dirname(cpu_max[1]) == d)
            if self.mem_kind == "v2":
                names = (("limit", "memory.max"), ("swap", "memory.swap.max"), ("events", "memory.events"),
                         ("usage", "memory.current"), ("stat", "memory.stat"))
            else:
                names = (("limit", "memory.limit_in_bytes"), ("swap", "memory.memsw.limit_in_bytes"),
                         ("events", "memory.oom_control"), ("usage", "memory.usage_in_bytes"), ("stat", "memory.stat"))
            for key, fname in names:
                path = os.path.join(d, fname)
                if os.path.exists(path):
                    mode = os.O_RDWR if key in ("limit", "swap") else os.O_RDONLY
                    self.mem_fds[key] = os.open(path, mode | os.O_CLOEXEC)
                    self.mem_files.append((fname, mode, self.mem_fds[key]))

    def renew_memory(self) -> None:
        """Replace the memory cgroup by a new one of the same name (rmdir, then mkdir; no process is in it between
        tests): whatever an exited test left charged to it (memory that descriptors in flight hold until the kernel's
        unix garbage collector runs, a SysV segment freed later from a workqueue) stays with the old one, which the
        kernel frees with its last page, and no longer counts against the next test. Each descriptor keeps its number
        (the test processes' set-up calls name them). Raises OSError; the caller then waits instead."""
        os.rmdir(self.mem_name, dir_fd=self.mem_parent_fd)
        os.mkdir(self.mem_name, dir_fd=self.mem_parent_fd)
        for fname, mode, fd in self.mem_files:
            new = os.open(f"{self.mem_name}/{fname}", mode | os.O_CLOEXEC, dir_fd=self.mem_parent_fd)
            os.dup2(new, fd, inheritable=False)
            os.close(new)
        self.mem_limit = None  # written again (with swap) before the next test
        if self.quota_in_mem_dir:
            fd = os.open(f"{self.mem_name}/cpu.max", os.O_WRONLY | os.O_CLOEXEC, dir_fd=self.mem_parent_fd)
            try:
                os.write(fd, f"{CPU_PERIOD_US} {CPU_PERIOD_US}".encode())
            finally:
                os.close(fd)

    def renew_with_cpu(self, fname: str, fd: int) -> None:
        """Reopen `fd` (file `fname` of the CPU accounting cgroup) in `renew_memory` too, when the two are one."""
        if any(f == self.cpu_fd for _name, _mode, f in self.mem_files):
            self.mem_files.append((fname, os.O_RDONLY, fd))

    def join_calls(self) -> list:
        """The calls that move the process making them (and so all its future children) in: made by a test process,
        before it drops privileges."""
        return [(os.write, (fd, b"0")) for fd in self.procs_fds]

    def cpu_ns(self) -> int | None:
        if self.cpu_fd is None:
            return None
        data = os.pread(self.cpu_fd, 4096, 0)
        if self.cpu_kind == "v1":
            return int(data)
        value = _field(data, b"usage_usec ")  # read in bytes: fewer objects per test in the fork server
        return None if value is None else value * 1000

    def oom_kills(self) -> int:
        fd = self.mem_fds.get("events")
        if fd is None:
            return 0
        return _field(os.pread(fd, 4096, 0), b"oom_kill ") or 0

    def held_bytes(self, below: int) -> int:
        """Memory the slot cgroup holds that the kernel cannot reclaim (anonymous and shared memory: v1 `rss` +
        `shmem`, v2 `anon` + `shmem`), or its whole usage when that is already `below` bytes (one read, no parse).

        Between tests no process is in the cgroup, yet it may still hold an exited test's memory for a while: the
        kernel frees some of it asynchronously (a SysV segment goes with its IPC namespace, from a workqueue).
        Reclaimable page cache (files a test read) is not counted: it cannot push the next test over its limit.
        """
        usage_fd = self.mem_fds.get("usage")
        if usage_fd is None:
            return 0
        usage = int(os.pread(usage_fd, 64, 0))
        stat_fd = self.mem_fds.get("stat")
        if usage < below or stat_fd is None:
            return usage
        keys = ("anon", "shmem") if self.mem_kind == "v2" else ("rss", "shmem")
        held = 0
        for line in os.pread(stat_fd, 1 << 16, 0).decode().splitlines():
            key, _, value = line.partition(" ")
            if key in keys:
                held += int(value)
        return held

    def set_memory(self, limit: int) -> None:
        if self.mem_limit == limit or "limit" not in self.mem_fds:
            return
        if self.mem_kind == "v2":
            os.pwrite(self.mem_fds["limit"], str(limit).encode(), 0)
            if "swap" in self.mem_fds:
                os.pwrite(self.mem_fds["swap"], b"0", 0)
        else:  # v1: memsw (memory + swap) must stay >= the memory limit; one of the two orders works
            value = str(limit).encode()
            for key in ("swap", "limit", "swap"):
                if key in self.mem_fds:
                    try:
                        os.pwrite(self.mem_fds[key], value, 0)
                    except OSError:
                        if key == "limit":
                            raise
        self.mem_limit = limit


def open_cpu_pressure(cgroup_cfg) -> int | None:
    """A descriptor of the slot cgroup's `cpu.pressure` (cgroup v2, next to its `cpu.stat`), or None."""
    try:
        path, kind = cgroup_cfg["cpu"]
        if kind != "v2":
            return None
        fd = os.open(os.path.join(os.path.dirname(path), "cpu.pressure"), os.O_RDONLY | os.O_CLOEXEC)
    except (KeyError, TypeError, ValueError, OSError):
        return None
    if cpu_pressure_us(fd) is None:
        os.close(fd)
        return None
    return fd


def cpu_pressure_us(fd: int) -> int | None:
    """The "some" total of a cpu.pressure file: microseconds during which a task of the cgroup was runnable but
    waiting for a CPU. None if unreadable."""
    try:
        data = os.pread(fd, 256, 0)
        i = data.index(b"total=")
        return int(data[i + 6:data.index(b"\n", i)])
    except (OSError, ValueError):
        return None
