"""The sandbox worker's code: a launcher, the zygote it starts, and the per-test child the zygote forks.

Started by worker.py (run by pool.py as `python -I -S -B ... worker.py CONFIG_JSON`, with a scrubbed environment);
standard library only.

launcher  enters new namespaces (mount, network, PID, IPC; plus user when not root), mounts a size-limited tmpfs on
          the slot directory, forks the zygote (PID 1 of its namespace) and waits for it.
zygote    pre-imports common modules, reads requests (code + ONE test input, never an expected output) on
          fd 0 and answers on fd 1, framed marshal. Per test it forks a child into a fresh PID namespace,
          feeds stdin, collects stdout/stderr/result under caps and a wall-clock deadline, and reports exit
          status, signal and CPU time. It never runs model code itself (it only compiles it). What is the same
          for every test it sets up once and the fork passes on: the seccomp filter, no_new_privs, the
          program's process state, and (with a tmpfs per test) the Landlock ruleset.
child     PID 1 of its own PID namespace: slot cgroup, a fresh IPC namespace (only without seccomp, which denies
          every IPC call), rlimits, Landlock, uid/capability drop, closes every other fd, then runs the program: as
          a script (stdio mode) or calls the entry point and writes the return value as plain JSON to fd 3 (call
          mode).
"""

from __future__ import annotations

import _random
import _signal
import _thread
import gc
import json
import marshal
import math
import os
import select
import signal
import struct
import sys
import time
import traceback
import types
import warnings

from .cgroups import CgroupHandle, cpu_pressure_us, join_cgroup, open_cpu_pressure, private_slot_cgroup
from .landlock import (
    ALL_FS_RIGHTS,
    DEVICE_RIGHTS,
    READ_DIR_RIGHTS,
    LandlockRules,
    landlock_abi,
    open_path,
    restrict_self,
    rights_for,
)
from .libc import (
    CLONE_NEWIPC,
    CLONE_NEWNET,
    CLONE_NEWNS,
    CLONE_NEWPID,
    CLONE_NEWUSER,
    MS_NODEV,
    MS_NOEXEC,
    MS_NOSUID,
    MS_PRIVATE,
    MS_REC,
    PR_SET_PDEATHSIG,
    capset_read_search,
    clear_inheritable_and_bounding,
    close_fds_from,
    current_cpu,
    drop_capabilities,
    drop_to_user_calls,
    fork,
    map_user_namespace,
    mount,
    prctl,
    prepare_drop_to_user,
    rlimit_calls,
    set_no_new_privs,
    setns,
    umount,
    unshare,
)
from .protocol import CTL_OK, OK, recv, send
from .rootfs import PROC_FLAGS, enter_minimal_root, make_read_only, remove_tree
from .seccomp import seccomp_available, seccomp_deny_kernel_state_and_unix_sockets

# Imported once here so that each forked test gets them for free.
_PRELOAD = ("math", "collections", "heapq", "bisect", "itertools", "functools", "typing", "string", "re",
            "operator", "random", "fractions", "decimal", "copy", "array", "datetime", "threading", "statistics")

_thread_count = getattr(_thread, "_count", None)  # threads started and still running, but for the main one

# Names a LeetCode-style judge provides to call-mode programs without an import (docs/sandbox.md).
_PREAMBLE_MODULES = ("collections", "heapq", "bisect", "itertools", "functools", "math", "string", "re",
                     "operator", "random", "sys", "typing")
_PREAMBLE_FROM = {
    "typing": ("List", "Dict", "Tuple", "Set", "FrozenSet", "Optional", "Union", "Any", "Callable", "Iterable",
               "Iterator", "Generator", "Deque", "DefaultDict", "Sequence", "Mapping"),
    "collections": ("deque", "defaultdict", "Counter", "OrderedDict", "namedtuple"),
    "heapq": ("heappush", "heappop", "heapify", "heapreplace", "heappushpop", "nlargest", "nsmallest"),
    "bisect": ("bisect", "bisect_left", "bisect_right", "insort", "insort_left", "insort_right"),
    "itertools": ("accumulate", "chain", "combinations", "combinations_with_replacement", "count", "cycle",
                  "groupby", "islice", "permutations", "product", "repeat", "starmap", "zip_longest"),
    "functools": ("lru_cache", "cache", "reduce", "cmp_to_key", "partial"),
    "math": ("inf", "gcd", "sqrt", "ceil", "floor", "log", "log2", "comb", "factorial"),
}

_SETUP_FAILED = 70  # exit status of a child whose isolation setup failed (it never wrote the ready byte)
_STDERR_KEEP = 8192
_STDERR_SMALL = 512  # a stderr read joins the previous one while that is shorter than this (`_Chunks.read_from`)
_STDIN_EARLY = 4096  # stdin up to this size (PIPE_BUF: an empty pipe always takes it) is written before the fork
_DEVICES = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random", "/dev/full")
_QUIET_S = 0.01  # how long the zygote lets a test's output pipes fill before it reads them as output comes
_CPU_CHECK_S = 0.05  # how often the CPU of all processes of a running test is checked (with a slot cgroup)
_HELD_SLACK = 8 << 20  # a test starts only once the slot cgroup holds less than this of earlier tests' memory ...
_HELD_WAIT_S = 10.0  # ... waiting at most this long for the kernel to free it (else INFRA: the slot restarts) ...
_RENEW_AFTER_S = 0.05  # ... or this long, then giving the test a new memory cgroup (`CgroupHandle.renew_memory`)
_KILL_GRACE_S = 60.0  # a killed test whose processes are not all gone after this long breaks the zygote (INFRA)
_STRETCH_SLACK_S = 0.01  # a test short of its wall time by less than this has had it (`_Zygote._stretch`)
_STRETCH_STEP_S = 0.1  # a stretched deadline is at least this far ahead (no busy loop of tiny stretches)


class _Chunks:
    """Bytes read from one pipe, kept in bytearrays (zeroed by wipe()); at most `cap` bytes kept (None: keep a tail).

    Reads go through one scratch buffer per process, zeroed after each read, and are kept at their exact size: a
    test that prints a line costs a few bytes, not 64 KiB of fresh memory per read (which, with the test process
    alive, the zygote would pay for in copy-on-write faults).
    """

    __slots__ = ("cap", "parts", "n", "over", "kept")  # no instance dict: fewer objects written per test
    _SIZE = 1 << 16
    _scratch = bytearray(_SIZE)
    _view = memoryview(_scratch)
    _zeros = memoryview(bytes(_SIZE))

    def __init__(self, cap: int | None):
        self.cap = cap
        self.parts: list[bytearray] = []
        self.n = 0
        self.over = False
        self.kept = 0  # bytes in `parts` (stderr): a running total, never recomputed over the parts

    def read_from(self, fd: int) -> int:
        n = os.readv(fd, [self._view])
        if n == 0:
            return 0
        self.n += n
        if self.cap is not None and self.n > self.cap:
            self.over = True
        elif self.cap is None and self.parts and len(self.parts[-1]) < _STDERR_SMALL:
            # stderr read in small pieces (a program writing a byte at a time): grow the last part, so that the
            # parts stay few (at most ~2 * _STDERR_KEEP / _STDERR_SMALL) and dropping the oldest is cheap
            last = self.parts[-1]
            part = bytearray(len(last) + n)
            part[:len(last)] = last
            part[len(last):] = self._view[:n]
            last[:] = bytes(len(last))
            self.parts[-1] = part
        else:
            self.parts.append(bytearray(self._view[:n]))
        self._view[:n] = self._zeros[:n]
        if self.cap is None:  # keep only a tail (stderr), with a running total: a read costs O(its bytes + 1)
            self.kept += n
            while self.kept > 2 * _STDERR_KEEP and len(self.parts) > 1:
                old = self.parts.pop(0)
                self.kept -= len(old)
                old[:] = bytes(len(old))
        return n

    def tail(self, n: int) -> bytearray:
        return bytearray(b"".join(self.parts)[-n:])

    def wipe(self) -> None:
        for part in self.parts:
            part[:] = bytes(len(part))
        self.parts.clear()
        self.kept = 0


