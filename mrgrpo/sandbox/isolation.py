"""Linux isolation primitives through libc (ctypes): namespaces, Landlock, rlimits, capabilities.

Standard library only: the zygote loads this file by path (it runs `python -I -S`, without site-packages).
Every function either does what it says or raises OSError; deciding what to do without a layer is the
caller's job (worker.py), which reports it so that the parent can warn once.
"""

from __future__ import annotations

import ctypes
import os
import resource

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long

CLONE_NEWNS = 0x00020000
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

# Generic syscall numbers (identical on x86_64 and aarch64 for these recent calls).
SYS_close_range = 436
SYS_landlock_create_ruleset = 444
SYS_landlock_add_rule = 445
SYS_landlock_restrict_self = 446

# Landlock access rights (include/uapi/linux/landlock.h).
LL_EXECUTE = 1 << 0
LL_WRITE_FILE = 1 << 1
LL_READ_FILE = 1 << 2
LL_READ_DIR = 1 << 3
LL_REMOVE_DIR = 1 << 4
LL_REMOVE_FILE = 1 << 5
LL_MAKE_CHAR = 1 << 6
LL_MAKE_DIR = 1 << 7
LL_MAKE_REG = 1 << 8
LL_MAKE_SOCK = 1 << 9
LL_MAKE_FIFO = 1 << 10
LL_MAKE_BLOCK = 1 << 11
LL_MAKE_SYM = 1 << 12
LL_REFER = 1 << 13  # ABI 2
LL_TRUNCATE = 1 << 14  # ABI 3
LL_IOCTL_DEV = 1 << 15  # ABI 5
LL_NET_BIND_TCP = 1 << 0  # ABI 4
LL_NET_CONNECT_TCP = 1 << 1  # ABI 4
LL_SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
LL_SCOPE_SIGNAL = 1 << 1  # ABI 6
_LL_RULE_PATH_BENEATH = 1
_LL_CREATE_RULESET_VERSION = 1
_LL_FILE_RIGHTS = LL_EXECUTE | LL_WRITE_FILE | LL_READ_FILE | LL_TRUNCATE | LL_IOCTL_DEV


def _check(ret: int, what: str) -> int:
    if ret == -1:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return ret


def unshare(flags: int) -> None:
    _check(_libc.unshare(ctypes.c_int(flags)), f"unshare({flags:#x})")


def setns(fd: int, nstype: int) -> None:
    _check(_libc.setns(ctypes.c_int(fd), ctypes.c_int(nstype)), "setns")


def mount(source: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    ret = _libc.mount(
        source.encode(), target.encode(), fstype.encode() if fstype else None, ctypes.c_ulong(flags),
        data.encode() if data else None,
    )
    _check(ret, f"mount {fstype or source} on {target}")


def umount(target: str) -> None:
    _check(_libc.umount2(target.encode(), ctypes.c_int(MNT_DETACH)), f"umount {target}")


def prctl(option: int, arg: int) -> None:
    _check(_libc.prctl(ctypes.c_int(option), ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0),
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
    if _libc.syscall(ctypes.c_long(SYS_close_range), ctypes.c_uint(first), ctypes.c_uint(0xFFFFFFFF),
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
    _check(_libc.capset(ctypes.byref(header), ctypes.byref(data)), "capset")


PR_SET_KEEPCAPS = 8
CAP_DAC_READ_SEARCH = 2


def drop_to_user(uid: int, gid: int, keep_read_search: bool) -> None:
    """Root only: become uid/gid with no supplementary groups and no capabilities, except CAP_DAC_READ_SEARCH
    when `keep_read_search` (so that an interpreter under /root, mode 0700, stays importable; Landlock, when
    available, then alone decides what may be read)."""
    os.setgroups([])
    if keep_read_search:
        prctl(PR_SET_KEEPCAPS, 1)
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if keep_read_search:
        keep = 1 << CAP_DAC_READ_SEARCH
        header = _CapHeader(0x20080522, 0)
        data = (_CapData * 2)()
        data[0].effective = data[0].permitted = keep
        _check(_libc.capset(ctypes.byref(header), ctypes.byref(data)), "capset")


def set_rlimits(*, cpu_s: int, data_bytes: int, as_bytes: int, stack_bytes: int, fsize_bytes: int,
                nofile: int, nproc: int | None) -> None:
    # soft == hard: the kernel sends SIGKILL (SIGXCPU alone would be ignored by the PID 1 of a namespace)
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))
    resource.setrlimit(resource.RLIMIT_DATA, (data_bytes, data_bytes))
    resource.setrlimit(resource.RLIMIT_AS, (as_bytes, as_bytes))
    soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
    if hard != resource.RLIM_INFINITY:
        stack_bytes = min(stack_bytes, hard)
    resource.setrlimit(resource.RLIMIT_STACK, (stack_bytes, hard))
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize_bytes, fsize_bytes))
    resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if nproc is not None:
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))


