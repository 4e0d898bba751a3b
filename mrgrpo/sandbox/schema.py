"""The data types of the sandbox API: verdicts, limits, jobs and results (pure, no I/O)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class Verdict(str, Enum):
    """Outcome of one test or of a whole job.

    Everything the program does maps to AC..NO_CODE; INFRA means the sandbox itself failed (never the program).
    """

    AC = "AC"  # accepted: exit status 0 and the output equals the expected output
    WA = "WA"  # wrong answer (including a call-mode return value that is not plain JSON)
    RE = "RE"  # runtime error: exception, non-zero exit status, killed by a signal
    TLE = "TLE"  # CPU time over Limits.time_s, or wall time over Limits.wall_s
    MLE = "MLE"  # MemoryError (the data/address-space limit was hit)
    OLE = "OLE"  # stdout (or the call-mode result) over Limits.output_bytes
    SE = "SE"  # the program does not compile
    NO_CODE = "NO_CODE"  # empty program
    INFRA = "INFRA"  # the sandbox failed (after one retry); not the program's fault

    def __str__(self) -> str:
        return self.value


# The one rule for a wall limit that is not given: this many times the CPU limit (the defaults: 4 CPU-s, 8 wall-s).
# The wall limit must leave room for the CPU limit, or TLE by CPU could never happen.
WALL_PER_CPU = 2.0


@dataclass(frozen=True)
class Limits:
    """Per-test resource limits. Defaults follow common judges (4-6 s, 256 MiB-1 GiB); see docs/sandbox.md.

    ``wall_s`` left out (None) is ``WALL_PER_CPU * time_s``; a ``wall_s`` below ``time_s`` is refused.

        >>> Limits().wall_s, Limits(time_s=1).wall_s, Limits(time_s=1, wall_s=3).wall_s
        (8.0, 2.0, 3)
    """

    time_s: float = 4.0  # CPU seconds (user + system) of the test process; RLIMIT_CPU is rounded up to whole seconds
    wall_s: float | None = None  # wall-clock seconds before the whole test (its PID namespace) is killed; None: rule
    memory_mb: int = 1024  # RLIMIT_DATA (heap, anonymous mappings, thread stacks); RLIMIT_AS is this + 1 GiB
    output_bytes: int = 32 << 20  # stdout (stdio mode) or the JSON return value (call mode); more is OLE
    file_bytes: int = 16 << 20  # RLIMIT_FSIZE: largest file the program may write in its temporary directory
    nproc: int = 32  # processes + threads the test may have at once (RLIMIT_NPROC of a per-slot uid/user ns)

    def __post_init__(self) -> None:
        if not self.time_s > 0:
            raise ValueError(f"Limits.time_s must be > 0, got {self.time_s!r}")
        if self.wall_s is None:
            object.__setattr__(self, "wall_s", WALL_PER_CPU * float(self.time_s))
        for name in ("wall_s", "memory_mb", "output_bytes", "file_bytes", "nproc"):
            if not getattr(self, name) > 0:
                raise ValueError(f"Limits.{name} must be > 0, got {getattr(self, name)!r}")
        if self.wall_s < self.time_s:
            raise ValueError(f"Limits.wall_s ({self.wall_s!r}) is below Limits.time_s ({self.time_s!r}): the CPU limit "
                             f"could never be reached; give wall_s >= time_s, or leave wall_s out for "
                             f"{WALL_PER_CPU:g} x time_s")

    @classmethod
    def of(cls, **given) -> Limits:
        """``Limits`` from optional settings (a key whose value is None takes its default, and a missing wall_s
        the rule): the one way the loop, the reward, the CLI and the data build their limits."""
        return cls(**{k: v for k, v in given.items() if v is not None})


@dataclass(frozen=True)
class Job:
    """One program and its tests. `fn_name=None` is stdin/stdout mode; otherwise call mode.

    stdio: `inputs[i]` is the stdin text, `outputs[i]` the expected stdout text.
    call: `inputs[i]` is the argument list, `outputs[i]` the expected return value (plain JSON, unwrapped).
    The entry point is `Solution().<fn_name>` when the program defines `class Solution` with that method,
    else the top-level function `<fn_name>`.
    """

    code: str
    inputs: list
    outputs: list
    fn_name: str | None = None
    float_tol: float | None = None
    stop_on_first_failure: bool = True
    limits: Limits = field(default_factory=Limits)

    def __post_init__(self) -> None:
        if len(self.inputs) != len(self.outputs):
            raise ValueError(f"Job has {len(self.inputs)} inputs but {len(self.outputs)} outputs")
        if self.float_tol is not None and not self.float_tol >= 0:
            raise ValueError(f"float_tol must be >= 0, got {self.float_tol!r}")
        if self.fn_name is not None and not self.fn_name.isidentifier():
            raise ValueError(f"fn_name must be an identifier, got {self.fn_name!r}")


@dataclass(frozen=True)
class TestResult:
    __test__ = False  # not a pytest test class

    index: int
    verdict: Verdict
    time_s: float  # CPU seconds of the test process
    stdout: str  # what the program printed (truncated, for feedback); call mode: JSON of the return value
    stderr: str  # tail of stderr, for feedback


@dataclass(frozen=True)
class ExecResult:
    verdict: Verdict  # AC iff every test ran and passed; else the verdict of the first failing test
    passed: int
    total: int  # len(job.inputs)
    tests: tuple[TestResult, ...]  # the tests that ran, in order
    time_s: float  # wall seconds for the whole job, including waiting for a free slot
    detail: str  # short human message (INFRA reason, syntax error, first failure)
