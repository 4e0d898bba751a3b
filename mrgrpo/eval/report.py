"""``mrgrpo eval`` outputs: ``summary.json``, ``per_problem.csv``, ``report.md`` and ``passk.png``.

pass@k (`mrgrpo.eval.passk`) is computed per problem from its ``n`` judged samples and averaged over problems, for
the final program (after feedback rounds) and for the first attempt's program, overall and per difficulty
(``extra_info.difficulty``), per ``data_source`` (seen / unseen splits labelled by data_source stay apart) and per
plan source. A problem enters pass@k only for k <= its number of samples; pass@k and ``mean_acc`` count every
sample (as verl's validation ``acc`` does).

Everything else about the trajectories is the training dashboard's metric of the same meaning, computed by the same
function of `mrgrpo.metrics` from each sample's `mrgrpo.metrics.trajectory_stats` (docs/metrics.md): ``public_tests``
(``attempt1_public_pass_rate`` = ``mrgrpo/first_public_pass``, ``fix_rate`` = ``mrgrpo/fix_rate``, with its counts
``fixed_after_feedback`` / ``failed_public_at_attempt1``, ``final_public_pass_rate``), ``mean_attempts`` =
``mrgrpo/attempts/mean``, ``mean_model_tokens`` / ``mean_injected_tokens`` = ``mrgrpo/tokens/{model,injected}/mean``:
over the samples not excluded (the sandbox failed, or the trajectory raised), a first attempt counted as failed only
when it was tested and failed.
"""

from __future__ import annotations

import csv
import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from mrgrpo import metrics
from mrgrpo.eval.passk import mean_pass_at_k

CSV_COLUMNS = ("problem_id", "index", "data_source", "difficulty", "plan_source", "sample", "verdict", "acc",
               "attempt1_verdict", "attempt1_acc", "attempts", "stop_reason", "model_tokens", "injected_tokens",
               "public_pass", "public_verdicts", "num_tests", "error")
DIFFICULTY_ORDER = ("introductory", "interview", "competition", "unknown")


def _counts(records: Sequence, attr: str) -> list[tuple[int, int]]:
    """(n, c) per problem for the 0/1 attribute ``attr`` (``acc`` or ``attempt1_acc``)."""
    per_problem: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in records:
        nc = per_problem[r.problem_id]
        nc[0] += 1
        nc[1] += 1 if getattr(r, attr) >= 1.0 else 0
    return [tuple(v) for v in per_problem.values()]


def _passk(counts: list[tuple[int, int]], ks: Sequence[int]) -> dict[str, float | None]:
    return {f"pass@{k}": mean_pass_at_k([nc for nc in counts if nc[0] >= k], k) for k in ks}


def _mean(values: Iterable[float]) -> float | None:
    values = list(values)
    return sum(values) / len(values) if values else None


def record_stats(record) -> dict[str, float]:
    """One sample's per-trajectory numbers, as training and validation define them (`mrgrpo.metrics`); the
    sandbox failed on its hidden tests when its verdict is INFRA."""
    return metrics.trajectory_stats(
        attempts=record.attempts, public_verdicts=record.public_verdicts, public_pass=record.public_pass,
        stop_reason=record.stop_reason, model_tokens=record.model_tokens, injected_tokens=record.injected_tokens,
        plan_tokens=record.plan_tokens, acc=record.acc, infra=1.0 if record.verdict == "INFRA" else 0.0)


def public_stats(records: Sequence) -> dict[str, Any]:
    """The public-test outcomes (see the module docstring): first-attempt and final public pass rates, and the fix
    rate with its counts, by `mrgrpo.metrics`."""
    stats = [record_stats(r) for r in records]
    fixed, failed_first = metrics.fix_counts(stats)
    return {
        "attempt1_public_pass_rate": metrics.first_public_pass_rate(stats),
        "final_public_pass_rate": metrics.public_pass_final_rate(stats),
        "failed_public_at_attempt1": failed_first,
        "fixed_after_feedback": fixed,
        "fix_rate": metrics.fix_rate(stats),
    }


def group_stats(records: Sequence, ks: Sequence[int]) -> dict[str, Any]:
    stats = [record_stats(r) for r in records]
    return {
        "num_problems": len({r.problem_id for r in records}),
        "num_samples": len(records),
        "final": _passk(_counts(records, "acc"), ks),
        "attempt1": _passk(_counts(records, "attempt1_acc"), ks),
        "mean_acc": _mean(r.acc for r in records),
        "mean_attempt1_acc": _mean(r.attempt1_acc for r in records),
        "mean_attempts": metrics.trained_mean(stats, metrics.ATTEMPTS),
        "mean_model_tokens": metrics.trained_mean(stats, metrics.MODEL_TOKENS),
    }


