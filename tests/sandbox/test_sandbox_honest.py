"""Honest programs that naive graders fail must be accepted: one way of reading input or exiting per test."""

from __future__ import annotations

import textwrap

import pytest

from mrgrpo.sandbox import Job, Verdict, run

STDIN = "3\n1 2 3\n"
EXPECTED = "6\n"


def accepted(code: str, stdin: str = STDIN, expected: str = EXPECTED) -> None:
    result = run(Job(code=textwrap.dedent(code), inputs=[stdin], outputs=[expected]))
    assert result.verdict is Verdict.AC, result


def test_input():
    accepted("n = int(input())\nprint(sum(map(int, input().split())))")


def test_sys_stdin_buffer():
    accepted("import sys\ndata = sys.stdin.buffer.read().split()\nprint(sum(map(int, data[1:])))")


def test_open_0():
    accepted("data = open(0).read().split()\nprint(sum(map(int, data[1:])))")


def test_os_read_0():
    accepted("""
        import os
        chunks = []
        while True:
            b = os.read(0, 1 << 16)
            if not b: break
            chunks.append(b)
        print(sum(map(int, b''.join(chunks).split()[1:])))
    """)


def test_for_line_in_sys_stdin():
    accepted("""
        import sys
        lines = [line for line in sys.stdin]
        print(sum(map(int, lines[1].split())))
    """)


@pytest.mark.parametrize("size", [0, 1, 4095, 4096, 4097, 65536, 65537, 1 << 20])
def test_stdin_of_any_size_arrives_whole(size):
    # small inputs are written before the test starts, larger ones while it runs: both arrive whole, then EOF
    data = ("7" * (size - 1) + "\n") if size else ""
    accepted("import sys\ndata = sys.stdin.buffer.read()\nprint(len(data), data.count(b'7'))", stdin=data,
             expected=f"{size} {max(size - 1, 0)}\n")


@pytest.mark.parametrize("lines", [10_000, 300_000])
def test_output_larger_than_a_pipe_arrives_whole(lines):
    # more than a pipe holds (64 KiB) before the sandbox starts reading as output comes: it waits, then arrives
    expected = "".join(f"{i}\n" for i in range(lines))
    accepted(f"import sys\nsys.stdout.write(''.join(f'{{i}}\\n' for i in range({lines})))", stdin="", expected=expected)


def test_sys_stdin_readline():
    accepted("import sys\nsys.stdin.readline()\nprint(sum(map(int, sys.stdin.readline().split())))")


def test_dev_stdin():
    accepted("data = open('/dev/stdin').read().split()\nprint(sum(map(int, data[1:])))")


def test_exit_after_print():
    accepted("input()\nprint(sum(map(int, input().split())))\nexit()")


def test_quit_after_print():
    accepted("input()\nprint(sum(map(int, input().split())))\nquit()")


def test_sys_exit_0_after_print():
    accepted("import sys\ninput()\nprint(sum(map(int, input().split())))\nsys.exit(0)")


def test_sys_exit_none_inside_function():
    accepted("""
        import sys
        def main():
            input(); print(sum(map(int, input().split()))); sys.exit()
        main()
    """)


def test_deep_recursion_with_thread_stack_size():
    accepted("""
        import sys, threading
        sys.setrecursionlimit(1 << 20)
        threading.stack_size(1 << 27)
        def depth(n): return 0 if n == 0 else 1 + depth(n - 1)
        def main():
            input(); input()
            print(depth(200000) // 200000 * 6)
        t = threading.Thread(target=main); t.start(); t.join()
    """)


def test_thread_not_joined_still_finishes():
    accepted("""
        import threading, time
        def main():
            time.sleep(0.05); input(); print(sum(map(int, input().split())))
        threading.Thread(target=main).start()
    """)


def test_integers_over_4300_digits():
    digits = "3" + "0" * 5000  # 3 * 10**5000 (the test itself stays under the parent's int/str limit)
    accepted("n = int(input())\nprint(n * n + 1)", stdin=digits + "\n", expected="9" + "0" * 9999 + "1\n")


def test_stderr_noise_is_not_an_error():
    accepted("""
        import sys
        print('debug: starting', file=sys.stderr)
        input(); print(sum(map(int, input().split())))
        sys.stderr.write('x' * 100000)
    """)


def test_reads_until_eof_without_hanging():
    accepted("import sys\nprint(sum(int(x) for line in sys.stdin.read().splitlines()[1:] for x in line.split()))")


def test_input_after_eof_raises_eoferror_not_hang():
    result = run(Job(code="input(); input(); input()", inputs=[STDIN], outputs=[""]))
    assert result.verdict is Verdict.RE and "EOFError" in result.tests[0].stderr


def test_if_name_main_guard():
    accepted("""
        def main():
            input(); print(sum(map(int, input().split())))
        if __name__ == '__main__':
            main()
    """)


def test_writes_in_its_own_temp_dir():
    accepted("""
        import os, tempfile
        with open('scratch.txt', 'w') as f: f.write(input())
        with tempfile.TemporaryFile() as f: f.write(b'x')
        print(sum(map(int, input().split())))
    """)


def test_common_modules_import():
    accepted("""
        import bisect, collections, decimal, fractions, functools, heapq, itertools, math, random, re, string
        import array, copy, datetime, json, operator, statistics, typing, time
        input(); print(sum(map(int, input().split())))
    """)


def test_numpy_imports_when_installed():
    pytest.importorskip("numpy")
    accepted("import numpy as np\ninput()\nprint(int(np.array(input().split(), dtype=np.int64).sum()))")


def test_crlf_and_no_final_newline_in_expected():
    accepted("input(); print(sum(map(int, input().split())))", expected="6")
    accepted("input(); print(sum(map(int, input().split())))", expected="6 \r\n\r\n")


def test_unicode_output():
    accepted("input(); input(); print('héllo ✓')", expected="héllo ✓\n")


def test_each_test_gets_fresh_randomness():
    """Tests are forked from one zygote without CPython's at-fork reseeding: the program must still see a fresh
    `random` state and fresh os.urandom each time (two tests of one job, and two jobs, never print the same)."""
    code = "import random, os\nprint(random.getrandbits(64), os.urandom(8).hex())"
    seen = []
    for _ in range(2):
        result = run(Job(code=code, inputs=["", ""], outputs=["x", "x"], stop_on_first_failure=False))
        seen += [t.stdout for t in result.tests]
    assert len(seen) == 4 and all(s.strip() for s in seen)
    assert len({s.split()[0] for s in seen}) == 4 and len({s.split()[1] for s in seen}) == 4


def test_output_a_test_left_unflushed_never_reaches_a_later_test():
    """sys.stdin/stdout/stderr are made once in the zygote and copied into every test: each test must get them
    pristine. A test that writes and exits without flushing loses its text; the next test must not print it."""
    code = ("import sys, os\ns = input()\nsys.stdout.write('seen:' + s)\nsys.stderr.write('err:' + s)\n"
            "sys.stdin.read()\nif s == 'a':\n    os._exit(0)\n")
    result = run(Job(code=code, inputs=["a\n", "b\n", "a\n", "b\n"], outputs=["", "seen:b", "", "seen:b"],
                     stop_on_first_failure=False))
    assert [t.stdout for t in result.tests] == ["", "seen:b", "", "seen:b"]
    assert all("err:a" not in t.stderr for t in result.tests[1::2])  # stderr is line-buffered: 'err:b' only
    assert result.verdict == Verdict.AC