# ---------------------------------------------------------------- Landlock


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 when Landlock is unavailable or disabled."""
    ret = _libc.syscall(ctypes.c_long(SYS_landlock_create_ruleset), None, ctypes.c_size_t(0),
                        ctypes.c_uint32(_LL_CREATE_RULESET_VERSION))
    if ret < 0:
        return 0
    return int(ret)


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def landlock_handled(abi: int) -> tuple[int, int, int]:
    """(filesystem, network, scope) rights this ABI can restrict; all of them are denied unless a rule allows."""
    fs = (1 << 13) - 1
    if abi >= 2:
        fs |= LL_REFER
    if abi >= 3:
        fs |= LL_TRUNCATE
    if abi >= 5:
        fs |= LL_IOCTL_DEV
    net = LL_NET_BIND_TCP | LL_NET_CONNECT_TCP if abi >= 4 else 0
    scope = LL_SCOPE_ABSTRACT_UNIX_SOCKET | LL_SCOPE_SIGNAL if abi >= 6 else 0
    return fs, net, scope


def landlock_restrict(abi: int, rules: list[tuple[int, int]]) -> None:
    """Restrict this process (and its future children) to `rules`: (O_PATH fd, allowed rights) pairs.

    Everything the ABI can restrict and no rule allows is denied: other paths, TCP bind/connect (ABI >= 4),
    signals to and abstract unix sockets of processes outside the domain (ABI >= 6).
    """
    fs, net, scope = landlock_handled(abi)
    attr = _RulesetAttr(fs, net, scope)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    ruleset = _check(_libc.syscall(ctypes.c_long(SYS_landlock_create_ruleset), ctypes.byref(attr),
                                   ctypes.c_size_t(size), ctypes.c_uint32(0)), "landlock_create_ruleset")
    try:
        for fd, rights in rules:
            rule = _PathBeneathAttr(rights & fs, fd)
            _check(_libc.syscall(ctypes.c_long(SYS_landlock_add_rule), ctypes.c_int(ruleset),
                                 ctypes.c_int(_LL_RULE_PATH_BENEATH), ctypes.byref(rule), ctypes.c_uint32(0)),
                   "landlock_add_rule")
        prctl(PR_SET_NO_NEW_PRIVS, 1)
        _check(_libc.syscall(ctypes.c_long(SYS_landlock_restrict_self), ctypes.c_int(ruleset), ctypes.c_uint32(0)),
               "landlock_restrict_self")
    finally:
        os.close(ruleset)


def open_path(path: str) -> tuple[int, bool]:
    """O_PATH descriptor for a Landlock rule, and whether it is a directory."""
    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    return fd, os.path.isdir(path)


READ_DIR_RIGHTS = LL_READ_FILE | LL_READ_DIR
READ_FILE_RIGHTS = LL_READ_FILE
DEVICE_RIGHTS = LL_READ_FILE | LL_WRITE_FILE | LL_TRUNCATE
ALL_FS_RIGHTS = (1 << 16) - 1


def rights_for(is_dir: bool, rights: int) -> int:
    return rights if is_dir else rights & _LL_FILE_RIGHTS