def _by(records: Sequence, key: str, ks: Sequence[int], order: Sequence[str] = ()) -> dict[str, Any]:
    groups: dict[str, list] = defaultdict(list)
    for r in records:
        groups[str(getattr(r, key))].append(r)
    names = [o for o in order if o in groups] + sorted(g for g in groups if g not in order)
    return {name: group_stats(groups[name], ks) for name in names}


def summarize(records: Sequence, ks: Sequence[int], settings: dict[str, Any],
              prompt_filter: dict[str, Any] | None = None) -> dict[str, Any]:
    """``prompt_filter``: what verl's overlong-prompt filter dropped before the evaluation (``max_prompt_length``,
    ``problems_read``, ``dropped``, ``dropped_ids``; `mrgrpo.eval.run.LoadedRows.prompt_filter`)."""
    stats = [record_stats(r) for r in records]
    return {
        "settings": {**settings, "k": list(ks)},
        **({"prompt_filter": dict(prompt_filter)} if prompt_filter is not None else {}),
        "num_problems": len({r.problem_id for r in records}),
        "num_samples": len(records),
        "num_judged": sum(1 for r in records if r.verdict),
        "overall": group_stats(records, ks),
        "by_difficulty": _by(records, "difficulty", ks, DIFFICULTY_ORDER),
        "by_data_source": _by(records, "data_source", ks),
        "by_plan_source": _by(records, "plan_source", ks),
        "verdicts": dict(Counter(r.verdict for r in records).most_common()),
        "attempt1_verdicts": dict(Counter(r.attempt1_verdict for r in records).most_common()),
        "stop_reasons": dict(Counter(r.stop_reason for r in records).most_common()),
        "public_tests": public_stats(records),
        "mean_model_tokens": metrics.trained_mean(stats, metrics.MODEL_TOKENS),
        "mean_injected_tokens": metrics.trained_mean(stats, metrics.INJECTED_TOKENS),
        "errors": sum(1 for r in records if r.stop_reason == "error"),
        "infra": sum(1 for r in records if r.verdict == "INFRA"),
        "final_code_mismatches": sum(1 for r in records if r.final_code_mismatch),
    }


def write_csv(records: Sequence, path: Path) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS, extrasaction="ignore")
        w.writeheader()
        for r in sorted(records, key=lambda r: (r.index, r.problem_id, r.sample)):
            row = asdict(r)
            row["public_pass"] = "".join("1" if p else "0" for p in r.public_pass)
            row["public_verdicts"] = "|".join(r.public_verdicts)
            w.writerow(row)


