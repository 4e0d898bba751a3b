"""Linux isolation primitives through libc (ctypes): namespaces, Landlock, rlimits, capabilities.

Standard library only: the zygote loads this file by path (it runs `python -I -S`, without site-packages).
Every function either does what it says or raises OSError; deciding what to do without a layer is the
caller's job (worker.py), which reports it so that the parent can warn once.
"""

from __future__ import annotations

import ctypes
import os

from .libc import (
    LIBC,
    MS_NODEV,
    MS_NOEXEC,
    MS_NOSUID,
    MS_RDONLY,
    MS_REC,
    check,
    mount,
    umount,
)

# ---------------------------------------------------------------- cgroups (one per slot)


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

    Only test processes join it (the zygote stays outside), so its counters between two reads are exactly what
    the processes of one test used, including children still alive when the test's PID 1 exited.

    CPU quota: one CPU per slot (`CPU_PERIOD_US` in every period), whatever a test forks, so that admission's "one
    slot per CPU" holds. On v2 it is the slot cgroup's `cpu.max` (where the parent gives the cpu controller); else,
    with a v1 `cpu` hierarchy, a cgroup of that hierarchy with `cpu.cfs_quota_us` that the slot's worker joins at
    its start (`cpu_procs`), so that the zygote and every test it forks share the one CPU, at no cost per test.
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
    """The zygote's side of a SlotCgroup: descriptors for joining and reading, opened once."""

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
        value = _field(data, b"usage_usec ")  # read in bytes: fewer objects per test in the zygote
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


# ---------------------------------------------------------------- removal that cannot fail


