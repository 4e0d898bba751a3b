"""The sandbox also holds when its caller is an unprivileged user (user namespaces replace root).

Runs a small judge script as uid 65534 under a system interpreter outside /root (the venv's interpreter
lives under /root, mode 0700, which an unprivileged user cannot execute). Skipped unless we are root and
`setpriv` and /usr/bin/python3 exist. One adversarial property per test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

SYSTEM_PYTHON = "/usr/bin/python3"
REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv") or not os.access(SYSTEM_PYTHON, os.X_OK),
    reason="needs root (to switch to an unprivileged uid), setpriv and /usr/bin/python3",
)

CASES = {
    "honest": ("print(int(input()) * 2)", "21\n", "42\n"),
    "network": ("import socket\ns = socket.socket()\ns.settimeout(1)\ns.connect(('127.0.0.1', 22))\nprint(1)",
                "", "1\n"),
    "kill_all": ("import os, signal\nos.kill(-1, signal.SIGKILL)\nprint(1)", "", "1\n"),
    "write_outside": ("open({path!r}, 'w').write('x')\nprint(1)", "", "1\n"),
    "fork_bomb": ("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass", "", "x\n"),
    "memory_flood": ("x = bytearray(4 << 30)\nprint(1)", "", "1\n"),
}
_SYSV_PROBE = ("import ctypes\nlibc = ctypes.CDLL(None)\nif libc.shmget(0x4D5248, 4096, 0) >= 0:\n    print('found')\n"
               "else:\n    libc.shmget(0x4D5248, 4096, 0o1666)\n    print('none')", "", "none\n")
CASES["sysv_first"] = CASES["sysv_second"] = _SYSV_PROBE  # the second run must not find the first one's segment
# The slot directory above a test's tmpfs (owned by the namespace's root, which a test process still is): a file left
# there would reach the next test; the second run must not find the first one's.
_ABOVE_PROBE = ("import os\nif os.path.exists('../left'):\n    print('found')\nelse:\n    try:\n"
                "        open('../left', 'w')\n    except OSError:\n        pass\n    print('none')", "", "none\n")
CASES["above_first"] = CASES["above_second"] = _ABOVE_PROBE

SCRIPT = """
import json, sys
sys.path.insert(0, {repo!r})
from mrgrpo.sandbox import Job, Limits, run
cases = json.loads(sys.argv[1])
out = {{}}
for name, (code, stdin, expected) in cases.items():
    r = run(Job(code=code, inputs=[stdin], outputs=[expected], limits=Limits(time_s=2, wall_s=4)))
    out[name] = r.verdict.value
from mrgrpo.sandbox.pool import get_pool
out["_layers"] = get_pool()._slots[0].layers
print("RESULT " + json.dumps(out))
"""


def _copy_sandbox_package(dest: Path) -> None:
    """The checkout may sit where uid 65534 cannot read it: copy the (stdlib-only) sandbox package."""
    (dest / "mrgrpo").mkdir()
    shutil.copy(REPO / "mrgrpo" / "__init__.py", dest / "mrgrpo" / "__init__.py")
    shutil.copytree(REPO / "mrgrpo" / "sandbox", dest / "mrgrpo" / "sandbox",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for path in dest.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)


@pytest.fixture(scope="module")
def verdicts():
    shared = Path(tempfile.mkdtemp(prefix="mrgrpo-unpriv-"))  # pytest's own tmp dirs are 0700
    shared.chmod(0o777)
    _copy_sandbox_package(shared)
    target = shared / "written_by_sandboxed_program"
    cases = {k: (code.replace("{path!r}", repr(str(target))), i, o) for k, (code, i, o) in CASES.items()}
    script = shared / "judge.py"
    script.write_text(SCRIPT.format(repo=str(shared)))
    script.chmod(0o644)
    try:
        proc = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "env", "-i", "PATH=/usr/bin:/bin",
             f"HOME={shared}", SYSTEM_PYTHON, str(script), json.dumps(cases)],
            capture_output=True, text=True, timeout=300,
        )
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        assert proc.returncode == 0 and lines, f"judge failed: {proc.stderr[-2000:]}"
        yield json.loads(lines[-1][7:]), target
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def test_honest_program_passes_unprivileged(verdicts):
    assert verdicts[0]["honest"] == "AC"


def test_no_network_unprivileged(verdicts):
    assert verdicts[0]["network"] == "RE"


def test_kill_all_stays_inside_unprivileged(verdicts):
    # kill(-1) found no process to signal (ESRCH: RE); had it signalled anything it would print 1 (AC)
    assert verdicts[0]["kill_all"] == "RE"


def test_no_writes_outside_unprivileged(verdicts):
    assert verdicts[0]["write_outside"] == "RE" and not verdicts[1].exists()


def test_fork_bomb_contained_unprivileged(verdicts):
    assert verdicts[0]["fork_bomb"] == "TLE"


def test_memory_flood_contained_unprivileged(verdicts):
    assert verdicts[0]["memory_flood"] == "MLE"


def test_sysv_ipc_does_not_survive_a_test_unprivileged(verdicts):
    assert verdicts[0]["sysv_first"] == verdicts[0]["sysv_second"] == "AC"


def test_nothing_left_above_a_test_reaches_the_next_unprivileged(verdicts):
    assert verdicts[0]["above_first"] == "AC" and verdicts[0]["above_second"] == "AC", verdicts[0]


def test_round_two_layers_hold_unprivileged(verdicts):
    layers = verdicts[0]["_layers"]
    assert layers["user_ns"] and layers["ipc_ns"] and layers["minimal_root"], layers
    assert layers["seccomp"] or os.uname().machine not in ("x86_64", "aarch64"), layers
