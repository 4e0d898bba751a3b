"""Without namespaces or Landlock the sandbox still runs honest programs, warns once, and keeps the runner safe."""

from __future__ import annotations

import logging
import os
import textwrap

import pytest

from mrgrpo.sandbox import Job, Limits, Verdict, run
from mrgrpo.sandbox import pool as pool_mod


@pytest.fixture(params=[{"namespaces"}, {"landlock"}, {"namespaces", "landlock"}], ids=lambda d: "+".join(sorted(d)))
def degraded(request, monkeypatch):
    pool_mod.shutdown()
    monkeypatch.setattr(pool_mod, "DISABLE", set(request.param))
    yield request.param
    pool_mod.shutdown()


def test_degraded_mode_judges_and_warns_once(degraded, caplog):
    with caplog.at_level(logging.WARNING, logger="mrgrpo.sandbox"):
        assert run(Job(code="print(int(input()) + 1)", inputs=["1", "2"], outputs=["2", "3"])).verdict is Verdict.AC
        assert run(Job(code="print(2)", inputs=[""], outputs=["1"])).verdict is Verdict.WA
    warnings = [r.getMessage() for r in caplog.records if r.name == "mrgrpo.sandbox"]
    assert len(warnings) == len(degraded)  # one line per missing layer, once per process


def test_degraded_mode_contains_kill_all_and_writes(degraded, tmp_path):
    target = tmp_path / "pwned"
    code = f"""
        import os, signal
        try: os.kill(-1, signal.SIGKILL)
        except OSError: pass
        try: open({str(target)!r}, 'w').write('x')
        except OSError: pass
        print('done')
    """
    result = run(Job(code=textwrap.dedent(code), inputs=[""], outputs=["x"], limits=Limits(time_s=1, wall_s=2)))
    assert result.verdict is Verdict.WA
    assert not target.exists()
    assert os.getpid() > 0  # still here