def remove_tree(path: str, max_steps: int = 1_000_000) -> bool:
    """Remove `path` and everything under it without recursion (any depth), one descriptor at a time, and
    without raising: True when it is gone. Meant for directories whose writers are all dead (a test's)."""
    import stat as _stat

    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    if not _stat.S_ISDIR(st.st_mode):
        try:
            os.unlink(path)
        except OSError:
            return False
        return True
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError:
        return False
    names: list[str] = []  # path from `path` down to the directory `fd` is
    stuck: set[tuple[int, int]] = set()  # directories that could not be emptied: never entered again
    steps = 0
    try:
        while steps < max_steps:
            steps += 1
            entered = False
            try:
                entries = os.listdir(fd)
            except OSError:
                entries = []
            for name in entries:
                steps += 1
                try:
                    os.unlink(name, dir_fd=fd)
                    continue
                except FileNotFoundError:
                    continue
                except OSError:
                    pass
                try:
                    os.rmdir(name, dir_fd=fd)
                    continue
                except OSError:
                    pass
                try:
                    child = os.open(name, flags, dir_fd=fd)
                except OSError:
                    continue
                cst = os.fstat(child)
                if (cst.st_dev, cst.st_ino) in stuck:
                    os.close(child)
                    continue
                try:
                    os.fchmod(child, 0o700)
                except OSError:
                    pass
                os.close(fd)
                fd, entered = child, True
                names.append(name)
                break
            if entered:
                continue
            if not names:
                break
            here = os.fstat(fd)
            parent = os.open("..", flags, dir_fd=fd)
            os.close(fd)
            fd = parent
            name = names.pop()
            try:
                os.rmdir(name, dir_fd=fd)
            except OSError:
                stuck.add((here.st_dev, here.st_ino))
    except OSError:
        pass
    finally:
        try:
            os.close(fd)
        except OSError:
            pass
    try:
        os.rmdir(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


# ---------------------------------------------------------------- a minimal file tree (mount namespace)

MS_REMOUNT = 32
MS_BIND = 4096
_SYS_pivot_root = {"x86_64": 155, "aarch64": 41}
# statvfs f_flag bits -> mount flags a read-only bind remount must keep (they may be locked in a user namespace)
_ST_TO_MS = {1: MS_RDONLY, 2: MS_NOSUID, 4: MS_NODEV, 8: MS_NOEXEC, 1024: 1024, 2048: 2048, 4096: 1 << 21}


def pivot_root(new_root: str, put_old: str) -> None:
    nr = _SYS_pivot_root.get(os.uname().machine)
    if nr is None:
        raise OSError(38, "pivot_root: unknown architecture")
    check(LIBC.syscall(ctypes.c_long(nr), new_root.encode(), put_old.encode()), "pivot_root")


def _mirror(root: str, path: str, depth: int = 0) -> str:
    """Create under `root` the directories and symlinks (same link text) on the way to host `path`; return the
    host path of what `path` finally names, with no symlink left in it."""
    if depth > 40:
        raise OSError(40, f"too many symlinks under {path}")
    parts = [p for p in path.split("/") if p]
    host = "/"
    for i, part in enumerate(parts):
        nxt = os.path.join(host, part)
        inside = root + nxt
        if os.path.islink(nxt):
            target = os.readlink(nxt)
            if not os.path.lexists(inside):
                os.symlink(target, inside)
            resolved = os.path.normpath(target if target.startswith("/") else os.path.join(host, target))
            rest = "/".join(parts[i + 1:])
            return _mirror(root, os.path.join(resolved, rest) if rest else resolved, depth + 1)
        if i < len(parts) - 1 and not os.path.isdir(inside):
            os.mkdir(inside, 0o755)
        host = nxt
    return host


def make_read_only(path: str) -> None:
    """Remount the mount at `path` read-only (this mount only, not its file system), keeping its other flags (some
    may be locked in a user namespace). Mounting on a directory under it stays possible."""
    keep = 0
    st = os.statvfs(path)
    for bit, flag in _ST_TO_MS.items():
        if st.f_flag & bit:
            keep |= flag
    mount("none", path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | keep)


def _bind(source: str, target: str, read_only: bool) -> None:
    mount(source, target, None, MS_BIND | MS_REC)
    if read_only:
        try:
            make_read_only(target)
        except OSError:
            pass  # stays writable: Landlock still denies writes


PROC_FLAGS = MS_NOSUID | MS_NODEV | MS_NOEXEC


def enter_minimal_root(new_root: str, read_paths: list[str], devices: list[str], writable: list[str]) -> bytes | None:
    """Make the calling process's mount namespace show only `read_paths` (read-only binds), `devices` and
    `writable` (binds) on a small empty tmpfs, at their host paths, and pivot into it; the host tree is detached.
    Returns the options its proc was mounted with (None: no proc), for the proc each test mounts over it.

    Call in a private mount namespace (mount propagation private), with CAP_SYS_ADMIN in its user namespace.
    """
    proc_options = None
    os.makedirs(new_root, exist_ok=True)
    mount("tmpfs", new_root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,nr_inodes=8192,mode=0755")
    try:
        targets: dict[str, str] = {}
        for p in read_paths + devices + writable:
            if os.path.lexists(p):
                targets[_mirror(new_root, p)] = "dev" if p in devices else "rw" if p in writable else "ro"
        done: list[str] = []
        for host in sorted(targets):
            if not os.path.exists(host) or any(host == d or host.startswith(d.rstrip("/") + "/") for d in done):
                continue
            inside = new_root + host
            if os.path.isdir(host):
                os.makedirs(inside, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(inside), exist_ok=True)
                if not os.path.lexists(inside):
                    os.close(os.open(inside, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644))
            _bind(host, inside, read_only=targets[host] == "ro")
            done.append(host)
        # /dev/stdin & co. (programs open them): links into a proc of this PID namespace that shows a process
        # only its own entries (hidepid=2) and no system files (subset=pid). Best effort: a user namespace may
        # not mount proc (e.g. when the host's /proc has masked entries); then those links dangle.
        os.makedirs(new_root + "/dev", exist_ok=True)
        for name, target in (("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                             ("stderr", "/proc/self/fd/2"), ("fd", "/proc/self/fd")):
            if not os.path.lexists(f"{new_root}/dev/{name}"):
                os.symlink(target, f"{new_root}/dev/{name}")
        os.makedirs(new_root + "/proc", exist_ok=True)
        for options in (b"hidepid=2,subset=pid", b"hidepid=2"):
            try:
                mount(b"proc", new_root + "/proc", b"proc", PROC_FLAGS, options)
                proc_options = options
                break
            except OSError:
                continue
        old = os.path.join(new_root, ".old")
        os.mkdir(old, 0o700)
        pivot_root(new_root, old)
        os.chdir("/")
        umount("/.old")
        os.rmdir("/.old")
    except BaseException:
        try:
            umount(new_root)
        except OSError:
            pass
        raise
    try:
        mount("none", "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    except OSError:
        pass
    return proc_options
