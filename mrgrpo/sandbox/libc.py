"""Linux process primitives through libc (ctypes): namespaces, mounts, fork, prctl, capabilities, rlimits.

Standard library only (the worker runs `python -I -S`, without site-packages: worker.py). Every function either does
what it says or raises OSError; deciding what to do without a layer is the caller's job (the fork server), which
reports it so that the parent can warn once. landlock.py, seccomp.py and rootfs.py make their own calls through
`LIBC` and `check`.
"""

from __future__ import annotations

import ctypes
import functools
import os
import resource

LIBC = ctypes.CDLL(None, use_errno=True)  # this process's C library
LIBC.syscall.restype = ctypes.c_long
_ULONG0 = ctypes.c_ulong(0)

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MNT_DETACH = 2

PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38

# Generic syscall numbers (identical on x86_64 and aarch64 for this recent call).
SYS_close_range = 436


def check(ret: int, what: str) -> int:
    """`ret` of a libc call, or OSError (errno, "`what`: its text") when it is -1."""
    if ret == -1:
        raise_errno(what)
    return ret


def raise_errno(what: str):
    err = ctypes.get_errno()
    raise OSError(err, f"{what}: {os.strerror(err)}")


# The calls a fork server makes for every test are prototyped once and build their error message only on failure:
# no ctypes argument objects or strings per call. Every object the fork server writes while a test runs, or after
# one, costs it a copy-on-write fault (the fork write-protected all its pages).
LIBC.fork.argtypes = ()
LIBC.unshare.argtypes = (ctypes.c_int,)
LIBC.setns.argtypes = (ctypes.c_int, ctypes.c_int)
LIBC.mount.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p)
LIBC.umount2.argtypes = (ctypes.c_char_p, ctypes.c_int)
# ... and bound to names of their own here, in the fork server: a CDLL attribute is made on first use (its class's
# __getattr__ builds the function object), and a first use in a test process built it anew in every test (capset:
# ~60 pages copied per test).
_fork, _unshare, _setns, _mount, _umount2 = LIBC.fork, LIBC.unshare, LIBC.setns, LIBC.mount, LIBC.umount2
_capset = LIBC.capset


def fork() -> int:
    """fork(2) straight from libc, without CPython's at-fork work (`os.fork` re-initialises thread states and runs
    every registered at-fork callback, e.g. random's reseed and threading's bookkeeping, in the child: ~160 pages
    copied on write and ~0.4 ms of CPU per test here). Only for a process with one thread (the fork server): then there
    is no other thread whose state or locks the child could inherit half-way."""
    pid = _fork()
    if pid == -1:
        raise_errno("fork")
    return pid


def unshare(flags: int) -> None:
    if _unshare(flags) == -1:
        raise_errno(f"unshare({flags:#x})")


def setns(fd: int, nstype: int) -> None:
    if _setns(fd, nstype) == -1:
        raise_errno("setns")


def mount(source: str | bytes, target: str | bytes, fstype: str | bytes | None, flags: int,
          data: str | bytes | None = None) -> None:
    """mount(2); bytes arguments go to libc as they are (a caller that mounts often encodes its constants once)."""
    if _mount(source.encode() if type(source) is str else source,
              target.encode() if type(target) is str else target,
              fstype.encode() if type(fstype) is str else fstype or None, flags,
              data.encode() if type(data) is str else data or None) == -1:
        raise_errno(f"mount {os.fsdecode(fstype or source)} on {os.fsdecode(target)}")


def umount(target: str | bytes) -> None:
    if _umount2(target.encode() if type(target) is str else target, MNT_DETACH) == -1:
        raise_errno(f"umount {os.fsdecode(target)}")


def current_cpu() -> int:
    """The CPU this thread runs on now (sched_getcpu: the vDSO, no system call)."""
    return LIBC.sched_getcpu()


def prctl(option: int, arg: int) -> None:
    check(LIBC.prctl(ctypes.c_int(option), ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0),
                     ctypes.c_ulong(0)), f"prctl({option})")


def map_user_namespace(uid: int, gid: int) -> None:
    """After unshare(CLONE_NEWUSER): map root inside the namespace to our own uid/gid outside."""
    with open("/proc/self/setgroups", "w") as f:
        f.write("deny")
    with open("/proc/self/uid_map", "w") as f:
        f.write(f"0 {uid} 1")
    with open("/proc/self/gid_map", "w") as f:
        f.write(f"0 {gid} 1")


def close_fds_from(first: int) -> None:
    if LIBC.syscall(ctypes.c_long(SYS_close_range), ctypes.c_uint(first), ctypes.c_uint(0xFFFFFFFF),
                    ctypes.c_uint(0)) == -1:
        os.closerange(first, resource.getrlimit(resource.RLIMIT_NOFILE)[0])


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_capabilities() -> None:
    """Clear the effective, permitted and inheritable sets (ambient follows). Used for root of a user namespace."""
    header = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (_CapData * 2)()
    check(_capset(ctypes.byref(header), ctypes.byref(data)), "capset")