def _read_to_end(chunks: _Chunks, fd: int) -> int:
    """Read a pipe whose writers are all gone to its end (past the cap, `chunks` drops the bytes); returns 0."""
    while chunks.read_from(fd):
        pass
    return 0


# ---------------------------------------------------------------- launcher


def main(cfg_json: str | None = None) -> None:
    cfg = json.loads(sys.argv[1] if cfg_json is None else cfg_json)
    req_fd, resp_fd = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    warnings_out: list[str] = []
    layers = {"pid_ns": False, "net_ns": False, "tmpfs": False, "user_ns": False, "landlock": 0,
              "per_slot_uid": False, "ipc_ns": False, "seccomp": False, "cgroup_cpu": None, "cgroup_memory": None,
              "cpu_quota": None}
    cg_cfg = cfg.get("cgroup") or {}
    if cg_cfg.get("cpu_max"):
        # One CPU for the slot: a v2 quota on the slot cgroup its tests join, or a v1 cpu cgroup that this launcher
        # joins now, before it forks the zygote, so that the zygote and every test process inherit it.
        try:
            if cg_cfg.get("cpu_procs"):
                join_cgroup(cg_cfg["cpu_procs"])
            layers["cpu_quota"] = cg_cfg["cpu_max"][0]
        except OSError as exc:
            warnings_out.append(f"cannot join the slot's cpu cgroup ({exc})")
    is_root = os.geteuid() == 0
    uid, gid = os.getuid(), os.getgid()
    flags = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | (0 if is_root else CLONE_NEWUSER)
    if "ipc_ns" not in cfg.get("disable", ()):
        flags |= CLONE_NEWIPC  # the slot's own IPC namespace (and a fresh one per test without seccomp)
    try:
        if "namespaces" in cfg.get("disable", ()):
            raise OSError(1, "disabled by configuration")
        unshare(flags)
        if not is_root:
            map_user_namespace(uid, gid)
            layers["user_ns"] = True
        layers["pid_ns"] = layers["net_ns"] = True
    except OSError as exc:
        warnings_out.append(f"namespaces unavailable ({exc}): no private PID space (kill(-1) is contained by "
                            "Landlock signal scoping only if available), no network namespace, no tmpfs, no IPC "
                            "namespace (without seccomp, SysV IPC objects and POSIX message queues outlive a test), no "
                            "minimal file tree (any host path can be stat'ed)")
    slot_dir = cfg["slot_dir"]
    if layers["pid_ns"]:
        try:
            mount("none", "/", None, MS_REC | MS_PRIVATE)
            mount("tmpfs", slot_dir, "tmpfs", MS_NOSUID | MS_NODEV,
                      f"size={cfg['tmpfs_bytes']},nr_inodes={cfg['tmpfs_inodes']},mode=0755")
            layers["tmpfs"] = True
        except OSError as exc:
            warnings_out.append(f"no private tmpfs ({exc}): test directories live in {slot_dir} on the host "
                                "file system; only RLIMIT_FSIZE bounds each file")
        pid = os.fork()
        if pid == 0:
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the parent kills a slot by killing the launcher
            _zygote_main(cfg, req_fd, resp_fd, layers, warnings_out, is_root)
            os._exit(0)
        os.close(req_fd)
        os.close(resp_fd)
        os.waitpid(pid, 0)
        if layers["tmpfs"]:
            try:
                umount(slot_dir)
            except OSError:
                pass
        os._exit(0)
    _zygote_main(cfg, req_fd, resp_fd, layers, warnings_out, is_root)


# ---------------------------------------------------------------- zygote


