"""Landlock (Linux >= 5.13): what a test process may read, write and reach, as rules made once in the fork server.

The fork server builds `LandlockRules` once (O_PATH descriptors of what a test may read) and either makes one
ruleset that every test process applies (`ruleset`, then `restrict_self` in the test process) or has each test
process add its own directory (`restrict`). Everything the kernel's ABI can restrict and no rule allows is denied.
"""

from __future__ import annotations

import ctypes
import os

from .libc import LIBC, check

# Generic syscall numbers (identical on x86_64 and aarch64 for these recent calls).
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


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 when Landlock is unavailable or disabled."""
    ret = LIBC.syscall(ctypes.c_long(SYS_landlock_create_ruleset), None, ctypes.c_size_t(0),
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


class LandlockRules:
    """A Landlock policy built once (in the fork server) and applied in each test process with a few syscalls.

    `rules` are (O_PATH fd, allowed rights) pairs; `restrict(fd, rights)` adds one more (the test's directory).
    Everything the ABI can restrict and no rule allows is denied: other paths, TCP bind/connect (ABI >= 4),
    signals to and abstract unix sockets of processes outside the domain (ABI >= 6).
    """

    def __init__(self, abi: int, rules: list[tuple[int, int]]):
        fs, net, scope = landlock_handled(abi)
        self.fs = fs
        self.attr = _RulesetAttr(fs, net, scope)
        self.size = ctypes.c_size_t(24 if abi >= 6 else 16 if abi >= 4 else 8)
        self.rules = [_PathBeneathAttr(rights & fs, fd) for fd, rights in rules]
        self.extra = _PathBeneathAttr(0, -1)

    def ruleset(self, fd: int, rights: int) -> int:
        """A Landlock ruleset (a descriptor) of the rules plus (fd, rights). One made in the fork server serves every
        test process (`restrict_self`), when the directory its tests write is the same in each (`share_one_ruleset`)."""
        self.extra.allowed_access, self.extra.parent_fd = rights & self.fs, fd
        ruleset = check(LIBC.syscall(_SYS_CREATE, ctypes.byref(self.attr), self.size, _ZERO),
                        "landlock_create_ruleset")
        try:
            for rule in self.rules + [self.extra]:
                check(LIBC.syscall(_SYS_ADD, ruleset, _LL_RULE_PATH_BENEATH, ctypes.byref(rule), _ZERO),
                      "landlock_add_rule")
        except BaseException:
            os.close(ruleset)
            raise
        return ruleset

    def restrict(self, fd: int, rights: int) -> None:
        """Restrict this process (and its future children) to the rules plus (fd, rights)."""
        ruleset = self.ruleset(fd, rights)
        try:
            restrict_self(ruleset)
        finally:
            os.close(ruleset)


def restrict_self(ruleset: int) -> None:
    """Restrict this process (and its future children) to a Landlock ruleset; for good: a domain only narrows.
    Needs no_new_privs (the fork server sets it once: `set_no_new_privs`, or with the seccomp filter) or
    CAP_SYS_ADMIN."""
    check(LIBC.syscall(_SYS_RESTRICT, ruleset, _ZERO), "landlock_restrict_self")


_SYS_CREATE = ctypes.c_long(SYS_landlock_create_ruleset)
_SYS_ADD = ctypes.c_long(SYS_landlock_add_rule)
_SYS_RESTRICT = ctypes.c_long(SYS_landlock_restrict_self)
_ZERO = ctypes.c_uint32(0)


def open_path(path: str) -> tuple[int, bool]:
    """O_PATH descriptor for a Landlock rule, and whether it is a directory."""
    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    return fd, os.path.isdir(path)


READ_DIR_RIGHTS = LL_READ_FILE | LL_READ_DIR
DEVICE_RIGHTS = LL_READ_FILE | LL_WRITE_FILE | LL_TRUNCATE
ALL_FS_RIGHTS = (1 << 16) - 1


def rights_for(is_dir: bool, rights: int) -> int:
    return rights if is_dir else rights & _LL_FILE_RIGHTS

