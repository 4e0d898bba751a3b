"""The seccomp filter as a program (pure): run its BPF on every syscall number of each architecture and check which it
denies. The kernel tests (test_sandbox_hardening.py) check the installed filter on this machine's architecture only."""

from __future__ import annotations

import pytest

from mrgrpo.sandbox import seccomp

ALLOW, EPERM, ENOSYS = 0x7FFF0000, 0x00050001, 0x00050026
AF_UNIX, AF_INET, AF_INET6, AF_NETLINK, AF_PACKET, AF_VSOCK = 1, 2, 10, 16, 17, 40
CLONE_NEWUSER, CLONE_NEWNS, SIGCHLD = 0x10000000, 0x00020000, 17

# What must be denied, by name, as the kernel numbers them (arch/x86/entry/syscalls/syscall_64.tbl,
# include/uapi/asm-generic/unistd.h for aarch64).
DENIED = {
    "x86_64": {"add_key": 248, "request_key": 249, "keyctl": 250, "shmget": 29, "shmat": 30, "shmctl": 31,
               "semget": 64, "semop": 65, "semctl": 66, "shmdt": 67, "msgget": 68, "msgsnd": 69, "msgrcv": 70,
               "msgctl": 71, "semtimedop": 220, "mq_open": 240, "mq_unlink": 241, "mq_timedsend": 242,
               "mq_timedreceive": 243, "mq_notify": 244, "mq_getsetattr": 245, "io_uring_setup": 425,
               "io_uring_enter": 426, "io_uring_register": 427, "name_to_handle_at": 303, "open_by_handle_at": 304,
               "execve": 59, "execveat": 322, "bpf": 321},
    "aarch64": {"add_key": 217, "request_key": 218, "keyctl": 219, "mq_open": 180, "mq_unlink": 181,
                "mq_timedsend": 182, "mq_timedreceive": 183, "mq_notify": 184, "mq_getsetattr": 185, "msgget": 186,
                "msgctl": 187, "msgrcv": 188, "msgsnd": 189, "semget": 190, "semctl": 191, "semtimedop": 192,
                "semop": 193, "shmget": 194, "shmctl": 195, "shmat": 196, "shmdt": 197, "io_uring_setup": 425,
                "io_uring_enter": 426, "io_uring_register": 427, "name_to_handle_at": 264, "open_by_handle_at": 265,
                "execve": 221, "execveat": 281, "bpf": 280},
}
SOCKET = {"x86_64": 41, "aarch64": 198}
GETSOCKOPT = {"x86_64": 55, "aarch64": 209}
CLONE = {"x86_64": 56, "aarch64": 220}
UNSHARE = {"x86_64": 272, "aarch64": 97}
CLONE3 = 435
CHECKED = {m: {SOCKET[m], GETSOCKOPT[m], CLONE[m], UNSHARE[m], CLONE3} for m in SOCKET}
ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}


def run_bpf(prog, arch: int, nr: int, *args: int) -> int:
    """A classic-BPF interpreter for the instructions the filter uses, over struct seccomp_data."""
    data = {0: nr, 4: arch}
    for i in range(6):
        value = args[i] if i < len(args) else 0
        data[16 + 8 * i], data[20 + 8 * i] = value & 0xFFFFFFFF, value >> 32
    acc, pc = 0, 0
    for _ in range(len(prog) + 1):  # no loops in BPF: each step moves forward
        code, jt, jf, k = prog[pc]
        if code == 0x20:  # ld [k]
            acc, pc = data[k], pc + 1
        elif code in (0x15, 0x25, 0x35, 0x45):  # jeq, jgt, jge, jset
            taken = {0x15: acc == k, 0x25: acc > k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
            pc = pc + 1 + (jt if taken else jf)
        elif code == 0x06:
            return k
        else:
            raise AssertionError(f"unexpected instruction {code:#x}")
    raise AssertionError("the program did not return")


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_exactly_the_kernel_state_calls_are_denied(machine):
    prog = seccomp.seccomp_instructions(machine)
    denied = set(DENIED[machine].values())
    for nr in range(600):
        if nr in CHECKED[machine]:
            continue
        expected = EPERM if nr in denied else ALLOW
        assert run_bpf(prog, ARCH[machine], nr) == expected, (machine, nr)


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_only_internet_sockets_can_be_made(machine):
    prog = seccomp.seccomp_instructions(machine)
    for family in range(64):
        expected = ALLOW if family in (AF_INET, AF_INET6) else EPERM
        assert run_bpf(prog, ARCH[machine], SOCKET[machine], family) == expected, family
    assert run_bpf(prog, ARCH[machine], SOCKET[machine], AF_UNIX | (1 << 32)) == EPERM  # the high half is not read
    assert run_bpf(prog, ARCH[machine], SOCKET[machine], AF_NETLINK, 3, 4) == EPERM


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_socket_cookies_cannot_be_read(machine):
    prog = seccomp.seccomp_instructions(machine)
    for level, name, expected in ((1, 57, EPERM), (1, 71, EPERM), (1, 7, ALLOW), (6, 57, ALLOW), (0, 57, ALLOW)):
        assert run_bpf(prog, ARCH[machine], GETSOCKOPT[machine], 3, level, name) == expected, (level, name)


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_no_user_namespace_and_clone3_falls_back(machine):
    prog = seccomp.seccomp_instructions(machine)
    for nr in (CLONE[machine], UNSHARE[machine]):
        assert run_bpf(prog, ARCH[machine], nr, CLONE_NEWUSER | SIGCHLD) == EPERM
        assert run_bpf(prog, ARCH[machine], nr, CLONE_NEWUSER | CLONE_NEWNS) == EPERM
        assert run_bpf(prog, ARCH[machine], nr, SIGCHLD) == ALLOW  # fork
        assert run_bpf(prog, ARCH[machine], nr, 0x20000000 | (CLONE_NEWUSER << 32)) == ALLOW  # high half unread
    assert run_bpf(prog, ARCH[machine], CLONE3, 0) == ENOSYS


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_a_foreign_abi_is_denied_whatever_the_call(machine):
    prog = seccomp.seccomp_instructions(machine)
    foreign = 0x40000003  # i386
    for nr in (0, 1, 41, 102, 117, 500):
        assert run_bpf(prog, foreign, nr) == EPERM


def test_x32_calls_are_denied_on_x86_64():
    prog = seccomp.seccomp_instructions("x86_64")
    for nr in (0, 1, 29, 41, 512):
        assert run_bpf(prog, ARCH["x86_64"], 0x40000000 | nr) == EPERM


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_every_jump_lands_inside_the_program(machine):
    prog = seccomp.seccomp_instructions(machine)
    for i, (code, jt, jf, _k) in enumerate(prog):
        assert 0 <= jt <= 255 and 0 <= jf <= 255
        if code in (0x15, 0x25, 0x35, 0x45):
            assert i + 1 + max(jt, jf) < len(prog)
    assert prog[-1][0] == 0x06 and prog[-2][0] == 0x06 and prog[-3][0] == 0x06