def plot(summary: dict[str, Any], path: Path) -> str | None:
    """pass@k vs k per difficulty (left) and attempt 1 vs final (right). None if written, else why not."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install matplotlib)"
    ks = summary["settings"]["k"]

    def series(block: dict[str, Any], which: str) -> list[float]:
        return [float("nan") if block[which][f"pass@{k}"] is None else block[which][f"pass@{k}"] for k in ks]

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    left.plot(ks, series(summary["overall"], "final"), "k-o", label="all", linewidth=2)
    for name, block in summary["by_difficulty"].items():
        left.plot(ks, series(block, "final"), "-o", label=f"{name} ({block['num_problems']})")
    left.set_title("pass@k after feedback, by difficulty")
    right.plot(ks, series(summary["overall"], "final"), "k-o", label="final (after feedback)")
    right.plot(ks, series(summary["overall"], "attempt1"), "k--s", label="attempt 1")
    for name, block in summary["by_difficulty"].items():
        (line,) = right.plot(ks, series(block, "final"), "-o", alpha=0.5, label=f"{name} final")
        right.plot(ks, series(block, "attempt1"), "--s", color=line.get_color(), alpha=0.5, label=f"{name} attempt 1")
    right.set_title("attempt 1 vs final")
    for ax in (left, right):
        ax.set_xlabel("k")
        ax.set_ylabel("pass@k")
        ax.set_xticks(ks)
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None


def _fmt(v: Any) -> str:
    return "-" if v is None else (f"{v:.4f}" if isinstance(v, float) else str(v))


def _table(title: str, groups: dict[str, Any], ks: Sequence[int]) -> list[str]:
    head = ["group", "problems", "samples"] + [f"pass@{k}" for k in ks] + [f"pass@{k} (attempt 1)" for k in ks]
    lines = [f"### {title}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, b in groups.items():
        cells = [name, str(b["num_problems"]), str(b["num_samples"])]
        cells += [_fmt(b["final"][f"pass@{k}"]) for k in ks] + [_fmt(b["attempt1"][f"pass@{k}"]) for k in ks]
        lines.append("| " + " | ".join(cells) + " |")
    return lines + [""]


MAX_IDS_SHOWN = 50


def prompt_filter_line(pf: dict[str, Any]) -> str:
    """How many problems the prompt-length filter dropped, and which (the first ``MAX_IDS_SHOWN``)."""
    head = (f"Prompt-length filter: {pf['dropped']} of {pf['problems_read']} problems dropped (first prompt longer "
            f"than max_prompt_length={pf['max_prompt_length']} tokens)")
    if not pf["dropped"]:
        return head + "."
    ids = [f"`{i}`" for i in pf["dropped_ids"][:MAX_IDS_SHOWN]]
    more = f", ... ({pf['dropped']} in all: `summary.json`, prompt_filter)" if pf["dropped"] > MAX_IDS_SHOWN else ""
    return f"{head}: {', '.join(ids)}{more}."


def markdown(summary: dict[str, Any], plot_name: str | None, plot_note: str | None) -> str:
    s, ks = summary["settings"], summary["settings"]["k"]
    pub = summary["public_tests"]
    lines = [
        "# mrgrpo eval",
        "",
        f"Model `{s.get('model')}`, data `{s.get('data')}`: {summary['num_problems']} problems x n={s['n']} samples "
        f"({summary['num_samples']} trajectories, {summary['num_judged']} judged on the hidden tests). "
        f"plan_source={s['plan_source']}, rounds={s.get('rounds_effective', s.get('rounds'))}, "
        f"temperature={s['temperature']}, top_p={s['top_p']}, top_k={s['top_k']}, "
        f"max_response_length={s['max_response_length']}.",
        "",
        *([prompt_filter_line(summary["prompt_filter"]), ""] if "prompt_filter" in summary else []),
        "pass@k: the unbiased estimator of Chen et al. (2021) per problem, averaged over problems. *Final* scores the "
        "loop's final program (after feedback rounds on the public tests) on the hidden tests, exactly as the "
        "training reward; *attempt 1* scores the first attempt's program on the same hidden tests.",
        "",
    ]
    if plot_name:
        lines += [f"![pass@k]({plot_name})", ""]
    elif plot_note:
        lines += [f"(No plot: {plot_note}.)", ""]
    lines += _table("Overall", {"all": summary["overall"]}, ks)
    lines += _table("By difficulty", summary["by_difficulty"], ks)
    lines += _table("By data source", summary["by_data_source"], ks)
    lines += _table("By plan source", summary["by_plan_source"], ks)
    lines += [
        "### Verdicts (hidden tests)",
        "",
        "| verdict | final | attempt 1 |",
        "|---|---|---|",
    ]
    for v in sorted(set(summary["verdicts"]) | set(summary["attempt1_verdicts"])):
        lines.append(f"| {v} | {summary['verdicts'].get(v, 0)} | {summary['attempt1_verdicts'].get(v, 0)} |")
    lines += [
        "",
        "### Trajectories",
        "",
        f"- stop reasons: {', '.join(f'{k} {v}' for k, v in summary['stop_reasons'].items())}",
        f"- mean model tokens {_fmt(summary['mean_model_tokens'])}, mean injected tokens "
        f"{_fmt(summary['mean_injected_tokens'])}, mean attempts {_fmt(summary['overall']['mean_attempts'])}",
        f"- public tests: attempt-1 pass rate {_fmt(pub['attempt1_public_pass_rate'])}, final "
        f"{_fmt(pub['final_public_pass_rate'])}; {pub['fixed_after_feedback']} of {pub['failed_public_at_attempt1']} "
        f"first attempts that failed them were fixed after feedback (fix rate {_fmt(pub['fix_rate'])}; these and the "
        "means leave out the samples the sandbox failed on or that raised, as training's dashboard does)",
        f"- errors {summary['errors']}, sandbox INFRA {summary['infra']}, final_code mismatches "
        f"{summary['final_code_mismatches']}",
        "",
        "Every sample: `per_problem.csv`; every number above: `summary.json`.",
        "",
    ]
    return "\n".join(lines)


def write_outputs(records: Sequence, ks: Sequence[int], settings: dict[str, Any], out_dir: str | Path,
                  prompt_filter: dict[str, Any] | None = None) -> dict:
    """Writes summary.json, per_problem.csv, passk.png (when matplotlib is there) and report.md; returns the
    summary."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    summary = summarize(records, ks, settings, prompt_filter=prompt_filter)
    write_csv(records, out / "per_problem.csv")
    note = plot(summary, out / "passk.png")
    summary["files"] = ["summary.json", "per_problem.csv", "report.md"] + ([] if note else ["passk.png"])
    (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    (out / "report.md").write_text(markdown(summary, None if note else "passk.png", note), encoding="utf-8")
    return summary