PR_SET_KEEPCAPS = 8
PR_CAPBSET_DROP = 24
CAP_DAC_READ_SEARCH = 2


def prepare_drop_to_user(keep_read_search: bool) -> None:
    """Root only, once in the fork server: no supplementary groups, and (with `keep_read_search`) keep the permitted
    capabilities across the uid change each test process makes (`drop_to_user_calls`). Both are inherited by fork,
    so no test process pays for them. Without `keep_read_search` the uid change clears the permitted, effective and
    ambient sets (`clear_inheritable_and_bounding` has cleared the others)."""
    os.setgroups([])
    if keep_read_search:
        prctl(PR_SET_KEEPCAPS, 1)


def clear_inheritable_and_bounding() -> None:
    """Once in the fork server (root, or root of a user namespace): an empty inheritable set and bounding set, which
    fork passes on and no uid change clears. The fork server keeps its effective and permitted sets (it still
    mounts), and never executes a program, for which alone the bounding set counts."""
    header = _CapHeader(0x20080522, 0)
    data = (_CapData * 2)()
    check(LIBC.capget(ctypes.byref(header), ctypes.byref(data)), "capget")
    data[0].inheritable = data[1].inheritable = 0
    check(_capset(ctypes.byref(header), ctypes.byref(data)), "capset")
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            last = int(f.read())
    except OSError:
        last = 63
    for cap in range(last + 1):
        if LIBC.prctl(ctypes.c_int(PR_CAPBSET_DROP), ctypes.c_ulong(cap), _ULONG0, _ULONG0, _ULONG0) == -1 \
                and ctypes.get_errno() != 22:  # EINVAL: a capability this kernel does not know
            raise_errno(f"prctl(PR_CAPBSET_DROP, {cap})")


def drop_to_user_calls(uid: int, gid: int, keep_read_search: bool) -> tuple:
    """Root only, after `prepare_drop_to_user` in this process or an ancestor: the (call, arguments) pairs that make
    a process uid/gid with no capabilities, except CAP_DAC_READ_SEARCH when `keep_read_search` (so that an
    interpreter under /root, mode 0700, stays importable; Landlock, when available, then alone decides what may be
    read). Made once (the fork server); each test process makes the calls."""
    calls = [(os.setresgid, (gid, gid, gid)), (os.setresuid, (uid, uid, uid))]
    if keep_read_search:
        calls.append((set_capabilities, capset_read_search()))
    return tuple(calls)


def set_capabilities(header, data) -> None:
    check(_capset(header, data), "capset")


@functools.cache
def capset_read_search() -> tuple:
    """capset(2) arguments for "CAP_DAC_READ_SEARCH only", built once per process (the fork server), not per test."""
    header = _CapHeader(0x20080522, 0)
    data = (_CapData * 2)()
    data[0].effective = data[0].permitted = 1 << CAP_DAC_READ_SEARCH
    return ctypes.pointer(header), ctypes.pointer(data)


def rlimit_calls(*, cpu_s: int, data_bytes: int, as_bytes: int, stack_bytes: int, fsize_bytes: int,
                 nofile: int, nproc: int | None) -> tuple:
    """The (setrlimit, (resource, (soft, hard))) calls that set these limits; made once per set of limits by the
    fork server, so that a test process only makes the calls (it inherits the stack's hard limit read here)."""
    # soft == hard: the kernel sends SIGKILL (SIGXCPU alone would be ignored by the PID 1 of a namespace)
    _soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
    if hard != resource.RLIM_INFINITY:
        stack_bytes = min(stack_bytes, hard)
    plan = [(resource.RLIMIT_CPU, (cpu_s, cpu_s)),
            (resource.RLIMIT_DATA, (data_bytes, data_bytes)),
            (resource.RLIMIT_AS, (as_bytes, as_bytes)),
            (resource.RLIMIT_STACK, (stack_bytes, hard)),
            (resource.RLIMIT_FSIZE, (fsize_bytes, fsize_bytes)),
            (resource.RLIMIT_NOFILE, (nofile, nofile)),
            (resource.RLIMIT_CORE, (0, 0))]
    if nproc is not None:
        plan.append((resource.RLIMIT_NPROC, (nproc, nproc)))
    return tuple((resource.setrlimit, pair) for pair in plan)


def set_no_new_privs() -> None:
    """No execve may raise privileges again (set-user-ID, file capabilities); inherited by fork, irreversible."""
    prctl(PR_SET_NO_NEW_PRIVS, 1)
