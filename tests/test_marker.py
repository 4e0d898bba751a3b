"""mrgrpo.marker: one line per (component, process) on stderr, so a training log proves where our code ran."""

from __future__ import annotations

from mrgrpo import marker
from mrgrpo.reward import compute_score


def test_each_component_marks_once(capsys):
    marker._seen.clear()
    for _ in range(3):
        marker.mark_once("a", x=1)
        marker.mark_once("b")
    out = capsys.readouterr().err
    assert out.count("MRGRPO_MARKER component=a pid=") == 1 and "x=1" in out
    assert out.count("MRGRPO_MARKER component=b pid=") == 1


def test_reward_prints_its_marker(capsys):
    marker._seen.clear()
    gt = {"inputs": ["1\n"], "outputs": ["1\n"]}
    compute_score("apps_plus", "no code", gt, extra_info={"final_code": ""})
    compute_score("apps_plus", "no code", gt, extra_info={"final_code": ""})
    out = capsys.readouterr().err
    assert out.count("MRGRPO_MARKER component=reward pid=") == 1 and "has_final_code=True" in out
