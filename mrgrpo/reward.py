"""verl reward function for APPS / APPS+ code problems, scored in `mrgrpo.sandbox`.

Use it with `reward.custom_reward_function.path=pkg://mrgrpo.reward` (name `compute_score`, or
`compute_score_async` to run on verl's event loop); `reward.custom_reward_function.reward_kwargs` become the
keyword arguments below.

The score is a weighted sum of named terms (``TERMS``), each a function below with its formula:
``score = sum(<name>_weight * <name>_term)`` (`weighted_score`). A new term is one function ``<name>_term``, one
``<name>_weight`` default in ``_DEFAULTS`` (0.0 keeps the score as it was) and one entry where `_Call.finish`
computes the terms.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from mrgrpo.code_extract import extract_code
from mrgrpo.marker import mark_once
from mrgrpo.metrics import SAMPLE_STAT_KEYS, sample_stats
from mrgrpo.sandbox import ExecResult, Job, Verdict, run, run_async
from mrgrpo.testset import LimitsOverride, TestSet

logger = logging.getLogger("mrgrpo.reward")

# Every call returns exactly these keys (verl needs the same keys for every sample): the score and its parts, then
# the per-trajectory dashboard numbers of `mrgrpo.metrics.sample_stats` (so they are validation metrics too).
REWARD_KEYS = ("score", "acc", "pass_rate", "verdict", "num_tests", "num_passed", "time_s", "format_ok",
               "has_code", "length_term", "infra") + SAMPLE_STAT_KEYS

# Keyword arguments verl itself may pass to a custom reward function; accepted and ignored.
_VERL_KWARGS = frozenset({"reward_router_address", "reward_model_tokenizer"})
# Reward kwargs that are now keys of the run's one limits override (the recipe's mrgrpo.limits, which the trainer
# yaml passes here as ``limits``): refused with the new key's name, so a limit never applies to one side only.
RETIRED_KWARGS = {"time_s": "mrgrpo.limits.time_s", "wall_s": "mrgrpo.limits.wall_s",
                  "memory_mb": "mrgrpo.limits.memory_mb"}

_infra_lock = threading.Lock()
_consecutive_infra = 0


class SandboxBroken(RuntimeError):
    """Raised after `max_consecutive_infra` INFRA results in a row: the sandbox is down, stop the run."""


def build_job(ground_truth, code: str, *, all_tests: bool = False, override: LimitsOverride | None = None,
              where: str = "ground_truth") -> Job:
    """The sandbox Job for a ground truth in the test JSON wire format of `mrgrpo.testset` (a string or a dict;
    call-mode outputs wrapped as ``[value]``; its ``float_tol`` and its own limits, if any, apply), under the
    run's limits ``override`` (`mrgrpo.testset.TestSet.limits`: the agent loop's rule for the public tests)."""
    tests = TestSet.from_json(ground_truth, where=where)
    return tests.job(code, stop_on_first_failure=not all_tests, limits=tests.limits(override))


def ground_truth_where(extra_info: dict | None) -> str:
    """How errors name a row's ground truth: ``row <source_id> ground_truth`` (the data build's id, else the index).

        >>> ground_truth_where({"source_id": "apps_plus:7"}), ground_truth_where(None)
        ('row apps_plus:7 ground_truth', 'ground_truth')
    """
    info = extra_info or {}
    row = info.get("source_id") or info.get("index")
    return "ground_truth" if row is None else f"row {row} ground_truth"


def _program(solution_str: str, extra_info: dict | None) -> str | None:
    """The program to run, or None. The agent loop's `final_code` wins (empty: None); else the last fenced python
    block of the response."""
    if extra_info and extra_info.get("final_code") is not None:
        code = str(extra_info["final_code"])
        return code if code.strip() else None
    return extract_code(solution_str or "")


# The score's terms, in the order they are summed; the weight of each is the reward kwarg ``<name>_weight``.
TERMS = ("correctness", "format", "length")


def pass_rate(result: ExecResult) -> float:
    """``passed / total`` of a sandbox result (0.0 with no tests). With ``stop_on_first_failure`` it counts the
    tests before the first failure.

        >>> pass_rate(ExecResult(Verdict.WA, passed=3, total=4, tests=(), time_s=0.0, detail=""))
        0.75
    """
    return result.passed / result.total if result.total else 0.0


def correctness_term(result: ExecResult, partial_credit: bool = False) -> float:
    """``acc`` = 1.0 if the program passed every hidden test (verdict AC), else 0.0; with ``partial_credit``,
    `pass_rate` instead (``compute_score`` then runs every test).

        >>> wa = ExecResult(Verdict.WA, passed=3, total=4, tests=(), time_s=0.0, detail="")
        >>> correctness_term(wa), correctness_term(wa, partial_credit=True)
        (0.0, 0.75)
    """
    if partial_credit:
        return pass_rate(result)
    return 1.0 if result.verdict is Verdict.AC else 0.0


def format_term(program: str | None) -> float:
    """1.0 if the answer has a program to run (the agent loop's non-empty ``final_code``, else a closed python
    fence of the response, `mrgrpo.code_extract`), else 0.0.

        >>> format_term("print(1)"), format_term(None)
        (1.0, 0.0)
    """
    return 1.0 if program is not None else 0.0


def length_term(model_tokens: int, target_tokens: int) -> float:
    """1 up to ``target_tokens`` of the model's own tokens, then linearly down to 0 at twice as many:
    ``clip(2 - model_tokens / target_tokens, 0, 1)``.

    Counts only what the policy generated (the agent loop's ``model_tokens``, mask 1), never the injected feedback
    turns, so the same answer scores the same after a feedback round as in a single turn.

        >>> length_term(800, 1000), length_term(1500, 1000), length_term(2500, 1000)
        (1.0, 0.5, 0.0)
    """
    if model_tokens <= target_tokens:
        return 1.0
    return max(0.0, 1.0 - (model_tokens - target_tokens) / target_tokens)


def weighted_score(terms: dict[str, float], weights: dict[str, float]) -> float:
    """``sum(weights[name] * value for name, value in terms)``, in the order of ``terms``; every term needs a weight.

        >>> weighted_score({"correctness": 1.0, "format": 1.0, "length": 0.5},
        ...                {"correctness": 0.7, "format": 0.2, "length": 0.1})  # the original mrGRPO's weights
        0.95
    """
    return sum(float(weights[name]) * value for name, value in terms.items())


class _Call:
    """One compute_score call: arguments checked, program found, Job built (or an early verdict)."""

    def __init__(self, solution_str, ground_truth, extra_info, kwargs):
        self.extra_info = extra_info or {}
        retired = sorted(set(kwargs) & set(RETIRED_KWARGS))
        if retired:
            raise TypeError(f"compute_score: reward_kwargs.{retired[0]} is retired: set {RETIRED_KWARGS[retired[0]]} "
                            "(one override for the agent loop's public tests and the reward's hidden tests)")
        unknown = set(kwargs) - _VERL_KWARGS - set(_DEFAULTS)
        if unknown:
            raise TypeError(f"compute_score got unknown keyword arguments {sorted(unknown)}; "
                            f"known: {sorted(_DEFAULTS)}")
        opts = {**_DEFAULTS, **{k: v for k, v in kwargs.items() if k in _DEFAULTS}}
        self.opts = opts
        self.code = _program(solution_str, extra_info)
        model_tokens = (extra_info or {}).get("model_tokens")
        if model_tokens is None:
            if float(opts["length_weight"]) != 0.0:
                raise ValueError("length_weight needs extra_info['model_tokens'] (set by mrgrpo's agent loop): the "
                                 "length term counts the model's own tokens only")
            self.length_term = 1.0  # not measured and not used
        else:
            self.length_term = length_term(int(model_tokens), int(opts["length_target_tokens"]))
        partial = bool(opts["partial_credit"])
        override = LimitsOverride.from_config(opts["limits"], where="reward_kwargs.limits (mrgrpo.limits)")
        self.job = build_job(ground_truth, self.code or "", all_tests=partial or bool(opts["all_tests"]),
                             override=override, where=ground_truth_where(extra_info))

    def finish(self, result: ExecResult | None) -> dict:
        global _consecutive_infra
        opts = self.opts
        total = len(self.job.inputs)
        if result is None:
            result = ExecResult(Verdict.NO_CODE, 0, total, (), 0.0, "no code")
        infra = result.verdict is Verdict.INFRA
        with _infra_lock:
            _consecutive_infra = _consecutive_infra + 1 if infra else 0
            broken = _consecutive_infra >= int(opts["max_consecutive_infra"])
        if infra:
            logger.warning("mrgrpo.reward: INFRA (%s); scored %s", result.detail[:300], opts["infra_score"])
            if broken:
                raise SandboxBroken(f"{_consecutive_infra} INFRA results in a row; last: {result.detail}")
        acc = correctness_term(result)
        terms = {
            "correctness": correctness_term(result, bool(opts["partial_credit"])),
            "format": format_term(self.code),
            "length": self.length_term,
        }
        if infra:
            score = float(opts["infra_score"])
        else:
            score = weighted_score(terms, {name: opts[f"{name}_weight"] for name in TERMS})
        return {
            "score": score,
            "acc": acc,
            "pass_rate": pass_rate(result),
            "verdict": result.verdict.value,
            "num_tests": total,
            "num_passed": result.passed,
            "time_s": result.time_s,
            "format_ok": terms["format"],
            "has_code": terms["format"],
            "length_term": self.length_term,
            "infra": 1.0 if infra else 0.0,
            **sample_stats(self.extra_info, acc=acc, infra=1.0 if infra else 0.0),
        }


_DEFAULTS: dict[str, Any] = {
    "correctness_weight": 1.0,
    "format_weight": 0.0,
    "length_weight": 0.0,
    "length_target_tokens": 2048,
    "partial_credit": False,
    "all_tests": False,
    "limits": None,
    "infra_score": 0.0,
    "max_consecutive_infra": 32,
}


def compute_score(data_source: str, solution_str: str, ground_truth, extra_info: dict | None = None,
                  **kwargs) -> dict:
    """Score one response to an APPS/APPS+ problem by running its program on the hidden tests.

    Args:
        data_source: the dataset name (``"apps_plus"``, ``"apps"``; not used for scoring).
        solution_str: the decoded response. The program is ``extra_info["final_code"]`` when that key is
            present and not None (the plan-code agent loop sets it); otherwise the last closed fenced block
            tagged ``python``/``py``/``python3`` (else the last bare fence) outside ``<think>`` blocks, see
            `mrgrpo.code_extract`. No program at all is verdict ``NO_CODE``.
        ground_truth: the HIDDEN tests in the test JSON of `mrgrpo.testset` (string or dict)
            ``{"inputs": [...], "outputs": [...], "fn_name"?: str, "float_tol"?: float, "time_s"?: float}``
            (a malformed one raises `mrgrpo.testset.TestSetError` naming the row); call-mode outputs are
            wrapped as ``[value]``. ``mrgrpo data build`` writes only the hidden tests here (the public ones,
            shown in feedback, live in ``extra_info["public_tests"]``), so ``acc`` is a hidden-test accuracy.
        extra_info: the dataset row's extra_info (verl adds rollout fields to it).
        **kwargs: ``reward_kwargs`` from the verl config:
            correctness_weight (1.0), format_weight (0.0), length_weight (0.0): the score is
                ``correctness_weight * correctness_term + format_weight * format_term + length_weight * length_term``
                (`weighted_score` of ``TERMS``; the original mrGRPO used 0.7 / 0.2 / 0.1);
            partial_credit (False): correctness is the pass rate over all tests instead of ``acc``
                (runs every test); all_tests (False): run every test without changing the score;
            length_target_tokens (2048): ``length_term`` (`length_term`) is 1 up to this many of the model's own
                tokens (``extra_info["model_tokens"]``, injected turns excluded) and falls linearly to 0 at twice
                as many; a nonzero length_weight without ``model_tokens`` raises;
            limits (None): the run's override of the per-test limits, a mapping of time_s / wall_s / memory_mb
                (`mrgrpo.testset.LimitsOverride`; the trainer yaml passes ``${mrgrpo.limits}``, the agent loop's own);
                a key left None takes the ground truth's own ``time_s`` / ``wall_s``, else the sandbox's defaults
                (`mrgrpo.testset.TestSet.limits`). The former time_s / wall_s / memory_mb kwargs raise, naming
                ``mrgrpo.limits``;
            infra_score (0.0): the score of an item the sandbox failed to judge (after one retry);
            max_consecutive_infra (32): that many INFRA results in a row raise `SandboxBroken`.
        Unknown keyword arguments raise TypeError (a misspelt weight must not be ignored silently).

    Returns:
        A dict with exactly the keys of ``REWARD_KEYS``: ``score`` (the training reward), ``acc`` (1.0 iff every
        hidden test passed), ``pass_rate`` (passed / num_tests; with the default stop-at-first-failure it
        counts the tests before the first failure), ``verdict`` (``"AC"``, ``"WA"``, ... ``"INFRA"``),
        ``num_tests``, ``num_passed``, ``time_s`` (wall seconds in the sandbox), ``format_ok`` (1.0 when a
        fenced block or ``final_code`` was found), ``has_code``, ``length_term``, ``infra`` (1.0 when the
        sandbox failed: the item scores ``infra_score`` and is logged); then the per-trajectory numbers of
        `mrgrpo.metrics.sample_stats` (``SAMPLE_STAT_KEYS``: attempts, first_public_pass, fixed, model_tokens,
        ..., ``excluded`` = 1.0 for INFRA or a failed trajectory: with the recipe's ``mrgrpo_grpo`` estimator
        and sampler such a sample gets no gradient and does not move its group's baseline, docs/metrics.md).

    Safe to call from many threads at once (verl runs it in a thread pool) and from inside an event loop; it
    uses no signals. Example:

        >>> from mrgrpo.reward import compute_score
        >>> gt = {"inputs": ["1 2\\n", "5 7\\n"], "outputs": ["3\\n", "12\\n"]}
        >>> answer = "Sum them.\\n```python\\na, b = map(int, input().split())\\nprint(a + b)\\n```"
        >>> r = compute_score("apps_plus", answer, gt)
        >>> r["score"], r["acc"], r["verdict"], r["num_tests"]
        (1.0, 1.0, 'AC', 2)
        >>> compute_score("apps_plus", "no code here", gt)["verdict"]
        'NO_CODE'
    """
    call = _Call(solution_str, ground_truth, extra_info, kwargs)
    mark_once("reward", fn="compute_score", has_final_code=bool(extra_info and "final_code" in extra_info))
    return call.finish(run(call.job) if call.code is not None else None)


async def compute_score_async(data_source: str, solution_str: str, ground_truth, extra_info: dict | None = None,
                              **kwargs) -> dict:
    """`compute_score` for an event loop: the sandbox runs on its own threads, the loop is never blocked."""
    call = _Call(solution_str, ground_truth, extra_info, kwargs)
    mark_once("reward", fn="compute_score_async", has_final_code=bool(extra_info and "final_code" in extra_info))
    return call.finish(await run_async(call.job) if call.code is not None else None)
