"""Run untrusted Python programs against tests, one fresh process per test, and judge them in the parent.

    >>> from mrgrpo.sandbox import Job, run
    >>> run(Job(code="print(int(input()) * 2)", inputs=["21\\n"], outputs=["42\\n"])).verdict
    <Verdict.AC: 'AC'>

How it works: this (trusted) process keeps the expected outputs and does every comparison. A small pool of
pre-started workers (`python -I -S`, no test data, modules pre-imported) forks one child per test; the child
gets the program and ONE input, nothing else, and reports stdout / a JSON return value / its exit status.

Admission: at most one job per CPU of the node runs at once, across all processes (admission.py: flock'ed slot
files in /dev/shm; MRGRPO_SANDBOX_SLOTS overrides); limits count from admission.

What is isolated, per test (as root, on Linux >= 5.13; see docs/sandbox.md for the table):
  - memory of the parent: a separate process that never held expected outputs (stack-walking finds nothing;
    a call result crosses as JSON text, so no object of the program reaches the comparison);
  - processes: its own PID namespace, the program is PID 1; kill(-1), daemons and fork bombs stay inside and
    die with it; RLIMIT_NPROC on a uid of its own (one per live slot on the node) bounds forks;
  - kernel state: seccomp denies every call that makes state outliving a process (keyrings, SysV IPC, POSIX
    message queues), AF_UNIX sockets, io_uring and foreign syscall ABIs; the slot has its own IPC namespace (without
    seccomp, each test gets a fresh one, whose objects die with it);
  - CPU and memory of all its processes together: a slot cgroup (v2 or v1) where the cgroup fs is writable;
  - the file tree: a minimal root (read-only binds of the interpreter and its libraries), no host paths;
  - network: a network namespace with no usable interface, and Landlock denies TCP bind/connect;
  - filesystem: Landlock allows reading only the Python installation, shared libraries and a few devices,
    writing only a private size-limited tmpfs, unmounted after the test; no execve;
  - signals and abstract unix sockets outside its Landlock domain (Landlock scoping, ABI >= 6);
  - resources: CPU time, wall time, memory (RLIMIT_DATA, RLIMIT_AS backstop), file size, open files,
    stdout size (OLE), no core dumps; a scrubbed environment; stdin is a pipe that reaches EOF.
Unprivileged, a user namespace replaces root for the same layers (caps dropped in the child).

What is NOT isolated: CPU caches and timing side channels; the kernel itself (no seccomp filter, so a kernel
exploit escapes); reading the Python installation and site-packages (a program can import numpy, or read
those files); CPU and memory bandwidth shared with the host (no cgroup CPU quota). Where a layer is missing
(no namespaces, no Landlock, no cgroups, no seccomp) the pool logs one warning naming what is weaker.
"""

from .pool import shutdown
from .runner import run, run_async, run_batch
from .schema import WALL_PER_CPU, ExecResult, Job, Limits, TestResult, Verdict

__all__ = ["Verdict", "Limits", "WALL_PER_CPU", "Job", "TestResult", "ExecResult", "run", "run_async", "run_batch",
           "shutdown"]
