"""The fork server: one pre-imported process per slot that holds no test data and forks a process per test.

The launcher starts it (launcher.serve), as PID 1 of the slot's PID namespace. Once per slot (`ForkServer.__init__`,
then the minimal file tree in `serve`) it finds and sets up the slot's layers (cgroup, Landlock, seccomp, uid) and
sets what every test would set up the same way, which the fork passes on (the seccomp filter, no_new_privs, the
program's process state and, with a tmpfs per test, the Landlock ruleset). Per request (the code and ONE test input,
never an expected output) it compiles the program (once per submission: it never runs model code itself), mounts a
fresh tmpfs, forks the test process into a fresh PID namespace (testproc.py), watches it (watch.py) and, once the
reply is on its way, cleans up. Each Python function it calls after a fork costs it copy-on-write faults: the
per-test path calls as few as it can, and binds the functions of other modules by name at import time.
"""

from __future__ import annotations

import gc
import os
import sys
import time
import warnings

from .cgroups import CgroupHandle, cpu_pressure_us, open_cpu_pressure, private_slot_cgroup
from .landlock import ALL_FS_RIGHTS, DEVICE_RIGHTS, READ_DIR_RIGHTS, LandlockRules, landlock_abi, open_path, rights_for
from .libc import (
    CLONE_NEWPID,
    MS_NODEV,
    MS_NOEXEC,
    MS_NOSUID,
    capset_read_search,
    clear_inheritable_and_bounding,
    current_cpu,
    fork,
    mount,
    set_no_new_privs,
    setns,
    umount,
    unshare,
)
from .rootfs import make_read_only, remove_tree
from .seccomp import seccomp_available, seccomp_deny_kernel_state_and_unix_sockets
from .testproc import (
    PREAMBLE_FROM,
    PREAMBLE_MODULES,
    PRELOAD,
    ChildSide,
    fresh_main,
    program_process_state,
    program_streams,
    reseed,
)
from .watch import Watch

_STDIN_EARLY = 4096  # stdin up to this size (PIPE_BUF: an empty pipe always takes it) is written before the fork
DEVICES = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random", "/dev/full")
_HELD_SLACK = 8 << 20  # a test starts only once the slot cgroup holds less than this of earlier tests' memory ...
_HELD_WAIT_S = 10.0  # ... waiting at most this long for the kernel to free it (else INFRA: the slot restarts) ...
_RENEW_AFTER_S = 0.05  # ... or this long, then giving the test a new memory cgroup (`CgroupHandle.renew_memory`)


class ForkServer(Watch, ChildSide):
    """A slot's fork server: its set-up (the slot's layers) and, per test, the fork, the reply's data, the clean-up.
    The watch over a running test is `Watch`'s (watch.py); the test process's set-up calls are `ChildSide`'s
    (testproc.py)."""

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
        # A test process starts on the CPU the fork server runs on, whose caches hold the pages it copies and the code
        # it runs first (started on another CPU, as the scheduler would place it, it costs ~40% more CPU on the GPU
        # machine); its first call gives it back every CPU the fork server may use (`_start_here`). (The switch's
        # name predates the name "fork server".)
        self.allowed = os.sched_getaffinity(0) if "start_on_zygote_cpu" not in self.disable else None
        self.main = (None, None)  # ((code_id, mode), the pristine __main__ module its test processes run in)
        self.pending = None  # (directory, descriptors, whether it ended normally) of the last test, until clean_up()
        self.code_id = None
        self.code = None  # compiled code object, or a syntax error message
        for name in PRELOAD:
            __import__(name)
        self.preamble = {}
        for name in PREAMBLE_MODULES:
            self.preamble[name] = sys.modules[name]
        for module, names in PREAMBLE_FROM.items():
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
        # mounted; None: no per-test proc), which the fork server unmounts after it: `proc_dev` tells the slot's proc
        # from a test's, and `own_proc` is a descriptor of the slot's, where the fork server finds its tests' PIDs.
        self.proc_options = None
        self.proc_dev = None
        self.own_proc = open_proc()  # opened again in the minimal tree (`launcher.serve`)
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
        self.streams = program_streams()
        self._set_once_for_every_test()
        gc.freeze()  # a test's garbage collections never walk (and copy-on-write) the fork server's own objects

    def _set_once_for_every_test(self) -> None:
        """What every test process would set up the same way is set here, once: fork passes it on, and a test
        process then writes (copies) fewer pages and makes fewer calls. Nothing here changes what the fork server
        does."""
        # the test directory that HOME and TMPDIR name in this process's environment
        self.env_dir = self.mount_point if self.per_test_tmpfs else None  # with a tmpfs, every test runs there
        program_process_state(self.env_dir)
        if self.uid is not None or self.layers["user_ns"]:
            clear_inheritable_and_bounding()  # no uid change clears them (`_isolation_calls` does the rest)
        if self.layers["seccomp"]:
            # The fork server makes none of the calls the filter denies (it talks through pipes): installed here, it is
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
        for p in read_paths(cfg):
            real = os.path.realpath(p)
            if real in seen:
                continue
            seen.add(real)
            fd, is_dir = open_path(real)
            self.rules.append((fd, rights_for(is_dir, READ_DIR_RIGHTS)))
        for dev in DEVICES:
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
        # Each Python function the fork server calls after a fork costs it copy-on-write faults (its function and code
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

    def _start_here(self) -> bool:
        """Restrict the fork server to the CPU it runs on, for the fork: the test process inherits it and so starts
        there (it takes all of `allowed` back as its first call, and the fork server right after the fork)."""
        if self.allowed is None or len(self.allowed) < 2:
            return False
        try:
            os.sched_setaffinity(0, (current_cpu(),))
        except OSError:  # the CPU left our set (a cpuset changed): tests start wherever the scheduler puts them
            self.allowed = None
            return False
        return True

    def _fork_and_watch(self, req, tmp, fds) -> dict:
        lim = req["limits"]
        # Made here, before the fork, what a test process would otherwise make itself: it gets them as copies
        # (unchanged, so not even copied until written), and it runs less code of its own before the program.
        self._plan_rlimits(lim)
        if self.main[0] != (self.code_id, req["mode"]):
            self.main = (self.code_id, req["mode"]), fresh_main(req["mode"] == "call", self.preamble)
        reseed()
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
        pid = fork()  # the fork server has one thread (checked at start)
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


def open_proc() -> int | None:
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


def read_paths(cfg) -> list[str]:
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
