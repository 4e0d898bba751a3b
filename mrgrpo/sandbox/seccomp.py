"""The seccomp filter of every test process: a classic BPF program built here, installed once in the fork server.

It denies (EPERM) the system calls that make state outliving a process, reach a node-wide counter or a file past the
path rules, or start a program (`seccomp_instructions` lists them); a test process inherits it at fork and cannot
remove it. `tests/sandbox/test_sandbox_seccomp_on_cpu.py` runs the program on every syscall number of both
architectures.
"""

from __future__ import annotations

import ctypes
import functools
import os

from .libc import CLONE_NEWUSER, LIBC, check, set_no_new_privs


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_SECCOMP_RET_ALLOW = 0x7FFF0000
_SECCOMP_RET_ERRNO = 0x00050000
_EPERM, _ENOSYS = 1, 38
_BPF_LD_W_ABS, _BPF_JEQ, _BPF_JGT, _BPF_JGE, _BPF_JSET, _BPF_RET = 0x20, 0x15, 0x25, 0x35, 0x45, 0x06
_AF_INET, _AF_INET6 = 2, 10
_SOL_SOCKET, _SO_COOKIE, _SO_NETNS_COOKIE = 1, 57, 71
# Per architecture: the audit arch; the x32 bit (0 if none); the calls denied outright (EPERM), as inclusive ranges of
# numbers; and the numbers of the calls whose arguments the filter reads. Denied outright: the kernel keyring calls
# (add_key, request_key, keyctl), SysV IPC (shm*, sem*, msg*) and POSIX message queues (mq_*): state that outlives a
# process; io_uring (its operations make sockets and connect them without any system call the filter sees); file
# handles (name_to_handle_at, open_by_handle_at: a handle reaches any file of a file system, past every path rule);
# execve and execveat (a test never starts a program: the worker's own exec came before the filter, and a memfd has
# no path for Landlock's execute rule to deny); bpf (kernel surface, and socket cookies through its helpers).
_SECCOMP_ARCH = {
    "x86_64": (0xC000003E, 0x40000000,
               ((248, 250),  # add_key, request_key, keyctl
                (29, 31),  # shmget, shmat, shmctl
                (59, 59),  # execve
                (64, 71),  # semget, semop, semctl, shmdt, msgget, msgsnd, msgrcv, msgctl
                (220, 220),  # semtimedop
                (240, 245),  # mq_open, mq_unlink, mq_timedsend, mq_timedreceive, mq_notify, mq_getsetattr
                (303, 304),  # name_to_handle_at, open_by_handle_at
                (321, 322),  # bpf, execveat
                (425, 427)),  # io_uring_setup, io_uring_enter, io_uring_register
               {"socket": 41, "getsockopt": 55, "clone": 56, "unshare": 272, "clone3": 435}),
    "aarch64": (0xC00000B7, 0,
                ((217, 219),  # add_key, request_key, keyctl
                 (180, 197),  # mq_* (180-185), msg* (186-189), sem* (190-193), shm* (194-197)
                 (221, 221),  # execve
                 (264, 265),  # name_to_handle_at, open_by_handle_at
                 (280, 281),  # bpf, execveat
                 (425, 427)),  # io_uring_setup, io_uring_enter, io_uring_register
                {"socket": 198, "getsockopt": 209, "clone": 220, "unshare": 97, "clone3": 435}),
}


def seccomp_available() -> bool:
    return os.uname().machine in _SECCOMP_ARCH


def seccomp_deny_kernel_state_and_unix_sockets() -> None:
    """Install a seccomp filter (`seccomp_instructions`): every call that makes state which outlives its process,
    or reaches a kernel counter or a file past the path rules, or starts a program, fails. Sets no_new_privs.
    Installed once in the fork server (which needs none of these calls): every test process inherits it at fork, and no
    process can remove it."""
    set_no_new_privs()
    # SECCOMP_FILTER_FLAG_SPEC_ALLOW: before Linux 5.16 a filter also switched on speculation mitigations (SSBD,
    # STIBP) for its process by default, which would now slow the fork server itself; they are not what the filter is
    # for (timing side channels are not isolated, see docs/sandbox.md). A kernel without the flag (< 4.17) gets prctl.
    if LIBC.syscall(_SYS_SECCOMP, _SET_MODE_FILTER, _FLAG_SPEC_ALLOW, seccomp_program()) == -1:
        check(LIBC.prctl(_PR_SET_SECCOMP, _MODE_FILTER, seccomp_program(), _ULONG0, _ULONG0), "seccomp")