class _Zygote:
    def __init__(self, cfg, layers, warnings_out, is_root):
        self.slot_dir = cfg["slot_dir"]
        self.tmpfs_bytes = cfg["tmpfs_bytes"]
        self.disable = set(cfg.get("disable", ()))
        self.layers = layers
        self.is_root = is_root
        self.uid = cfg["uid"] if is_root else None
        self.counter = 0
        self.rlimits = (None, ())  # (the limits they are for, their calls): see _plan_rlimits
        self.fixed_calls = None  # the set-up calls that are the same for every test (`_setup_calls`)
        # A test process starts on the CPU the zygote runs on, whose caches hold the pages it copies and the code it
        # runs first (started on another CPU, as the scheduler would place it, it costs ~40% more CPU on the GPU
        # machine); its first call gives it back every CPU the zygote may use (`_start_here`).
        self.allowed = os.sched_getaffinity(0) if "start_on_zygote_cpu" not in self.disable else None
        self.main = (None, None)  # ((code_id, mode), the pristine __main__ module its test processes run in)
        self.pending = None  # (directory, descriptors, whether it ended normally) of the last test, until clean_up()
        self.code_id = None
        self.code = None  # compiled code object, or a syntax error message
        for name in _PRELOAD:
            __import__(name)
        self.preamble = {}
        for name in _PREAMBLE_MODULES:
            self.preamble[name] = sys.modules[name]
        for module, names in _PREAMBLE_FROM.items():
            for name in names:
                if hasattr(sys.modules[module], name):
                    self.preamble[name] = getattr(sys.modules[module], name)
        self.pidns_fd = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC) if layers["pid_ns"] else None
        self.tmpfs_opts = f"size={cfg['tmpfs_bytes']},nr_inodes={cfg['tmpfs_inodes']},mode=0700"
        if self.uid is not None:
            self.tmpfs_opts += f",uid={self.uid},gid={self.uid}"
        self.tmpfs_opts = self.tmpfs_opts.encode()  # encoded once: mount() passes bytes to libc as they are
        self.per_test_tmpfs = layers["tmpfs"] and "test_tmpfs" not in self.disable
        self.mount_point = f"{self.slot_dir}/t"
        self.mount_point_made = False
        self.tmpfs_mounted = False
        # Each test mounts a proc of its own PID namespace over the slot's (`proc_options`: how the slot's was
        # mounted; None: no per-test proc), which the zygote unmounts after it: `proc_dev` tells the slot's proc
        # from a test's, and `own_proc` is a descriptor of the slot's, where the zygote finds its tests' PIDs.
        self.proc_options = None
        self.proc_dev = None
        self.own_proc = _open_proc()  # opened again in the minimal tree (`_zygote_main`)
        # SysV shared memory, semaphores, message queues and POSIX message queues live in the IPC namespace, not
        # in a process. The slot has an IPC namespace of its own (the launcher's); with the seccomp filter no
        # program can create any of them, and without it each test gets a fresh IPC namespace (set below, once the
        # filter is known to be in place or not), whose objects die with the test.
        layers["ipc_ns"] = "slot" if layers["pid_ns"] and "ipc_ns" not in cfg.get("disable", ()) else False
        layers["seccomp"] = "seccomp" not in cfg.get("disable", ()) and seccomp_available()
        if not layers["seccomp"]:
            warnings_out.append("no seccomp filter: programs can use the kernel keyrings of their uid (keys outlive "
                                "the test) and create AF_UNIX sockets (host services listening on a pathname "
                                "socket are reachable if Landlock or the file tree lets the path resolve)")
        self.cg = None
        self.cg_last = None  # (CPU ns, OOM kills) of the slot cgroup as the last test left it
        self.private_cg = None  # (descriptor of the parent cgroup directory, name) of a cgroup we made ourselves
        disable = cfg.get("disable", ())
        if not cfg.get("cgroup") and cfg.get("cgroup_name") and layers["pid_ns"] and "cgroup_v2" not in disable:
            # The host's cgroup file system may be read-only for us (a default Docker container) while the
            # hierarchy is not: mount cgroup2 in our private mount namespace and make the slot cgroup there.
            try:
                cfg["cgroup"], self.private_cg = private_slot_cgroup(cfg["slot_dir"] + ".cg", cfg["cgroup_name"])
            except OSError:
                pass
        if cfg.get("cgroup"):
            try:
                self.cg = CgroupHandle(cfg["cgroup"])
            except OSError as exc:
                warnings_out.append(f"slot cgroup unusable ({exc})")
        layers["cgroup_cpu"] = self.cg.cpu_kind if self.cg else None
        # How long the test's processes waited for a CPU (runnable, not running): the slot cgroup's CPU pressure
        # (v2 `cpu.pressure`, "some" total), else the run delay of the test's PID 1 (/proc/PID/schedstat). It
        # stretches the wall-clock backstop of a test the node kept from running (`_stretch`).
        self.cpu_wait_fd = open_cpu_pressure(cfg.get("cgroup")) if self.cg is not None else None
        if self.cpu_wait_fd is not None:
            self.cg.renew_with_cpu("cpu.pressure", self.cpu_wait_fd)  # see `renew_memory`
        self.wait0 = None  # its reading before the current test
        self.proc_is_ours = None  # whether /proc shows our PID namespace (decided at first use, in the final tree)
        self.starved, self.waited = False, 0.0  # what `_stretch` found at the current test's last deadline
        # Without cgroup CPU accounting, a test's PID 1 is an init of ours that reaps every process of the test
        # (so their CPU adds up in its rusage) and kills the rest when the program exits.
        self.reaper = layers["cgroup_cpu"] is None and layers["pid_ns"]
        layers["reaper_init"] = self.reaper
        layers["cgroup_memory"] = self.cg.mem_kind if self.cg else None
        if layers["cgroup_cpu"] is None:
            warnings_out.append("no cgroup CPU accounting: a test's CPU is what its init reaps (processes a "
                                "program lets the kernel auto-reap, SIGCHLD ignored, are bounded only by RLIMIT_CPU "
                                "each) and is checked after the test, not while it runs")
        if layers["cgroup_cpu"] is not None and layers["cpu_quota"] is None:
            warnings_out.append("no CPU quota per slot (no cpu controller for the slot cgroup): a test that forks "
                                "spinning processes can take more than the one CPU admission gives its slot")
        if layers["cgroup_memory"] is None:
            warnings_out.append("no cgroup memory limit (cgroup v2: our cgroup holds processes and no ancestor "
                                "gives its children the memory controller; set MRGRPO_SANDBOX_CGROUP_PARENT to a "
                                "cgroup that can, see docs/sandbox.md): memory_mb bounds each process of a test, "
                                "not the test")
        self.abi = 0 if "landlock" in cfg.get("disable", ()) else landlock_abi()
        self.rules: list[tuple[int, int]] = []
        self.landlock = None  # built once; each test process adds its directory and applies it ...
        self.ruleset = None  # ... or applies this one ruleset, made once (`share_one_ruleset`)
        if self.abi:
            layers["landlock"] = self.abi
            self._open_read_rules(cfg)
            self.landlock = LandlockRules(self.abi, self.rules)
        else:
            warnings_out.append("Landlock unavailable: the program can read any file (as root it keeps "
                                "CAP_DAC_READ_SEARCH so the interpreter stays importable), write wherever its uid "
                                "may (its directory, world-writable directories such as /tmp), execute programs; "
                                "TCP is blocked only by the network namespace")
        if self.uid is not None:
            layers["per_slot_uid"] = True
            capset_read_search()  # built here once, not in every test process
        elif not layers["user_ns"]:
            warnings_out.append("no per-slot uid or user namespace: RLIMIT_NPROC is shared by all processes of "
                                "this user, so a fork bomb is bounded by that limit only")
        self.warnings = warnings_out
        self.streams = _test_streams()
        self._set_once_for_every_test()
        gc.freeze()  # a test's garbage collections never walk (and copy-on-write) the zygote's own objects

    def _set_once_for_every_test(self) -> None:
        """What every test process would set up the same way is set here, once: fork passes it on, and a test
        process then writes (copies) fewer pages and makes fewer calls. Nothing here changes what the zygote does."""
        # the test directory that HOME and TMPDIR name in this process's environment
        self.env_dir = self.mount_point if self.per_test_tmpfs else None  # with a tmpfs, every test runs there
        _program_process_state(self.env_dir)
        if self.uid is not None or self.layers["user_ns"]:
            clear_inheritable_and_bounding()  # no uid change clears them (`_isolation_calls` does the rest)
        if self.layers["seccomp"]:
            # The zygote makes none of the calls the filter denies (it talks through pipes): installed here, it is
            # every test's from its first instruction, and no test process builds or attaches a filter.
            try:
                seccomp_deny_kernel_state_and_unix_sockets()
            except OSError as exc:
                self.layers["seccomp"] = False
                self.warnings.append(f"no seccomp filter ({exc}): programs can use the kernel keyrings of their "
                                     "uid and create AF_UNIX sockets")
        if self.layers["ipc_ns"] and not self.layers["seccomp"]:
            self.layers["ipc_ns"] = "test"  # programs can make SysV IPC objects: each test gets a fresh namespace
        if self.landlock is not None and not self.layers["seccomp"]:  # (installing the filter set it already)
            set_no_new_privs()  # landlock_restrict_self needs it once the test process has dropped root

    def share_one_ruleset(self) -> None:
        """With a tmpfs per test, every test writes under the same mount point: one Landlock ruleset made here serves
        them all (a test process only applies it) instead of one built in each. Its rule for the test's files is on
        the slot directory, made read-only first: Landlock's walk from a file of the test's tmpfs crosses its mount
        point to the slot directory, which holds nothing but that mount point and which no test can change."""
        if self.landlock is None or not self.per_test_tmpfs:
            return
        try:
            self._make_mount_point()
            make_read_only(self.slot_dir)
            fd, _ = open_path(self.slot_dir)
            try:
                self.ruleset = self.landlock.ruleset(fd, ALL_FS_RIGHTS)
            finally:
                os.close(fd)
        except OSError:
            self.ruleset = None  # each test process builds its own, as without a tmpfs

    def _open_read_rules(self, cfg) -> None:
        seen = set()
        for p in _read_paths(cfg):
            real = os.path.realpath(p)
            if real in seen:
                continue
            seen.add(real)
            fd, is_dir = open_path(real)
            self.rules.append((fd, rights_for(is_dir, READ_DIR_RIGHTS)))
        for dev in _DEVICES:
            if os.path.exists(dev):
                fd, _ = open_path(dev)
                self.rules.append((fd, DEVICE_RIGHTS))

    def compile(self, code_id, code: str | None):
        if code_id == self.code_id:
            return
        self.code_id = code_id
        lines = code.splitlines(keepends=True)
        import linecache

        linecache.cache["solution.py"] = (len(code), None, lines, "solution.py")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self.code = compile(code, "solution.py", "exec", dont_inherit=True)
        except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as exc:
            where = f" (line {exc.lineno})" if isinstance(exc, SyntaxError) and exc.lineno else ""
            self.code = f"{type(exc).__name__}: {getattr(exc, 'msg', None) or exc}{where}"
        gc.freeze()

    def run_test(self, req) -> tuple[dict, list]:
        """Run one test; returns (reply, output buffers). Its directory and descriptors are left for `clean_up`,
        which the caller runs once the reply is sent: the unmount waits for an RCU grace period, and that wait then
        overlaps the judging process's work instead of delaying the verdict. On an exception they go here."""
        # Each Python function the zygote calls after a fork costs it copy-on-write faults (its function and code
        # objects, and what they touch, are written): the per-test path calls as few as it can.
        if req["code_id"] != self.code_id:
            self.compile(req["code_id"], req.get("code"))
        if isinstance(self.code, str):
            return {"se": self.code}, []
        fds: list[int] = []
        if self.per_test_tmpfs:
            # A fresh tmpfs per test, mounted on the slot's one mount point (no mkdir/rmdir per test, and every
            # test sees the same path): its files vanish at once when it is unmounted. The mount point itself is
            # under the tmpfs while a test runs, so no program can reach or change it. Never reused, not even
            # untouched: its root's times (when it was mounted) and its inode counter (which O_TMPFILE files move
            # without touching the root) would tell a test about the tests before it.
            tmp = self.mount_point
            if not self.tmpfs_mounted:
                self._mount_tmpfs()
        else:
            self.counter += 1
            tmp = f"{self.slot_dir}/t{self.counter}"
            os.mkdir(tmp, 0o700)
        self.pending = (tmp, fds, False)
        try:
            if not self.per_test_tmpfs and self.uid is not None:
                os.chown(tmp, self.uid, self.uid)
            reply, buffers = self._fork_and_watch(req, tmp, fds)
        except BaseException:
            self.clean_up()
            raise
        # The test's PID 1 is reaped: with a PID namespace, no process of the test is left to touch its directory.
        self.pending = (tmp, fds, "infra" not in reply)
        return reply, buffers

    def _mount_tmpfs(self) -> None:
        tmp = self.mount_point
        self._make_mount_point()
        mount(b"tmpfs", tmp, b"tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, self.tmpfs_opts)
        self.tmpfs_mounted = True

    def _make_mount_point(self) -> None:
        if not self.mount_point_made:
            os.mkdir(self.mount_point, 0o700)
            self.mount_point_made = True

    def clean_up(self) -> None:
        """After a test (all its processes are dead): close its descriptors and remove its directory, without any
        way to fail. Whatever the program left (deep trees, odd modes, sockets) goes with it."""
        if self.pending is None:
            return
        tmp, fds, ended = self.pending
        self.pending = None
        self._close_all(fds)
        if self.proc_dev is not None:
            self._unmount_test_proc()
        if self.per_test_tmpfs:
            self.tmpfs_mounted = False
            try:
                umount(tmp)  # MNT_DETACH: the test's processes are all dead, nothing keeps it busy
            except OSError:
                # Never expected; cleanup must still not fail: empty what is visible. The next test's tmpfs is
                # mounted over this one, so no later test sees what is left here.
                remove_tree(tmp)
                self.mount_point_made = os.path.isdir(tmp)
            return
        try:
            os.rmdir(tmp)  # a program that wrote nothing left an empty directory
        except OSError:
            remove_tree(tmp)  # an unremovable leftover stays under a name no later test gets

    def _unmount_test_proc(self) -> None:
        """Unmount the proc the last test mounted over the slot's (none if its set-up failed before): the slot's
        shows again. Never fails: a proc left over (never expected) is covered by the next test's."""
        try:
            for _ in range(4):
                if os.stat("/proc").st_dev == self.proc_dev:
                    return
                umount(b"/proc")
        except OSError:
            pass

    @staticmethod
    def _close_all(fds: list[int]) -> None:
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass

    def _plan_rlimits(self, lim) -> None:
        """The rlimits of a test with limits `lim`, worked out here (once per set of limits) for the test process."""
        key = (lim["time_s"], lim["memory_mb"], lim["file_bytes"], lim["nproc"])
        if self.rlimits[0] == key:
            return
        mem = lim["memory_mb"] << 20
        user_ns_slack = 3 if self.layers["user_ns"] else 0  # launcher and zygote share our ns uid
        user_ns_slack += 1 if self.reaper else 0
        self.rlimits = key, rlimit_calls(
            cpu_s=max(1, math.ceil(lim["time_s"])), data_bytes=mem, as_bytes=mem + (1 << 30), stack_bytes=mem,
            fsize_bytes=lim["file_bytes"], nofile=64,
            nproc=lim["nproc"] + user_ns_slack if (self.uid is not None or self.layers["user_ns"]) else None)

    def _setup_calls(self, tmp, in_r, out_w, err_w, ctl_w, ready_w) -> list:
        """Everything a test process does to set itself up before the program, in order, as (call, arguments)
        pairs made here before the fork: the test process only makes the calls, running no code of its own for them
        and looking nothing up (each page of the zygote's memory a test process writes is copied for it)."""
        if self.fixed_calls is None:
            fixed = self.cg.join_calls() if self.cg is not None else []
            if self.layers["ipc_ns"] == "test":
                fixed.append((unshare, (CLONE_NEWIPC,)))
            if self.proc_dev is not None:  # a proc of the test's own PID namespace (before Landlock: no mounts then)
                fixed.append((mount, (b"proc", b"/proc", b"proc", PROC_FLAGS, self.proc_options)))
            self.fixed_calls = (fixed, self._isolation_calls())
        before_rlimits, after_rlimits = self.fixed_calls
        calls = [] if self.pidns_fd is not None else [(os.setsid, ())]
        if self.allowed is not None:
            calls.append((os.sched_setaffinity, (0, self.allowed)))
        calls += [(os.dup2, (in_r, 0)), (os.dup2, (out_w, 1)), (os.dup2, (err_w, 2)), (os.dup2, (ctl_w, 3))]
        if self.uid is not None:  # the zygote's pipes, reopened as /dev/stdin etc.: the test's uid must own them
            calls += [(os.fchown, (0, self.uid, self.uid)), (os.fchown, (1, self.uid, self.uid)),
                      (os.fchown, (2, self.uid, self.uid))]
        calls += before_rlimits
        calls += self.rlimits[1]
        if self.ruleset is None and self.landlock is not None:  # a ruleset of its own, for its own directory
            calls.append((self._restrict_to, (tmp,)))
        calls += after_rlimits
        calls.append((os.chdir, (tmp,)))
        if tmp != self.env_dir:
            calls += [(os.environ.__setitem__, ("HOME", tmp)), (os.environ.__setitem__, ("TMPDIR", tmp))]
        calls.append((os.write, (ready_w, b"R")))
        return calls

    def _isolation_calls(self) -> list:
        """The Landlock domain (the one shared ruleset, closed at once: no process of a test ever holds it, nor
        can add rules) and the uid or capability drop, in that order."""
        calls = []
        if self.ruleset is not None:
            calls += [(restrict_self, (self.ruleset,)), (os.close, (self.ruleset,))]
        if self.uid is not None:
            # No capability at all. Only without the minimal tree (where an interpreter under /root, mode 0700, must
            # stay importable) CAP_DAC_READ_SEARCH stays; seccomp denies the file-handle calls it would open.
            keep = not self.layers.get("minimal_root")
            prepare_drop_to_user(keep_read_search=keep)
            calls += drop_to_user_calls(self.uid, self.uid, keep_read_search=keep)
        elif self.layers["user_ns"]:
            calls.append((drop_capabilities, ()))
        return calls

    def _start_here(self) -> bool:
        """Restrict the zygote to the CPU it runs on, for the fork: the test process inherits it and so starts
        there (it takes all of `allowed` back as its first call, and the zygote right after the fork)."""
        if self.allowed is None or len(self.allowed) < 2:
            return False
        try:
            os.sched_setaffinity(0, (current_cpu(),))
        except OSError:  # the CPU left our set (a cpuset changed): tests start wherever the scheduler puts them
            self.allowed = None
            return False
        return True

    def _restrict_to(self, tmp: str) -> None:
        tmp_fd, _ = open_path(tmp)
        self.landlock.restrict(tmp_fd, ALL_FS_RIGHTS)

    def _fork_and_watch(self, req, tmp, fds) -> dict:
        lim = req["limits"]
        # Made here, before the fork, what a test process would otherwise make itself: it gets them as copies
        # (unchanged, so not even copied until written), and it runs less code of its own before the program.
        self._plan_rlimits(lim)
        if self.main[0] != (self.code_id, req["mode"]):
            self.main = (self.code_id, req["mode"]), _fresh_main(req["mode"] == "call", self.preamble)
        _reseed()
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        ctl_r, ctl_w = os.pipe()
        ready_r, ready_w = os.pipe()
        child_ends = [in_r, out_w, err_w, ctl_w, ready_w]
        fds += [in_r, in_w, out_r, out_w, err_r, err_w, ctl_r, ctl_w, ready_r, ready_w]
        cg0 = None
        if self.cg is not None:
            held = self._wait_for_release()
            if held >= _HELD_SLACK:
                return {"infra": f"the slot cgroup still holds {held >> 20} MiB of an earlier test's memory "
                                 f"{_HELD_WAIT_S:.0f} s after it ended"}, []
            try:
                self.cg.set_memory((lim["memory_mb"] << 20) + self.tmpfs_bytes)
            except OSError:  # e.g. EBUSY lowering a v1 limit below unreclaimable usage: keep the previous limit
                pass
            # The readings the previous test ended with, when it ended normally: no process has been in the slot
            # cgroup since (its PID namespace is gone), so they are what a new reading would show.
            cg0, self.cg_last = self.cg_last, None
            if cg0 is None:
                cg0 = (self.cg.cpu_ns(), self.cg.oom_kills())
        stdin = req.get("stdin", b"")
        if len(stdin) <= _STDIN_EARLY:  # fits an empty pipe whatever its size: written now, without blocking
            if stdin:
                os.write(in_w, stdin)
            os.close(in_w)
            fds.remove(in_w)
            in_w = -1
        here = self._start_here()
        calls = self._setup_calls(tmp, in_r, out_w, err_w, ctl_w, ready_w)
        if self.pidns_fd is not None:
            unshare(CLONE_NEWPID)
        # The slot cgroup's CPU-wait counter before the test, when its wall backstop may stretch (`_stretch`).
        self.wait0 = (cpu_pressure_us(self.cpu_wait_fd)
                      if self.cpu_wait_fd is not None and lim.get("wall_cap_s", 0.0) > lim["wall_s"] else None)
        start = time.monotonic()
        pid = fork()  # the zygote has one thread (checked at start)
        if pid == 0:
            self._child(calls, req, ready_w)  # never returns
        if here:
            try:
                os.sched_setaffinity(0, self.allowed)
            except OSError:  # our CPU set changed under us (a cpuset): stay on this CPU, start tests anywhere
                self.allowed = None
        if self.pidns_fd is not None:
            setns(self.pidns_fd, CLONE_NEWPID)
        for fd in child_ends:
            os.close(fd)
            fds.remove(fd)
        pidfd = os.pidfd_open(pid)
        fds.append(pidfd)
        return self._watch(pid, pidfd, start, lim, stdin, in_w, out_r, err_r, ctl_r, ready_r, cg0, fds)

    def _wait_for_release(self) -> int:
        """Wait until the slot cgroup no longer holds an earlier test's memory (which would count against this
        test's limit: a test would be judged by what ran before it). Returns what it still holds."""
        held = self.cg.held_bytes(_HELD_SLACK)
        if held < _HELD_SLACK:
            return held
        _collect_unix_garbage()  # memory that descriptors in flight hold is freed by the kernel's collector
        now = time.monotonic()
        deadline, renew_at = now + _HELD_WAIT_S, now + _RENEW_AFTER_S
        pause = 0.001
        while held >= _HELD_SLACK and time.monotonic() < deadline:
            if renew_at is not None and time.monotonic() >= renew_at:
                # Still held: the test gets a new memory cgroup, and the old one keeps what it holds until the kernel
                # frees it. (Else, e.g. a cgroup we may not remake, wait as before, and INFRA at the deadline.)
                renew_at = None
                try:
                    self.cg.renew_memory()
                    self.cg_last = None  # its counters start again: read them before the test
                except OSError:
                    pass
            else:
                time.sleep(pause)
                pause = min(pause * 2, 0.05)
            held = self.cg.held_bytes(_HELD_SLACK)
        return held

    def _cg_cpu(self, cg0) -> float | None:
        if cg0 is None or cg0[0] is None:
            return None
        now = self.cg.cpu_ns()
        return None if now is None else (now - cg0[0]) / 1e9

    def _watch(self, pid, pidfd, start, lim, stdin, in_w, out_r, err_r, ctl_r, ready_r, cg0, fds) -> dict:
        """Feed stdin, collect output under caps until the test's namespace is gone, enforce the deadline.
        `in_w` leaves `fds` (what run_test closes) when it is closed here: no second close, no OSError per test.

        Output is read straight into bytearrays that are zeroed after sending, so no later program forked
        from this process can find an earlier program's output in its (copied) memory.
        """
        cap = lim["output_bytes"]
        # The set-up's bytes on `ready_r` (at most 6, written before any program code runs) are read once the
        # test is over: the pipe holds them, and no wake-up is spent on them.
        bufs = {out_r: _Chunks(cap), ctl_r: _Chunks(cap + 4096), err_r: _Chunks(None)}
        tle = ole = exited = starved = False
        poller = select.poll()
        readers = set(bufs)
        # Quiet at first: the output pipes wake the zygote only when their last writer is gone (POLLHUP, which
        # poll reports unasked), not at each write, so a short test costs one or two wake-ups instead of one per
        # write. A test still running after _QUIET_S switches to reading as output comes (a program that fills a
        # pipe before then waits at most that long).
        for fd in readers:
            poller.register(fd, 0)
        quiet_until = start + _QUIET_S
        poller.register(pidfd, select.POLLIN)
        stdin_view = memoryview(stdin)
        if in_w != -1:  # a large stdin: fed while the test runs
            os.set_blocking(in_w, False)
            poller.register(in_w, select.POLLOUT)
        deadline = start + lim["wall_s"]
        killed_at = None
        # With a slot cgroup, the CPU of ALL the test's processes is checked while it runs (RLIMIT_CPU is per
        # process); the first check comes late enough that a quick test never pays for one. Whether the cgroup
        # counts CPU is known from the reading taken before the fork: no read here, after it.
        cpu_check = start + _CPU_CHECK_S if cg0 is not None and cg0[0] is not None else None

        try:
            while readers or not exited:
                now = time.monotonic()
                if killed_at is None and now >= deadline:
                    # The wall clock is a backstop for programs that sleep or block; CPU decides TLE. A test the
                    # node kept waiting for a CPU gets that time back (up to wall_cap_s, `_stretch`).
                    later = now if exited else self._stretch(pid, start, now, lim)
                    if later > now:
                        deadline = later
                    else:
                        if not exited:
                            tle, starved = True, self.starved
                        # also after the exit: without a PID namespace, daemonised children may still hold the
                        # pipes open
                        killed_at = self._kill(pid)
                if killed_at is not None and now - killed_at > _KILL_GRACE_S:
                    raise RuntimeError(f"test process did not die {_KILL_GRACE_S:.0f} s after SIGKILL")
                if cpu_check is not None and killed_at is None and now >= cpu_check:
                    cpu_check = now + _CPU_CHECK_S
                    if (self._cg_cpu(cg0) or 0.0) > lim["time_s"]:
                        if not exited:
                            tle = True
                        if killed_at is None:
                            killed_at = self._kill(pid)
                if quiet_until is not None and now >= quiet_until:
                    quiet_until = None
                    for fd in readers:
                        poller.modify(fd, select.POLLIN)
                wake = deadline if killed_at is None else now + 0.5
                if cpu_check is not None and killed_at is None:
                    wake = min(wake, cpu_check)
                if quiet_until is not None:
                    wake = min(wake, quiet_until)
                wait_ms = max(1, int((wake - now) * 1000))
                for fd, _event in poller.poll(wait_ms):
                    if fd == in_w:
                        try:
                            stdin_view = stdin_view[os.write(in_w, stdin_view[: 1 << 16]):]
                        except BrokenPipeError:
                            stdin_view = stdin_view[:0]
                        except BlockingIOError:
                            pass
                        if not stdin_view:
                            poller.unregister(in_w)
                            os.close(in_w)
                            fds.remove(in_w)
                            in_w = -1
                    elif fd == pidfd:
                        exited = True
                        poller.unregister(pidfd)
                    else:
                        chunks = bufs[fd]
                        n = chunks.read_from(fd)
                        if n and quiet_until is not None:  # woken by POLLHUP: no writer is left
                            n = _read_to_end(chunks, fd)
                        if n == 0:
                            poller.unregister(fd)
                            readers.discard(fd)
                        if chunks.over and (n or quiet_until is not None):
                            if fd in (out_r, ctl_r):
                                ole = True
                            if killed_at is None:
                                killed_at = self._kill(pid)
                if exited and readers and self.pidns_fd is not None:
                    # The PID namespace died with its PID 1 (the kernel kills and waits for every other process
                    # first): no process of the test holds a pipe any more, so each reads to its end without
                    # blocking, and no further poll (and wake-up) is needed.
                    for fd in readers:
                        _read_to_end(bufs[fd], fd)
                        if bufs[fd].over and fd in (out_r, ctl_r):
                            ole = True
                    readers.clear()
            if in_w != -1:
                os.close(in_w)
                fds.remove(in_w)
            _, status, usage = os.wait4(pid, 0)
            # The namespace is gone (its PID 1 reaped): every process of the test has exited and is accounted.
            cpu = usage.ru_utime + usage.ru_stime
            oom = False
            if cg0 is not None:
                cg1 = (self.cg.cpu_ns(), self.cg.oom_kills())
                if cg0[0] is not None and cg1[0] is not None:
                    cpu = max(cpu, (cg1[0] - cg0[0]) / 1e9)
                oom = cg1[1] > cg0[1]
                self.cg_last = cg1
            reply = {
                "exit": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
                "sig": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
                "cpu": cpu,
                "wall": time.monotonic() - start,
                "tle": tle,
                "ole": ole,
                "oom": oom,
            }
            if starved:  # the wall backstop fired on a test the node kept from running: not a verdict (runner.py)
                reply["starved"] = self.waited
            # Every writer of `ready_r` is gone (the test's processes have all exited): this read cannot block.
            ready = os.read(ready_r, 64)
            if ready[1:2] == b"S" and len(ready) >= 6:  # the program's status, from our init
                (status,) = struct.unpack("<i", ready[2:6])
                reply["exit"] = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
                reply["sig"] = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
            if ready[:1] != b"R" and not tle:
                reply["infra"] = "test process setup failed: " + bytes(bufs[err_r].tail(2000)).decode("utf-8",
                                                                                                   "replace")
            return reply, [bufs[out_r], bufs[err_r], bufs[ctl_r]]
        except BaseException:
            for chunks in bufs.values():
                chunks.wipe()
            raise

    def _kill(self, pid: int) -> float:
        """Kill every process of a test; returns the time the kill was sent (a method, not a closure made per test)."""
        try:
            if self.pidns_fd is not None:
                os.kill(pid, signal.SIGKILL)  # PID 1 of the namespace: everything in it dies
            else:
                try:
                    os.killpg(pid, signal.SIGKILL)
                finally:  # a test process killed before its setsid() has no process group of its own yet
                    os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return time.monotonic()

    def _stretch(self, pid: int, start: float, now: float, lim) -> float:
        """At the wall deadline of a test still running: a later deadline, or `now` to kill it (TLE).

        The wall limit counts the time the test was not kept waiting for a CPU: a program that sleeps or blocks
        has had its wall_s and is killed, while one that waited `w` seconds for a CPU (the node saturated: its
        run delay) gets them back, up to `wall_cap_s` of real time. A test still kept from running at the cap is
        killed and marked starved (`self.starved`): the runner runs it again, and never calls that TLE."""
        self.starved = False
        wall, cap = lim["wall_s"], lim.get("wall_cap_s", 0.0)
        if cap <= wall:
            return now
        waited = self._cpu_wait(pid)
        if waited is None:  # unknown: the backstop is the verdict, as without stretching
            return now
        self.waited = round(waited, 3)
        if now - start - waited >= wall - _STRETCH_SLACK_S:  # it had its wall time: sleeping or blocked
            return now
        if now - start >= cap - _STRETCH_SLACK_S:
            self.starved = True
            return now
        return min(start + cap, max(start + wall + waited, now + _STRETCH_STEP_S))

    def _cpu_wait(self, pid: int) -> float | None:
        """Seconds the test's processes have waited for a CPU since it started (None: not measurable here)."""
        if self.cpu_wait_fd is not None and self.wait0 is not None:
            total = cpu_pressure_us(self.cpu_wait_fd)
            return None if total is None else (total - self.wait0) / 1e6
        try:
            if self.own_proc is None:
                return None
            if self.proc_is_ours is None:  # a /proc of another PID namespace would show another process
                self.proc_is_ours = os.readlink("self", dir_fd=self.own_proc) == str(os.getpid())
            if not self.proc_is_ours:
                return None
            # the run delay of the test's PID 1, born at `start` (in the slot's proc: a test mounts its own on /proc)
            fd = os.open(f"{pid}/schedstat", os.O_RDONLY | os.O_CLOEXEC, dir_fd=self.own_proc)
            try:
                return int(os.read(fd, 256).split()[1]) / 1e9
            finally:
                os.close(fd)
        except (OSError, ValueError, IndexError):
            return None

    # ------------------------------------------------------------ child (runs in the forked process)

    def _child(self, calls, req, ready_w) -> None:
        try:
            for call, args in calls:  # `_setup_calls`
                call(*args)
            if self.reaper:  # no cgroup CPU accounting: an init of our own charges every process of the test
                main_pid = os.fork()
                if main_pid != 0:
                    _reap_all(main_pid, ready_w)  # never returns
                os.close(ready_w)
            close_fds_from(4)
        except BaseException:
            try:
                os.write(2, traceback.format_exc().encode())
            finally:
                os._exit(_SETUP_FAILED)
        _run_program(self.code, req, self.main[1], self.streams)


def _open_proc() -> int | None:
    try:
        return os.open("/proc", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None


def _collect_unix_garbage() -> None:
    """Have the kernel's unix garbage collector run: releasing a unix socket schedules it while descriptors are in
    flight (e.g. memfds a test sent into a cycle of sockets and left there: they hold memory until it runs)."""
    import _socket

    try:
        a, b = _socket.socketpair()
    except OSError:
        return
    a.close()
    b.close()


def _test_streams() -> tuple:
    """sys.stdin, sys.stdout and sys.stderr for every test, made once here and never used here: each test process
    gets a pristine copy of them at its fork (building three text streams per test cost it ~100 copy-on-write page
    faults). They stand for descriptors 0-2 by number, so they are built while 0-2 are pipes, as in a test (where
    they are the test's pipes): what a stream learns at construction (block size, seekable, a terminal or not) is
    then what it would have learnt in the test. The zygote's own 0-2 are put back afterwards."""
    saved = [os.dup(fd) for fd in (0, 1, 2)]
    r, w = os.pipe()
    try:
        os.dup2(r, 0)
        os.dup2(w, 1)
        os.dup2(w, 2)
        streams = (open(0, encoding="utf-8", closefd=False),  # noqa: SIM115
                   open(1, "w", encoding="utf-8", closefd=False),  # noqa: SIM115
                   open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False, buffering=1))  # noqa: SIM115
    finally:
        for fd, copy in zip((0, 1, 2), saved, strict=True):
            os.dup2(copy, fd)
            os.close(copy)
        os.close(r)
        os.close(w)
    return streams


def _read_paths(cfg) -> list[str]:
    """What a test may read: the interpreter's library, its sys.path, shared libraries, time zones."""
    dirs = {os.path.dirname(os.__file__), os.path.dirname(os.path.dirname(os.__file__))}
    for p in sys.path + cfg["extra_sys_path"]:
        if p and os.path.exists(p):
            dirs.add(p)
    for p in ("/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib", "/usr/share/zoneinfo",
              "/etc/ld.so.cache", "/etc/localtime"):
        if os.path.exists(p):
            dirs.add(p)
    return sorted(dirs)


def _reap_all(main_pid: int, status_fd: int) -> None:
    """PID 1 of a test without cgroup accounting: reap every process (orphans come to us, and their CPU adds to
    our rusage, which the zygote reads), kill whatever is left once the program exits, then report the program's
    wait status on `status_fd` and exit. Signals from inside the namespace cannot kill us (we are its init)."""
    try:
        os.dup2(status_fd, 0)
        close_fds_from(1)
        main_status = None
        while True:
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:
                break
            except InterruptedError:
                continue
            if pid == main_pid:
                main_status = status
            if main_status is not None:
                try:
                    os.kill(-1, signal.SIGKILL)
                except OSError:
                    pass
        os.write(0, b"S" + struct.pack("<i", main_status if main_status is not None else 0))
    finally:
        os._exit(0)


def _zygote_main(cfg, req_fd, resp_fd, layers, warnings_out, is_root) -> None:
    sys.path.extend(p for p in cfg["extra_sys_path"] if p not in sys.path)
    import linecache  # noqa: F401  (used by compile(); imported while the whole host tree is still visible)

    zygote = _Zygote(cfg, layers, warnings_out, is_root)
    try:  # fork() skips CPython's at-fork work, which is only safe with one thread
        threads = len(os.listdir("/proc/self/task"))
    except OSError:
        threads = 1
    if threads != 1:
        raise RuntimeError(f"the zygote must have one thread, it has {threads}")
    # Everything the zygote needs from the host is open now: show tests a minimal tree (the interpreter, its
    # libraries, a few devices, the slot's tmpfs), no host sockets and no other host path to stat.
    layers["minimal_root"] = False
    if layers["tmpfs"] and "minimal_root" not in cfg.get("disable", ()):
        try:
            proc = enter_minimal_root(cfg["slot_dir"] + ".root", _read_paths(cfg), list(_DEVICES),
                                          [cfg["slot_dir"]])
            layers["minimal_root"] = True
            if proc is not None and zygote.pidns_fd is not None:
                zygote.proc_options = proc
                zygote.proc_dev = os.stat("/proc").st_dev
        except OSError as exc:
            warnings_out.append(f"no minimal file tree ({exc}): programs can stat any host path and see host "
                                "sockets (connecting to them needs AF_UNIX sockets, which seccomp denies)")
    zygote.share_one_ruleset()  # after the minimal tree: its bind of the slot directory is what tests see
    layers["proc_per_test"] = zygote.proc_dev is not None
    if zygote.own_proc is not None:
        os.close(zygote.own_proc)
    zygote.own_proc = _open_proc()  # the slot's proc (the host's without the tree), before a test mounts its own
    send(resp_fd, {"ready": True, "layers": layers, "warnings": zygote.warnings})
    while True:
        req = recv(req_fd)
        if req is None:
            if zygote.private_cg is not None:  # every test is reaped: the cgroup is empty
                try:
                    os.rmdir(zygote.private_cg[1], dir_fd=zygote.private_cg[0])
                except OSError:
                    pass
            return
        reply, buffers = zygote.run_test(req)
        try:
            send(resp_fd, reply, buffers)
        finally:
            zygote.clean_up()  # after the verdict's data is on its way (see run_test)


# ---------------------------------------------------------------- the program, inside the child


class _Quitter:
    """`exit()` / `quit()` as the site module defines them (we run without site)."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"Use {self.name}() or Ctrl-D (i.e. EOF) to exit"

    def __call__(self, code=None):
        raise SystemExit(code)


_QUITTERS = (_Quitter("exit"), _Quitter("quit"))  # made once in the zygote; each test process sets them
# The interpreter's own standard streams, referenced here so that a test process replacing them does not free them
# (freeing three text streams and their buffers cost it ~35 copy-on-write page faults). Nothing uses them after the
# replacement, and they never close their descriptors (CPython opens them with closefd=False).
_ORIGINAL_STREAMS = (sys.stdin, sys.stdout, sys.stderr)


def _to_plain(value, depth: int = 0):
    """The return value as plain JSON data; anything else (custom objects, sets, ...) raises TypeError."""
    if depth > 200:
        raise TypeError("return value nested too deeply")
    if value is None or type(value) is bool:
        return value
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, str):
        return str.__str__(value)
    if type(value) in (list, tuple):
        return [_to_plain(v, depth + 1) for v in value]
    if type(value) is dict:
        out = {}
        for key, v in dict.items(value):
            if type(key) is str:
                k = key
            elif key is None or type(key) in (bool, int, float):
                k = json.dumps(key)
            else:
                raise TypeError(f"dict key of type {type(key).__name__} is not plain JSON")
            out[k] = _to_plain(v, depth + 1)
        return out
    raise TypeError(f"return value of type {type(value).__name__} is not plain JSON")


def _entry_point(namespace: dict, fn_name: str):
    cls = namespace.get("Solution")
    if isinstance(cls, type) and hasattr(cls, fn_name):
        return getattr(cls(), fn_name)
    fn = namespace.get(fn_name)
    if callable(fn):
        return fn
    raise NameError(f"entry point {fn_name!r} is not defined (neither a function nor a method of class Solution)")


def _join_threads() -> None:
    """Wait for the program's non-daemon threads, as the interpreter does at exit. Most programs start none, and a C
    call says so: then the threading module's Python code is not run (never run in the zygote, its code objects and
    what they touch would be written, so copied, in every test process)."""
    if _thread_count is not None and _thread_count() == 0:
        return
    import threading

    main = threading.main_thread()
    while True:
        pending = [t for t in threading.enumerate() if t is not main and not t.daemon and t.is_alive()]
        if not pending:
            return
        for t in pending:
            t.join()


def _exit_status(code) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _program_process_state(test_dir: str | None) -> None:
    """The process state a program runs in, set once in the zygote (fork passes it on to every test process)."""
    sys.set_int_max_str_digits(0)  # programs print big integers; the zygote parses no text into integers
    # over RLIMIT_FSIZE, write() fails with EFBIG and no kill (`_signal`: `signal.signal` converts enums)
    _signal.signal(_signal.SIGXFSZ, _signal.SIG_IGN)
    sys.argv = ["solution.py"]
    import builtins

    builtins.exit, builtins.quit = _QUITTERS  # what the site module would add (the interpreter runs with -S)
    if test_dir is not None:
        os.environ["HOME"] = os.environ["TMPDIR"] = test_dir


def _reseed() -> None:
    """A fresh random state for the next test process, set in the zygote just before it forks (the zygote itself
    never uses it): a 128-bit seed, not 2,496 bytes of it, through the C method (random.Random.seed adds type
    checks and resets gauss_next, which the zygote never set)."""
    if "random" in sys.modules:
        _random.Random.seed(sys.modules["random"]._inst, int.from_bytes(os.urandom(16), "little"))


def _fresh_main(call_mode: bool, preamble: dict) -> types.ModuleType:
    """The module a program runs as: empty but for builtins, plus the LeetCode preamble in call mode. Made in the
    zygote once per submission; each test process runs in its own copy, and the zygote's is never run."""
    import builtins

    main_module = types.ModuleType("__main__")
    main_module.__builtins__ = builtins
    if call_mode:
        main_module.__dict__.update(preamble)
    return main_module


