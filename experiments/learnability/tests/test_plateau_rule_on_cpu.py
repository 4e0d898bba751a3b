"""The plateau rule (learnability.plateau): a list of (step, score) -> continue, plateau or cap."""

from __future__ import annotations

import pytest

from learnability.plateau import Rule, chunk_steps, decide


def _pts(*scores, every=500):
    return [(every * (i + 1), s) for i, s in enumerate(scores)]


def test_rising_scores_continue():
    d = decide(_pts(0.10, 0.20, 0.30, 0.40))
    assert d.status == "continue" and not d.final and (d.step, d.score) == (2000, 0.40)


def test_nothing_evaluated_or_too_few_points_continue():
    assert decide([]).status == "continue" and decide([]).step is None
    d = decide(_pts(0.40, 0.40))  # flat, but two checkpoints are fewer than the window of three
    assert d.status == "continue" and "only 2 of 3" in d.why


def test_flat_after_the_best_for_half_again_its_steps_is_the_plateau():
    # best 0.40 first reached at 2000; the last three (2000, 2500, 3000) have 0.40: fires at 3000 = 1.5 x 2000
    d = decide(_pts(0.10, 0.30, 0.35, 0.40, 0.39, 0.40))
    assert d.status == "plateau" and d.final
    assert (d.step, d.score, d.decided_at) == (2000, 0.40, 3000)  # the best, first reached, not the last


def test_the_best_within_the_last_window_still_needs_half_again_its_steps():
    # best 0.40 first reached at 1500: flat from there, but the rule waits for step 2250 or later
    pts = _pts(0.10, 0.30, 0.40, 0.40, 0.40)
    assert decide(pts[:4]).status == "continue"  # 2000 < 2250
    assert (decide(pts).status, decide(pts).step) == ("plateau", 1500)  # 2500 >= 2250
    assert decide([(1000, 0.2), (2000, 0.4), (2500, 0.4), (2999, 0.4)]).status == "continue"
    assert decide([(1000, 0.2), (2000, 0.4), (2500, 0.4), (3000, 0.4)]).status == "plateau"


def test_the_tolerance_is_two_points_inclusive():
    # best 0.40 first reached at 2500; at 4000 (>= 3750) the last three are 3000-4000: their best 0.38 is 2 points
    # below (flat), 0.3799 is not
    rising = [0.10, 0.20, 0.30, 0.35, 0.40]
    assert decide(_pts(*rising, 0.30, 0.38, 0.37)).status == "plateau"
    d = decide(_pts(*rising, 0.30, 0.3799, 0.37))
    assert d.status == "continue" and "below the best" in d.why
    thirds = [(500, 0.1), (1000, 0.2), (1500, 0.25), (2000, 0.3), (2500, 94 / 300)]  # 2 points exactly, in 300ths
    assert decide([*thirds, (3000, 88 / 300), (3500, 88 / 300), (4000, 88 / 300)]).status == "plateau"


def test_a_new_best_moves_the_step_the_run_must_go_past():
    flat = [(1000, 0.30), (1500, 0.30), (2000, 0.30)]
    assert decide(flat).status == "plateau"  # best first reached at 1000, flat to 2000 >= 1500
    jump = [(1000, 0.30), (1500, 0.40), (2000, 0.39)]
    assert decide(jump).status == "continue"  # the best moved to 1500: the run must reach 2250
    d = decide([*jump, (2500, 0.40)])
    assert (d.status, d.step, d.decided_at) == ("plateau", 1500, 2500)


def test_the_first_prefix_that_fires_decides():
    """A checkpoint trained ahead and evaluated after the rule fired does not move the decision."""
    fired = decide(_pts(0.10, 0.40, 0.39, 0.40))  # best 0.40 at 1000; fires at 1500 (>= 1.5 x 1000)
    assert (fired.status, fired.step, fired.decided_at) == ("plateau", 1000, 1500)
    later = decide(_pts(0.10, 0.40, 0.39, 0.40, 0.55))
    assert (later.status, later.step, later.decided_at) == ("plateau", 1000, 1500)


def test_the_cap_stops_and_says_not_at_plateau():
    rule = Rule(max_steps=2000)
    d = decide(_pts(0.10, 0.20, 0.30, 0.40), rule)
    assert d.status == "cap" and d.final and "NOT AT PLATEAU" in d.why and (d.step, d.score) == (2000, 0.40)
    assert decide(_pts(0.10, 0.20, 0.30), rule).status == "continue"
    # the rule firing at the cap is a plateau, not the cap
    assert decide(_pts(0.40, 0.40, 0.40, 0.40), Rule(max_steps=2000)).status == "plateau"


def test_the_rules_numbers_are_options():
    pts = _pts(0.10, 0.20, 0.30, 0.35, 0.40, 0.35, 0.36, 0.37)  # best 0.40 at 2500; 3000-4000: 3 points below
    assert decide(pts).status == "continue"
    assert decide(pts, Rule(tolerance=0.03)).status == "plateau"
    assert decide(pts[:7], Rule(window=2, tolerance=0.04)).status == "continue"  # 3500 < 3750
    assert decide(_pts(0.2, 0.4, 0.4), Rule(window=2, extra=0.5)).status == "plateau"  # 1500 >= 1.5 x 1000
    assert decide(_pts(0.2, 0.4, 0.4), Rule(window=2, extra=1.0)).status == "continue"  # 1500 < 2 x 1000
    with pytest.raises(ValueError):
        Rule(window=0)


def test_points_in_any_order_and_no_step_twice():
    assert decide(list(reversed(_pts(0.10, 0.40, 0.39, 0.40)))).decided_at == 1500
    with pytest.raises(ValueError, match="twice"):
        decide([(500, 0.1), (500, 0.2)])


def test_the_chunk_grid_ends_at_the_cap():
    assert chunk_steps(500, 2000) == [500, 1000, 1500, 2000]
    assert chunk_steps(500, 1800) == [500, 1000, 1500, 1800]
    with pytest.raises(ValueError):
        chunk_steps(0, 100)