_PR_SET_SECCOMP = ctypes.c_int(PR_SET_SECCOMP)
_SYS_SECCOMP = ctypes.c_long({"x86_64": 317, "aarch64": 277}.get(os.uname().machine, -1))
_SET_MODE_FILTER = ctypes.c_uint(1)
_FLAG_SPEC_ALLOW = ctypes.c_uint(1 << 2)
_MODE_FILTER = ctypes.c_ulong(_SECCOMP_MODE_FILTER)
_ULONG0 = ctypes.c_ulong(0)


def seccomp_instructions(machine: str) -> list[tuple[int, int, int, int]]:
    """The filter as classic BPF (code, jt, jf, k) for `machine` (pure). It fails with EPERM: every call through a
    foreign ABI (32-bit or x32 entry on x86_64, whose numbers it would misread); the calls of `_SECCOMP_ARCH` denied
    outright; `socket` of any family but AF_INET and AF_INET6 (AF_UNIX pathname sockets reach host services;
    AF_NETLINK's sock_diag dumps socket cookies, a node-wide counter; `socketpair` stays allowed); `getsockopt` of
    SO_COOKIE and SO_NETNS_COOKIE (the same counter); `unshare` and `clone` with CLONE_NEWUSER (a user namespace
    gives a test mount namespaces of its own, whose mounts move the node-wide mount ID, and kernel surface a judge
    never needs). `clone3` fails with ENOSYS: its flags are in memory, out of the filter's sight, and libc then
    falls back to `clone` (threads, fork). Jumps are written to labels and resolved to offsets at the end."""
    arch, x32, denied, nr = _SECCOMP_ARCH[machine]
    arg = [16 + 8 * i for i in range(6)]  # args[i], low 32 bits (little endian)
    prog: list = [(_BPF_LD_W_ABS, 0, 0, 4),  # arch
                  (_BPF_JEQ, "next", "deny", arch),
                  (_BPF_LD_W_ABS, 0, 0, 0)]  # syscall number
    if x32:
        prog.append((_BPF_JGE, "deny", "next", x32))
    for low, high in denied:
        if low == high:
            prog.append((_BPF_JEQ, "deny", "next", low))
        else:  # low <= nr <= high: not below low, and not above high
            prog.append((_BPF_JGE, "next", 1, low))
            prog.append((_BPF_JGT, "next", "deny", high))
    prog += [(_BPF_JEQ, "enosys", "next", nr["clone3"]),
             (_BPF_JEQ, "socket", "next", nr["socket"]),
             (_BPF_JEQ, "getsockopt", "next", nr["getsockopt"]),
             (_BPF_JEQ, "flags", "next", nr["clone"]),
             (_BPF_JEQ, "flags", "allow", nr["unshare"]),
             "socket",
             (_BPF_LD_W_ABS, 0, 0, arg[0]),  # domain
             (_BPF_JEQ, "allow", "next", _AF_INET),
             (_BPF_JEQ, "allow", "deny", _AF_INET6),
             "getsockopt",
             (_BPF_LD_W_ABS, 0, 0, arg[1]),  # level
             (_BPF_JEQ, "next", "allow", _SOL_SOCKET),
             (_BPF_LD_W_ABS, 0, 0, arg[2]),  # optname
             (_BPF_JEQ, "deny", "next", _SO_COOKIE),
             (_BPF_JEQ, "deny", "allow", _SO_NETNS_COOKIE),
             "flags",
             (_BPF_LD_W_ABS, 0, 0, arg[0]),  # clone/unshare flags (the kernel reads only their low 32 bits)
             (_BPF_JSET, "deny", "allow", CLONE_NEWUSER),
             "allow", (_BPF_RET, 0, 0, _SECCOMP_RET_ALLOW),
             "deny", (_BPF_RET, 0, 0, _SECCOMP_RET_ERRNO | _EPERM),
             "enosys", (_BPF_RET, 0, 0, _SECCOMP_RET_ERRNO | _ENOSYS)]
    labels, code = {}, []
    for item in prog:
        if isinstance(item, str):
            labels[item] = len(code)
        else:
            code.append(item)

    def offset(i: int, target) -> int:
        if target == "next":
            return 0
        if isinstance(target, str):
            return labels[target] - i - 1
        return target

    return [(op, offset(i, jt), offset(i, jf), k) for i, (op, jt, jf, k) in enumerate(code)]


@functools.cache
def seccomp_program() -> ctypes.c_void_p:
    """The filter as a `struct sock_fprog *` (kept alive by the cache)."""
    prog = seccomp_instructions(os.uname().machine)
    filters = (_SockFilter * len(prog))(*(_SockFilter(*ins) for ins in prog))
    fprog = _SockFprog(len(prog), filters)
    pointer = ctypes.c_void_p(ctypes.addressof(fprog))
    pointer._keep = (fprog, filters)
    return pointer