def _run_program(code, req, main_module, streams) -> None:
    """Runs the program in a test process whose set-up is done (and in the state `_program_process_state` made,
    reseeded by `_reseed`), as the module `main_module` (from `_fresh_main`, used by this process alone)."""
    sys.stdin, sys.stdout, sys.stderr = streams  # pristine: made in the zygote, never used there
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = streams
    sys.modules["__main__"] = main_module
    call_mode = req["mode"] == "call"
    status, ctl = 0, OK
    try:
        try:
            exec(code, main_module.__dict__)
            if call_mode:
                fn = _entry_point(main_module.__dict__, req["fn_name"])
                value = fn(*marshal.loads(req["args"]))
                try:
                    ctl = {"kind": "result", "value": json.dumps(_to_plain(value), allow_nan=True)}
                except (TypeError, ValueError, RecursionError) as exc:
                    ctl = {"kind": "badtype", "detail": str(exc)[:300]}
            _join_threads()
        except SystemExit as exc:
            _join_threads()
            status = _exit_status(exc.code)
            if call_mode and ctl["kind"] == "ok":
                ctl = {"kind": "exc", "detail": f"SystemExit({exc.code!r}) before returning"}
                status = status or 1
    except MemoryError:
        status, ctl = 1, {"kind": "memory"}
    except BaseException as exc:  # the program's own exception: report it like the interpreter would
        status = 1
        tb = exc.__traceback__.tb_next if exc.__traceback__ is not None else None
        try:
            sys.stderr.write("".join(traceback.format_exception(type(exc), exc, tb)))
        except BaseException:
            pass
        ctl = {"kind": "exc", "detail": f"{type(exc).__name__}: {str(exc)[:300]}"}
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    try:
        data = CTL_OK if ctl is OK else json.dumps(ctl).encode()
        view = memoryview(data)
        while view:
            view = view[os.write(3, view):]
    except BaseException:
        pass
    os._exit(status)

