"""mrGRPO's one metrics vocabulary: per-sample statistics (reward dict keys), the rates built from them, and the
per-batch dashboard (``mrgrpo/...``).

Pure functions over plain dicts: no verl, no torch. Each metric is defined once, here, and read by three consumers:

- ``mrgrpo.reward.compute_score`` merges :func:`sample_stats` into its returned dict, so every number below is
  also a numeric reward key; verl turns those into ``val-aux/<data_source>/<key>/...`` validation metrics.
- ``mrgrpo.sampler.MrGRPOReplayBuffer`` (and the agent-loop manager) reads each sampled trajectory's
  ``extra_fields`` and logs :func:`batch_metrics` with every training step.
- ``mrgrpo eval`` (`mrgrpo.eval.report`) computes each sample's :func:`trajectory_stats` from its record and reports
  the same rates (:func:`fix_rate`, :func:`first_public_pass_rate`, ...) and means (:func:`trained_mean`); only its
  pass@k (`mrgrpo.eval.passk`) is its own.

Row = a trajectory's ``extra_fields`` as stored by verl 0.9.1: the agent loop's keys (``LOOP_FIELDS``) plus
``extra_fields["reward_extra_info"]`` = the whole reward dict (``REWARD_KEYS`` + ``SAMPLE_STAT_KEYS``).
:func:`flatten_row` merges the two levels. Definitions of every metric: ``docs/metrics.md``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

Stats = Mapping[str, float]  # one sample's `sample_stats` / `trajectory_stats`

METRIC_PREFIX = "mrgrpo/"
# The key under which verl 0.9.1 stores the reward dict inside a trajectory's extra_fields
# (verl/experimental/agent_loop/agent_loop.py, _compute_score).
REWARD_EXTRA_INFO = "reward_extra_info"

# ---------------------------------------------------------------- agent loop extra_fields (fixed key set)
FINAL_CODE = "final_code"
PLAN = "plan"
PLAN_SOURCE = "plan_source"
ATTEMPTS = "attempts"
PUBLIC_PASS = "public_pass"
PUBLIC_VERDICTS = "public_verdicts"
STOP_REASON = "stop_reason"
ERROR = "error"
MODEL_TOKENS = "model_tokens"
INJECTED_TOKENS = "injected_tokens"
PLAN_TOKENS = "plan_tokens"
SANDBOX_S = "sandbox_s"
LOOP_FIELDS = (FINAL_CODE, PLAN, PLAN_SOURCE, ATTEMPTS, PUBLIC_PASS, PUBLIC_VERDICTS, STOP_REASON, ERROR,
               MODEL_TOKENS, INJECTED_TOKENS, PLAN_TOKENS, SANDBOX_S)

STOP_REASONS = ("passed", "rounds", "budget", "truncated", "no_public_tests", "infra", "error")
# A trajectory that stopped for one of these reasons gets no gradient (and does not move its group's baseline).
EXCLUDING_STOP_REASONS = ("infra", "error")
# Verdict names of mrgrpo.sandbox.Verdict, in order; NOT_RUN marks a public-test slot that was not run.
VERDICTS = ("AC", "WA", "RE", "TLE", "MLE", "OLE", "SE", "NO_CODE", "INFRA")
NOT_RUN = "NOT_RUN"
# A first attempt with one of these public verdicts "failed": the model got feedback it could act on.
FAILED_VERDICTS = ("WA", "RE", "TLE", "MLE", "OLE", "SE", "NO_CODE")

# ---------------------------------------------------------------- reward dict (mrgrpo.reward.compute_score)
SCORE = "score"
ACC = "acc"
PASS_RATE = "pass_rate"
VERDICT = "verdict"
HAS_CODE = "has_code"
INFRA = "infra"
REWARD_KEYS = (SCORE, ACC, PASS_RATE, VERDICT, "num_tests", "num_passed", "time_s", "format_ok", HAS_CODE,
               "length_term", INFRA)

# ---------------------------------------------------------------- sample_stats keys (merged into the reward dict)
# Floats, always all of them. None of these names is a field verl keeps in its batch / TransferQueue.
FIRST_PUBLIC_PASS = "first_public_pass"
FAILED_FIRST = "failed_first"
FIXED = "fixed"
PUBLIC_PASS_FINAL = "public_pass_final"
PUBLIC_PASS_HIDDEN_FAIL = "public_pass_hidden_fail"
BUDGET_CLIP = "budget_clip"
LOOP_INFRA = "loop_infra"
LOOP_ERROR = "loop_error"
EXCLUDED = "excluded"
SAMPLE_STAT_KEYS = (ATTEMPTS, FIRST_PUBLIC_PASS, FAILED_FIRST, FIXED, PUBLIC_PASS_FINAL, PUBLIC_PASS_HIDDEN_FAIL,
                    MODEL_TOKENS, INJECTED_TOKENS, PLAN_TOKENS, BUDGET_CLIP, LOOP_INFRA, LOOP_ERROR, EXCLUDED)


def excluded_from(stop_reason: str, infra: float) -> bool:
    """The one rule for "this trajectory gets no gradient": the sandbox failed (on the hidden tests: reward
    ``infra``; on the public tests: ``stop_reason == "infra"``) or the trajectory raised (``"error"``)."""
    return stop_reason in EXCLUDING_STOP_REASONS or float(infra) >= 0.5


def _loop_fields(extra_info: Mapping[str, Any]) -> dict[str, Any] | None:
    if STOP_REASON not in extra_info:  # only the agent loop writes it (plan / plan_source may come from the row)
        return None
    missing = [k for k in LOOP_FIELDS if k not in extra_info]
    if missing:
        raise ValueError(f"agent-loop extra_fields incomplete: missing {missing} (has {sorted(extra_info)}); "
                         "mrgrpo.agent_loop.PlanCodeAgentLoop writes all of mrgrpo.metrics.LOOP_FIELDS")
    fields = {k: extra_info[k] for k in LOOP_FIELDS}
    if fields[STOP_REASON] not in STOP_REASONS:
        raise ValueError(f"unknown stop_reason {fields[STOP_REASON]!r}; expected one of {STOP_REASONS}")
    n = int(fields[ATTEMPTS])
    if len(fields[PUBLIC_PASS]) != n or len(fields[PUBLIC_VERDICTS]) != n:
        raise ValueError(f"attempts={n} but public_pass has {len(fields[PUBLIC_PASS])} and public_verdicts "
                         f"{len(fields[PUBLIC_VERDICTS])} entries (one per attempt expected)")
    return fields


def trajectory_stats(*, attempts: int, public_verdicts: Sequence[str], public_pass: Sequence[bool], stop_reason: str,
                     model_tokens: int, injected_tokens: int, plan_tokens: int, acc: float,
                     infra: float) -> dict[str, float]:
    """The per-trajectory numbers (fixed key set ``SAMPLE_STAT_KEYS``, all floats) from the agent loop's record of
    one trajectory and the reward's ``acc`` / ``infra`` on the hidden tests: the one definition of each (table in
    docs/metrics.md, section 2).

        >>> s = trajectory_stats(attempts=2, public_verdicts=["WA", "AC"], public_pass=[False, True],
        ...                      stop_reason="passed", model_tokens=90, injected_tokens=30, plan_tokens=0, acc=1.0,
        ...                      infra=0.0)
        >>> s["failed_first"], s["fixed"], s["public_pass_hidden_fail"], s["excluded"]
        (1.0, 1.0, 0.0, 0.0)
    """
    verdicts = [str(v) for v in public_verdicts]
    passes = [bool(p) for p in public_pass]
    stop = str(stop_reason)
    failed_first = bool(verdicts) and verdicts[0] in FAILED_VERDICTS
    public_final = bool(passes) and passes[-1]
    return {
        ATTEMPTS: float(attempts),
        FIRST_PUBLIC_PASS: 1.0 if passes and passes[0] else 0.0,
        FAILED_FIRST: 1.0 if failed_first else 0.0,
        FIXED: 1.0 if failed_first and any(passes[1:]) else 0.0,
        PUBLIC_PASS_FINAL: 1.0 if public_final else 0.0,
        PUBLIC_PASS_HIDDEN_FAIL: 1.0 if public_final and float(acc) < 0.5 else 0.0,
        MODEL_TOKENS: float(model_tokens),
        INJECTED_TOKENS: float(injected_tokens),
        PLAN_TOKENS: float(plan_tokens),
        BUDGET_CLIP: 1.0 if stop == "budget" else 0.0,
        LOOP_INFRA: 1.0 if stop == "infra" else 0.0,
        LOOP_ERROR: 1.0 if stop == "error" else 0.0,
        EXCLUDED: 1.0 if excluded_from(stop, infra) else 0.0,
    }


def sample_stats(extra_info: Mapping[str, Any] | None, *, acc: float, infra: float) -> dict[str, float]:
    """Per-trajectory numbers for the reward dict (`trajectory_stats` of the loop's fields).

    ``extra_info`` is what the reward function receives (the row's extra_info updated with the agent loop's
    extra_fields); ``acc`` / ``infra`` are the reward's own hidden-test results. Without any agent-loop key
    (the reward called outside PlanCodeAgentLoop, e.g. ``mrgrpo score``) the loop statistics are 0 and only
    ``infra`` decides ``excluded``; with some but not all of them it raises (a broken contract).
    """
    fields = _loop_fields(extra_info or {})
    if fields is None:
        out = dict.fromkeys(SAMPLE_STAT_KEYS, 0.0)
        out[EXCLUDED] = 1.0 if excluded_from("", infra) else 0.0
        return out
    return trajectory_stats(attempts=int(fields[ATTEMPTS]), public_verdicts=fields[PUBLIC_VERDICTS],
                            public_pass=fields[PUBLIC_PASS], stop_reason=fields[STOP_REASON],
                            model_tokens=fields[MODEL_TOKENS], injected_tokens=fields[INJECTED_TOKENS],
                            plan_tokens=fields[PLAN_TOKENS], acc=acc, infra=infra)


# ---------------------------------------------------------------- rates over the samples that train
# Outcome quality is measured over the trained samples only (not ``excluded``): an INFRA or error trajectory is not
# a wrong answer. Each returns None when its denominator is empty.


def trained(stats: Iterable[Stats]) -> list[Stats]:
    """The samples that get a gradient: ``excluded`` is 0."""
    return [s for s in stats if float(s[EXCLUDED]) < 0.5]


def trained_mean(stats: Iterable[Stats], key: str) -> float | None:
    """Mean of ``key`` over the trained samples (``attempts``, ``model_tokens``, ``first_public_pass``, ...)."""
    return _mean(float(s[key]) for s in trained(stats))


def first_public_pass_rate(stats: Iterable[Stats]) -> float | None:
    """Share of trained samples whose first attempt passed the public tests."""
    return trained_mean(stats, FIRST_PUBLIC_PASS)


def failed_first_rate(stats: Iterable[Stats]) -> float | None:
    """Share of trained samples whose first attempt was tested and failed (feedback could follow)."""
    return trained_mean(stats, FAILED_FIRST)


def public_pass_final_rate(stats: Iterable[Stats]) -> float | None:
    """Share of trained samples whose last attempt passed the public tests."""
    return trained_mean(stats, PUBLIC_PASS_FINAL)


def fix_counts(stats: Iterable[Stats]) -> tuple[int, int]:
    """(fixed, failed_first) summed over the trained samples: the fix rate's numerator and denominator."""
    ts = trained(stats)
    return int(sum(float(s[FIXED]) for s in ts)), int(sum(float(s[FAILED_FIRST]) for s in ts))


def fix_rate(stats: Iterable[Stats]) -> float | None:
    """Of the trained samples whose tested first attempt failed, the share that passed the public tests after
    feedback: sum(``fixed``) / sum(``failed_first``).

        >>> fix_rate([{"fixed": 1.0, "failed_first": 1.0, "excluded": 0.0},
        ...           {"fixed": 0.0, "failed_first": 1.0, "excluded": 0.0},
        ...           {"fixed": 1.0, "failed_first": 1.0, "excluded": 1.0}])
        0.5
    """
    fixed, failed = fix_counts(stats)
    return _ratio(fixed, failed)


def public_pass_hidden_fail_rate(stats: Iterable[Stats]) -> float | None:
    """Of the trained samples that ended passing the public tests, the share failing the hidden tests."""
    ts = trained(stats)
    return _ratio(sum(float(s[PUBLIC_PASS_HIDDEN_FAIL]) for s in ts), sum(float(s[PUBLIC_PASS_FINAL]) for s in ts))


def flatten_row(extra_fields: Mapping[str, Any]) -> dict[str, Any]:
    """One row from a trajectory's TransferQueue ``extra_fields``: the loop's keys with the reward dict
    (``extra_fields["reward_extra_info"]``) merged in. The loop's own values win on a shared name."""
    if not isinstance(extra_fields, Mapping):
        raise TypeError(f"extra_fields must be a mapping, got {type(extra_fields).__name__}")
    reward = extra_fields.get(REWARD_EXTRA_INFO) or {}
    row = {k: v for k, v in reward.items()}
    row.update({k: v for k, v in extra_fields.items() if k != REWARD_EXTRA_INFO})
    return row


def has_reward(row: Mapping[str, Any]) -> bool:
    """Whether the row carries the reward keys the dashboard reads."""
    return all(k in row for k in (ACC, PASS_RATE, VERDICT, HAS_CODE, INFRA))


def row_excluded(row: Mapping[str, Any]) -> bool:
    """``excluded_from`` on a flattened row (the reward's ``infra`` is 0 when the row has no reward keys)."""
    stop = row.get(STOP_REASON)
    if stop is None:
        raise ValueError(f"row has no {STOP_REASON!r} (keys {sorted(row)}): not written by PlanCodeAgentLoop")
    return excluded_from(str(stop), float(row.get(INFRA, 0.0)))


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolation percentile (numpy's default method), q in [0, 100]."""
    if not values:
        raise ValueError("percentile of no values")
    xs = sorted(float(v) for v in values)
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _mean(xs: Iterable[float]) -> float | None:
    xs = list(xs)
    return sum(xs) / len(xs) if xs else None


def _ratio(num: float, den: float) -> float | None:
    return num / den if den > 0 else None


def batch_metrics(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """``mrgrpo/...`` metrics of one sampled training batch (see docs/metrics.md for each definition).

    ``rows``: one per trajectory, a flattened row (:func:`flatten_row`; a row that still carries
    ``reward_extra_info`` is flattened here). Every row must carry all of ``LOOP_FIELDS`` (verl stores the
    agent loop's extra_fields as written; a missing key raises). The reward keys may be absent from ALL rows
    (verl attaches ``reward_extra_info`` only when its reward loop scores during rollout; with a colocated
    reward model rewards are computed after sampling): then the reward metrics (acc, verdicts, has_code,
    public-pass-hidden-fail, hidden infra) are left out. A mix of rows with and without reward keys raises.

    Outcome-quality rates are over the trained rows (not excluded); what-happened fractions (verdicts, stop
    reasons, infra, errors, exclusions) and sandbox latencies are over all rows. A rate whose denominator is
    empty is left out rather than logged as 0.
    """
    if not rows:
        return {}
    for i, r in enumerate(rows):  # before flattening: reward keys share some names with the loop's
        if _loop_fields(r) is None:
            raise ValueError(f"row {i} has none of the agent-loop keys {LOOP_FIELDS} (keys {sorted(r)})")
    flat = [flatten_row(r) if REWARD_EXTRA_INFO in r else dict(r) for r in rows]
    with_reward = [has_reward(r) for r in flat]
    if any(with_reward) and not all(with_reward):
        raise ValueError(f"{with_reward.count(False)} of {len(flat)} rows lack the reward keys "
                         f"({ACC}, {PASS_RATE}, {VERDICT}, {HAS_CODE}, {INFRA}) that the others have")
    reward = all(with_reward)
    stats = [sample_stats(r, acc=float(r.get(ACC, 0.0)), infra=float(r.get(INFRA, 0.0))) for r in flat]
    trained_rows = [(r, s) for r, s in zip(flat, stats, strict=True) if s[EXCLUDED] < 0.5]
    n = len(flat)
    p = METRIC_PREFIX
    m: dict[str, float | None] = {f"{p}trajectories": float(n)}

    # what happened, over all rows
    stops = [str(r[STOP_REASON]) for r in flat]
    for reason in STOP_REASONS:
        m[f"{p}stop_reason/{reason}"] = stops.count(reason) / n
    m[f"{p}tokens/budget_clip_ratio"] = stops.count("budget") / n
    m[f"{p}infra/public_rate"] = stops.count("infra") / n
    m[f"{p}error_total"] = float(stops.count("error"))
    m[f"{p}excluded_total"] = float(n - len(trained_rows))
    m[f"{p}excluded_frac"] = (n - len(trained_rows)) / n
    if reward:
        verdicts = [str(r[VERDICT]) for r in flat]
        unknown = sorted(set(verdicts) - set(VERDICTS))
        if unknown:
            raise ValueError(f"unknown reward verdicts {unknown}; expected {VERDICTS}")
        for v in VERDICTS:
            m[f"{p}verdict/{v}"] = verdicts.count(v) / n
        hidden_infra = [float(r[INFRA]) >= 0.5 for r in flat]
        m[f"{p}infra/hidden_rate"] = sum(hidden_infra) / n
        m[f"{p}infra/rate"] = sum(h or s == "infra" for h, s in zip(hidden_infra, stops, strict=True)) / n
    latencies = [float(x) for r in flat for x in r[SANDBOX_S]]
    if latencies:
        m[f"{p}sandbox/public_s/p50"] = percentile(latencies, 50)
        m[f"{p}sandbox/public_s/p99"] = percentile(latencies, 99)
    # Sandbox seconds a trajectory waited for: its public-test calls plus (when scored during rollout) its hidden
    # tests. The rollout's wall time is its slowest trajectory's, so /max over the step time bounds the share.
    waited = [sum(float(x) for x in r[SANDBOX_S]) + (float(r.get("time_s") or 0.0) if reward else 0.0) for r in flat]
    m[f"{p}sandbox/trajectory_s/mean"] = _mean(waited)
    m[f"{p}sandbox/trajectory_s/max"] = max(waited)

    # outcome quality, over the trained rows
    ts = [s for _, s in trained_rows]
    if ts:
        attempts = [int(s[ATTEMPTS]) for s in ts]
        m[f"{p}attempts/mean"] = trained_mean(ts, ATTEMPTS)
        m[f"{p}attempts/frac_0"] = attempts.count(0) / len(ts)
        m[f"{p}attempts/frac_1"] = attempts.count(1) / len(ts)
        m[f"{p}attempts/frac_2"] = attempts.count(2) / len(ts)
        m[f"{p}attempts/frac_3plus"] = sum(a >= 3 for a in attempts) / len(ts)
        m[f"{p}first_public_pass"] = first_public_pass_rate(ts)
        m[f"{p}failed_first"] = failed_first_rate(ts)
        m[f"{p}fix_rate"] = fix_rate(ts)
        m[f"{p}tokens/model/mean"] = trained_mean(ts, MODEL_TOKENS)
        m[f"{p}tokens/model/max"] = max(s[MODEL_TOKENS] for s in ts)
        m[f"{p}tokens/injected/mean"] = trained_mean(ts, INJECTED_TOKENS)
        m[f"{p}tokens/injected/max"] = max(s[INJECTED_TOKENS] for s in ts)
        plans = [s[PLAN_TOKENS] for r, s in trained_rows if r[PLAN_SOURCE] == "self"]
        if plans:
            m[f"{p}plan_tokens/mean"] = _mean(plans)
            m[f"{p}plan_tokens/max"] = max(plans)
        if reward:
            tr = [r for r, _ in trained_rows]
            m[f"{p}acc"] = _mean(float(r[ACC]) for r in tr)
            m[f"{p}pass_rate"] = _mean(float(r[PASS_RATE]) for r in tr)
            m[f"{p}has_code"] = _mean(float(r[HAS_CODE]) for r in tr)
            m[f"{p}public_pass_hidden_fail"] = public_pass_hidden_fail_rate(ts)
    return {k: float(v) for k, v in m.items() if v is not None}
