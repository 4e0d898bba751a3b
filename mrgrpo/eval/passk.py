"""The unbiased pass@k estimator (Chen et al. 2021, "Evaluating Large Language Models Trained on Code") and its
aggregation over problems.

For one problem with ``n`` samples of which ``c`` are correct, pass@k = 1 - C(n - c, k) / C(n, k), the probability
that at least one of ``k`` samples drawn without replacement from the ``n`` is correct. The ratio of binomials is
computed as the product prod_{i = n - c + 1}^{n} (1 - k / i), which never forms a large binomial coefficient.

    >>> pass_at_k(10, 0, 1), pass_at_k(10, 10, 5), pass_at_k(5, 1, 5)
    (0.0, 1.0, 1.0)
    >>> round(pass_at_k(10, 3, 1), 6), round(pass_at_k(4, 2, 2), 6)
    (0.3, 0.833333)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem: ``n`` samples, ``c`` of them correct, ``1 <= k <= n``."""
    n, c, k = int(n), int(c), int(k)
    if n < 1:
        raise ValueError(f"pass@k needs at least one sample, got n={n}")
    if not 0 <= c <= n:
        raise ValueError(f"pass@k: the number correct c={c} must be in [0, n={n}]")
    if not 1 <= k <= n:
        raise ValueError(f"pass@k: k={k} must be in [1, n={n}]")
    if n - c < k:  # every k-subset holds a correct sample
        return 1.0
    prob_all_wrong = 1.0
    for i in range(n - c + 1, n + 1):
        prob_all_wrong *= 1.0 - k / i
    return 1.0 - prob_all_wrong


def mean_pass_at_k(counts: Iterable[tuple[int, int]], k: int) -> float | None:
    """Mean over problems of pass@k; ``counts`` holds (n, c) per problem. None when there are no problems."""
    values = [pass_at_k(n, c, k) for n, c in counts]
    return sum(values) / len(values) if values else None


def parse_ks(text: str | Sequence[int], n: int) -> list[int]:
    """``"1,5,10"`` -> [1, 5, 10] (sorted, unique); every k must be in [1, n]."""
    raw = text.split(",") if isinstance(text, str) else list(text)
    ks = sorted({int(str(k).strip()) for k in raw if str(k).strip()})
    if not ks:
        raise ValueError("--k: no value given")
    bad = [k for k in ks if not 1 <= k <= n]
    if bad:
        raise ValueError(f"--k {bad}: every k must be in [1, n={n}] (raise --n or drop them)")
    return ks
