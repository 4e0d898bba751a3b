"""The seccomp filter as a program (pure): run its BPF on every syscall number of each architecture and check which it
denies. The kernel tests (test_sandbox_hardening.py) check the installed filter on this machine's architecture only."""

from __future__ import annotations

import pytest

from mrgrpo.sandbox import isolation as iso

ALLOW, EPERM = 0x7FFF0000, 0x00050001
AF_UNIX, AF_INET = 1, 2

# What must be denied, by name, as the kernel numbers them (arch/x86/entry/syscalls/syscall_64.tbl,
# include/uapi/asm-generic/unistd.h for aarch64).
DENIED = {
    "x86_64": {"add_key": 248, "request_key": 249, "keyctl": 250, "shmget": 29, "shmat": 30, "shmctl": 31,
               "semget": 64, "semop": 65, "semctl": 66, "shmdt": 67, "msgget": 68, "msgsnd": 69, "msgrcv": 70,
               "msgctl": 71, "semtimedop": 220, "mq_open": 240, "mq_unlink": 241, "mq_timedsend": 242,
               "mq_timedreceive": 243, "mq_notify": 244, "mq_getsetattr": 245, "io_uring_setup": 425,
               "io_uring_enter": 426, "io_uring_register": 427},
    "aarch64": {"add_key": 217, "request_key": 218, "keyctl": 219, "mq_open": 180, "mq_unlink": 181,
                "mq_timedsend": 182, "mq_timedreceive": 183, "mq_notify": 184, "mq_getsetattr": 185, "msgget": 186,
                "msgctl": 187, "msgrcv": 188, "msgsnd": 189, "semget": 190, "semctl": 191, "semtimedop": 192,
                "semop": 193, "shmget": 194, "shmctl": 195, "shmat": 196, "shmdt": 197, "io_uring_setup": 425,
                "io_uring_enter": 426, "io_uring_register": 427},
}
SOCKET = {"x86_64": 41, "aarch64": 198}
ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}


def run_bpf(prog, arch: int, nr: int, arg0: int = 0) -> int:
    """A classic-BPF interpreter for the instructions the filter uses, over struct seccomp_data."""
    data = {0: nr, 4: arch, 16: arg0 & 0xFFFFFFFF}
    acc, pc = 0, 0
    for _ in range(len(prog) + 1):  # no loops in BPF: each step moves forward
        code, jt, jf, k = prog[pc]
        if code == 0x20:  # ld [k]
            acc, pc = data[k], pc + 1
        elif code in (0x15, 0x25, 0x35):  # jeq, jgt, jge
            taken = {0x15: acc == k, 0x25: acc > k, 0x35: acc >= k}[code]
            pc = pc + 1 + (jt if taken else jf)
        elif code == 0x06:
            return k
        else:
            raise AssertionError(f"unexpected instruction {code:#x}")
    raise AssertionError("the program did not return")


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_exactly_the_kernel_state_calls_are_denied(machine):
    prog = iso.seccomp_instructions(machine)
    denied = set(DENIED[machine].values())
    for nr in range(600):
        if nr == SOCKET[machine]:
            continue
        expected = EPERM if nr in denied else ALLOW
        assert run_bpf(prog, ARCH[machine], nr) == expected, (machine, nr)


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_only_unix_sockets_are_denied(machine):
    prog = iso.seccomp_instructions(machine)
    assert run_bpf(prog, ARCH[machine], SOCKET[machine], AF_UNIX) == EPERM
    assert run_bpf(prog, ARCH[machine], SOCKET[machine], AF_INET) == ALLOW
    assert run_bpf(prog, ARCH[machine], SOCKET[machine], AF_UNIX | (1 << 32)) == EPERM  # the high half is not read


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_a_foreign_abi_is_denied_whatever_the_call(machine):
    prog = iso.seccomp_instructions(machine)
    foreign = 0x40000003  # i386
    for nr in (0, 1, 41, 102, 117, 500):
        assert run_bpf(prog, foreign, nr) == EPERM


def test_x32_calls_are_denied_on_x86_64():
    prog = iso.seccomp_instructions("x86_64")
    for nr in (0, 1, 29, 41, 512):
        assert run_bpf(prog, ARCH["x86_64"], 0x40000000 | nr) == EPERM


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_every_jump_lands_inside_the_program(machine):
    prog = iso.seccomp_instructions(machine)
    for i, (code, jt, jf, _k) in enumerate(prog):
        assert 0 <= jt <= 255 and 0 <= jf <= 255
        if code in (0x15, 0x25, 0x35):
            assert i + 1 + max(jt, jf) < len(prog)
    assert prog[-1][0] == 0x06 and prog[-2][0] == 0x06
