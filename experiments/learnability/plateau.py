"""SFT's plateau, found by a stated rule rather than a step count.

SFT trains in chunks of one run (a checkpoint every ``chunk`` steps, the learning-rate schedule over ``max_steps``);
each checkpoint's greedy held-out pass@1 on the no-demonstration split (``mrgrpo eval`` on val.parquet) is a point
``(step, score)``. After each evaluation, with the checkpoints evaluated so far in step order:

- **best** is the highest score so far, and **b** the step where it was first reached;
- **plateau** (stop) when at least ``window`` checkpoints are evaluated, the best score of the last ``window`` of them
  is within ``tolerance`` of the best so far (best - that <= tolerance), and the last evaluated step is at least
  ``(1 + extra) x b``: nothing new for a further ``extra`` (50%) of the steps it took to reach the best;
- else **cap** (stop, *not at plateau*) when the last evaluated step is ``max_steps`` or more;
- else **continue** (train the next chunk).

Defaults: ``window`` 3, ``tolerance`` 0.02 (2 points), ``extra`` 0.5, ``max_steps`` 6000, checkpoints every 500 steps.

The rule is applied to the prefixes of the points in step order and the first prefix that stops decides: a checkpoint
trained ahead while the one before it was being evaluated changes nothing once the rule has fired.

**The plateau checkpoint is the best one** (step ``b`` of the deciding prefix), not the last: it is the strongest SFT
model the run found, so GRPO and the control both start from the most SFT could give, which makes "GRPO - start" a
comparison with SFT at its highest rather than at a dip. Choosing it on val.parquet flatters the start there (the
maximum of noisy scores); the second held-out set, val2.parquet, never took part in the choice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

EPS = 1e-9  # 94/300 - 88/300 is 2 points, not 2.0000000000000018


@dataclass(frozen=True)
class Rule:
    window: int = 3
    tolerance: float = 0.02
    extra: float = 0.5
    max_steps: int = 6000

    def __post_init__(self):
        if self.window < 1 or self.tolerance < 0 or self.extra < 0 or self.max_steps < 1:
            raise ValueError(f"a plateau rule needs window >= 1, tolerance >= 0, extra >= 0, max_steps >= 1: {self}")

    def text(self) -> str:
        return (f"best of the last {self.window} evaluated checkpoints within {100 * self.tolerance:g} points of the "
                f"best so far, and at least {100 * self.extra:g}% more steps than where that best was first reached; "
                f"cap {self.max_steps} steps")


@dataclass(frozen=True)
class Decision:
    status: str  # "plateau", "cap" (stopped, not at plateau) or "continue"
    step: int | None  # the plateau checkpoint: the best so far at the deciding evaluation (None before any)
    score: float | None  # its score
    decided_at: int | None  # the last step of the deciding prefix (the last evaluated step when continuing)
    recent_best: float | None  # the best of the last `window` scores of that prefix
    why: str

    @property
    def final(self) -> bool:
        return self.status != "continue"


def _one(points: list[tuple[int, float]], rule: Rule) -> Decision:
    best_step, best = max(points, key=lambda p: (p[1], -p[0]))  # the highest, first reached
    last_step = points[-1][0]
    recent = max(score for _, score in points[-rule.window:])
    enough = len(points) >= rule.window
    flat = best - recent <= rule.tolerance + EPS
    far = last_step >= (1 + rule.extra) * best_step - EPS
    if enough and flat and far:
        return Decision("plateau", best_step, best, last_step, recent,
                        f"best {100 * best:.1f} (step {best_step}); last {rule.window} checkpoints' best "
                        f"{100 * recent:.1f}, within {100 * rule.tolerance:g} points; step {last_step} >= "
                        f"{1 + rule.extra:g} x {best_step}")
    missing = ([f"only {len(points)} of {rule.window} checkpoints evaluated"] if not enough else []) + (
        [f"last {rule.window} checkpoints' best {100 * recent:.1f} is {100 * (best - recent):.1f} points below the "
         f"best {100 * best:.1f}"] if not flat else []) + (
        [f"step {last_step} < {1 + rule.extra:g} x {best_step} (the best's step)"] if not far else [])
    if last_step >= rule.max_steps:
        return Decision("cap", best_step, best, last_step, recent,
                        f"NOT AT PLATEAU: the cap of {rule.max_steps} steps was reached ({'; '.join(missing)})")
    return Decision("continue", best_step, best, last_step, recent, "; ".join(missing))


def decide(points: Sequence[tuple[int, float]], rule: Rule = Rule()) -> Decision:
    """The rule on ``(step, score)`` points (scores as fractions, any order; steps distinct): the first prefix in step
    order that stops decides, else the whole says continue."""
    ordered = sorted((int(step), float(score)) for step, score in points)
    steps = [step for step, _ in ordered]
    if len(set(steps)) != len(steps):
        raise ValueError(f"a step evaluated twice: {steps}")
    if not ordered:
        return Decision("continue", None, None, None, None, "no checkpoint evaluated yet")
    for n in range(1, len(ordered) + 1):
        decision = _one(ordered[:n], rule)
        if decision.final:
            return decision
    return decision


def chunk_steps(chunk: int, max_steps: int) -> list[int]:
    """The steps SFT stops at to be evaluated: every ``chunk`` steps, and ``max_steps`` itself."""
    if chunk < 1 or max_steps < 1:
        raise ValueError(f"chunk and max_steps must be >= 1, got {chunk} and {max_steps}")
    return sorted({*range(chunk, max_steps, chunk), max_steps})
