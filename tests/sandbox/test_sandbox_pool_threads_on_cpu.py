"""The pool's own set-up is safe when many threads start slots at once (mrgrpo/sandbox/pool.py).

A batch starts its slots from several threads at the same moment. Whatever each start reads from the interpreter
must not break under that: CI once lost a whole batch to `sysconfig`'s first call, which is not thread-safe on
Python 3.11 (one thread iterated its config dict while another was still filling it).
"""

from __future__ import annotations

import sys
import sysconfig
import threading

from mrgrpo.sandbox import pool


def _forget_sysconfig() -> None:
    """Back to the interpreter's state before sysconfig's first call (its caches are private; reset all we know)."""
    sysconfig._CONFIG_VARS = None
    if hasattr(sysconfig, "_CONFIG_VARS_INITIALIZED"):
        sysconfig._CONFIG_VARS_INITIALIZED = False
    pool._site_paths.cache_clear()


def test_site_packages_from_many_threads_at_once_never_fails():
    expected = pool._site_packages()
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: the race shows within a few rounds
    errors: list[BaseException] = []
    answers: list[list[str]] = []
    try:
        for _ in range(100):
            _forget_sysconfig()
            barrier = threading.Barrier(8)

            def start(barrier=barrier):
                barrier.wait()
                try:
                    answers.append(pool._site_packages())
                except BaseException as exc:  # the failure under test: recorded, asserted below
                    errors.append(exc)

            threads = [threading.Thread(target=start) for _ in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    finally:
        sys.setswitchinterval(interval)
    assert not errors, errors[:3]
    assert all(a == expected for a in answers)
