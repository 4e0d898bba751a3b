"""Stage 1: read APPS+/APPS records, quarantine bad ones, run every reference solution, flag special items,
split public/hidden tests. Writes ``problems.jsonl`` and ``quarantine.jsonl``.

Every input record ends in exactly one of the two files. A reference run is cached by a hash of what
it ran (``cache/reference_runs.jsonl``), so re-running the stage runs nothing in the sandbox, except the runs
whose verdict load can cause (TLE, INFRA: never final, judged again by the next run); ``force`` runs every one.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mrgrpo.apps import Problem, RecordError, read_problems
from mrgrpo.data import store
from mrgrpo.data.runner import ReferenceRunner, RefJob, RefOutcome, reference_time_s

VALIDATE_VERSION = "validate-v3"  # bump when flags/splitting change: invalidates the stage fingerprint

# Names LeetCode/Codewars judges provide without an import; a call-mode reference using one of them
# undefined gets the "needs_preamble" flag (the sandbox supplies the preamble, see docs/data.md).
PREAMBLE_NAMES = frozenset(
    "List Dict Tuple Set Optional Deque DefaultDict Counter OrderedDict deque defaultdict heapq collections math "
    "bisect itertools functools string re sys random inf lru_cache reduce accumulate permutations combinations "
    "product gcd sqrt log floor ceil ListNode TreeNode".split()
)
_FLOAT_TOKEN = re.compile(r"(?<![\w.])[-+]?(\d+\.\d*|\.\d+|\d+(\.\d*)?[eE][-+]?\d+)(?![\w.])")
LARGE_TESTS_BYTES = 1 << 20


@dataclass(frozen=True)
class ValidateOptions:
    public_tests: int = 1  # at most this many tests are public; always leaves >= 1 hidden test
    run_reference: bool = True
    float_tol: float = 1e-6  # retried with this tolerance when an exact run fails on float outputs
    time_s: float | None = None  # per-test CPU limit for reference runs (None: runner.reference_time_s's rule)
    dedupe: bool = True

    def fingerprint_dict(self) -> dict:
        return {**dataclasses.asdict(self), "version": VALIDATE_VERSION}


@dataclass
class ValidateResult:
    problems: list[dict]
    quarantined: list[dict]
    reference_runs: int = 0  # runs done now (not from the cache)


# ---------------------------------------------------------------- flags


def _walk(value: Any) -> Iterable[Any]:
    yield value
    if isinstance(value, (list, tuple, set, frozenset)):
        for v in value:
            yield from _walk(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _walk(v)


def has_float_output(p: Problem) -> bool:
    if p.io_mode == "stdio":
        return any(_FLOAT_TOKEN.search(o) for o in p.outputs)
    return any(isinstance(v, float) for o in p.outputs for v in _walk(o))


def undefined_preamble_names(code: str) -> set[str]:
    """Judge-preamble names a program uses without defining or importing them."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return set()
    defined, used = set(dir(builtins)), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (used if isinstance(node.ctx, ast.Load) else defined).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, ast.arg):
            defined.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                defined.add((a.asname or a.name).split(".")[0])
                if a.name == "*":
                    return set()
    return (used - defined) & PREAMBLE_NAMES


def special_flags(p: Problem, raw_inputs: list, raw_outputs: list) -> list[str]:
    """Flags for items that do not fit cleanly. ``raw_*``: the tests before the JSON normalisation."""
    flags = [f"note:{n}" for n in p.notes]
    n = len(p.inputs)
    if n == 1:
        flags.append("single_test")
    if p.io_mode == "call":
        if not all(store.is_json_exact(v) for v in raw_outputs):
            flags.append("non_json_output")
        if not all(store.is_json_exact(v) for v in raw_inputs):
            flags.append("non_json_input")
        if p.reference_solution and undefined_preamble_names(p.reference_solution):
            flags.append("needs_preamble")
    else:
        if any(o.strip() == "" for o in p.outputs):
            flags.append("empty_output")
        if any(not o.endswith("\n") or re.search(r"[ \t]+\n", o) for o in p.outputs if o.strip()):
            flags.append("output_whitespace")
    if has_float_output(p):
        flags.append("float_output")
    keys = [store.canonical_json(x) for x in p.inputs]
    if len(set(keys)) < len(keys):
        flags.append("duplicate_tests")
    if sum(len(k) for k in keys) + sum(len(store.canonical_json(o)) for o in p.outputs) > LARGE_TESTS_BYTES:
        flags.append("large_tests")
    if p.difficulty == "unknown":
        flags.append("unknown_difficulty")
    return flags


def public_count(n_tests: int, k: int) -> int:
    """Public tests: the first min(k, n - 1): a problem always keeps at least one hidden test."""
    return max(0, min(k, n_tests - 1))


def public_tests_json(p: Problem, k: int, float_tol: float | None = None) -> dict:
    """The first ``k`` tests in the test JSON wire format (`mrgrpo.testset`): what the agent loop shows."""
    return p.tests(float_tol).split(k)[0].to_dict()


# ---------------------------------------------------------------- problem <-> dict


def problem_hash(p: Problem) -> str:
    """Hash of everything about a problem that the pipeline uses (statement, interface, tests, reference)."""
    d = dataclasses.asdict(p)
    d.pop("notes", None)
    for name in ("ambiguous", "time_s"):  # (as before the fields existed, when not set)
        if not d[name]:
            del d[name]
    return store.stable_hash(d)


def problem_to_dict(p: Problem) -> dict:
    d = dataclasses.asdict(p)
    d["notes"] = list(p.notes)
    if p.ambiguous:
        d["ambiguous"] = list(p.ambiguous)
    else:
        del d["ambiguous"]
    if p.time_s is None:  # the problem's own time limit, only when it has one
        del d["time_s"]
    return d


def problem_from_dict(d: dict) -> Problem:
    names = {f.name for f in dataclasses.fields(Problem)}
    kw = {k: v for k, v in d.items() if k in names}
    kw["notes"] = tuple(kw.get("notes") or ())
    kw["ambiguous"] = tuple(kw.get("ambiguous") or ())
    return Problem(**kw)


def normalise(p: Problem) -> Problem:
    """The problem with JSON-normalised tests: exactly what the ground truth will hold."""
    return dataclasses.replace(p, inputs=store.to_jsonable(p.inputs), outputs=store.to_jsonable(p.outputs))


# ---------------------------------------------------------------- reference runs


def _ref_key(job: RefJob) -> str:
    return store.stable_hash(dataclasses.asdict(job))


# Verdicts a busy machine can cause (a reference slowed past its limit, a sandbox failure): they say nothing final
# about the data, so they are never cached; the next run judges such a reference again.
NOT_FINAL = frozenset({"TLE", "INFRA"})


class ReferenceCache:
    """Append-only JSONL of reference outcomes keyed by job hash (a cut last line is ignored). Outcomes in
    `NOT_FINAL` are neither written nor read back (an older cache may hold some)."""

    def __init__(self, path: Path):
        self.path = path
        self.data: dict[str, RefOutcome] = {}
        if path.is_file():
            for row in store.read_jsonl(path, tolerate_bad_lines=True):
                try:
                    outcome = RefOutcome(**row["outcome"])
                    key = row["key"]
                except (KeyError, TypeError):
                    continue
                if outcome.verdict in NOT_FINAL:
                    self.data.pop(key, None)  # a later line of the same job decides
                else:
                    self.data[key] = outcome

    def get(self, job: RefJob) -> RefOutcome | None:
        return self.data.get(_ref_key(job))

    def put(self, job: RefJob, outcome: RefOutcome) -> None:
        if outcome.verdict in NOT_FINAL:  # load or a sandbox failure, not a property of the data: never cached
            return
        key = _ref_key(job)
        self.data[key] = outcome
        store.append_jsonl(self.path, {"key": key, "outcome": dataclasses.asdict(outcome)})


def run_references(
    jobs: list[RefJob], runner: ReferenceRunner, cache: ReferenceCache, progress: bool, force: bool = False
) -> tuple[list[RefOutcome], int]:
    """Outcomes of `jobs`, from the cache where it has one (never with `force`); returns (outcomes, runs done)."""
    outcomes: list[RefOutcome | None] = [None if force else cache.get(j) for j in jobs]
    todo = [i for i, o in enumerate(outcomes) if o is None]
    if todo:
        saved: set[int] = set()

        def save(k: int, outcome: RefOutcome) -> None:  # as each run completes: a Ctrl-C keeps it
            cache.put(jobs[todo[k]], outcome)
            saved.add(k)

        fresh = runner.run_many([jobs[i] for i in todo], progress=progress, on_result=save)
        if len(fresh) != len(todo):
            raise RuntimeError(f"reference runner returned {len(fresh)} outcomes for {len(todo)} jobs")
        for k, (i, o) in enumerate(zip(todo, fresh, strict=True)):
            outcomes[i] = o
            if k not in saved:  # a runner that returns everything at the end
                cache.put(jobs[i], o)
    return outcomes, len(todo)  # type: ignore[return-value]


# ---------------------------------------------------------------- call-mode outputs: one form


def _ambiguity(p: Problem) -> str:
    shown = ", ".join(str(i) for i in p.ambiguous[:10]) + (", ..." if len(p.ambiguous) > 10 else "")
    return (f"call-mode outputs {shown} are stored as [x] in a test set that is not wrapped throughout, so each "
            "means x or the list [x]; no reference run decided which")


def _list_reading_candidates(p: Problem) -> tuple[int, ...]:
    """Tests whose expected value may be the list [v] rather than the v the reader took: the ambiguous ones, or
    in a set wrapped throughout (data in the unwrapped convention whose every answer is a one-element list looks
    wrapped) all of them."""
    if p.io_mode != "call":
        return ()
    if "unwrapped_output" in p.notes:
        return p.ambiguous
    return tuple(range(len(p.outputs)))


def _decide_call_outputs(kept: list, jobs: list[RefJob], outcomes: list, runner, cache, force: bool) -> int:
    """Normalise call-mode outputs to one form, decided by the reference: a reference that is WA with the outputs as
    read runs again with each candidate output `v` read as the list `[v]` (`_list_reading_candidates`); per test,
    the reading it passes decides (tests run independently, so readings may differ between tests). A problem so
    decided gets its outputs replaced (and the flag `output_read_as_list`); one that neither reading decides keeps
    its WA (quarantined, `reference_failed`). Returns the runs done."""
    todo = [i for i, o in enumerate(outcomes)
            if o is not None and o.verdict == "WA" and _list_reading_candidates(kept[i][1])]
    if not todo:
        return 0
    listed = []
    for i in todo:
        candidates = set(_list_reading_candidates(kept[i][1]))
        outs = [[v] if k in candidates else v for k, v in enumerate(jobs[i].outputs)]
        listed.append(dataclasses.replace(jobs[i], outputs=outs))
    list_out, n = run_references(listed, runner, cache, progress=False, force=force)
    for i, job, o in zip(todo, listed, list_out, strict=True):
        where, p, flags = kept[i]
        if o.verdict == "AC":
            outputs, outcome = job.outputs, o
        else:  # per test: the first reading where it failed, the list reading where it passed
            first, second = outcomes[i].failed, o.failed
            candidates = set(_list_reading_candidates(p))
            if first is None or second is None or not set(first) <= candidates or set(first) & set(second):
                continue
            outputs = [job.outputs[k] if k in set(first) else v for k, v in enumerate(jobs[i].outputs)]
            outcome = RefOutcome("AC", o.total, o.total, outcomes[i].time_s + o.time_s, "", [])
        kept[i] = (where, dataclasses.replace(p, outputs=outputs, ambiguous=()), [*flags, "output_read_as_list"])
        outcomes[i] = outcome
    return n


# ---------------------------------------------------------------- the stage


def _quarantine_row(where: str, source_id: str | None, reason: str, detail: str = "", raw: str = "") -> dict:
    return {"where": where, "source_id": source_id, "reason": reason, "detail": detail, "raw": raw[:2000]}


def validate(
    input_path: str | Path,
    out_dir: str | Path,
    options: ValidateOptions = ValidateOptions(),
    runner: ReferenceRunner | None = None,
    progress: bool = False,
    force: bool = False,
) -> ValidateResult:
    """Run stage 1 (no stage-state check here: see ``pipeline.run_validate``). ``force``: run every reference,
    cached or not."""
    out_dir = Path(out_dir)
    kept: list[tuple[str, Problem, list[str]]] = []  # (where, problem, flags)
    quarantined: list[dict] = []
    seen_ids: dict[str, str] = {}
    seen_content: dict[str, str] = {}
    items = read_problems(input_path)
    if progress:
        from tqdm import tqdm

        items = tqdm(items, desc="read", unit="rec", leave=False)
    for number, item in enumerate(items, 1):
        if isinstance(item, RecordError):
            quarantined.append(_quarantine_row(item.where, None, "schema", item.reason, item.raw))
            continue
        where = f"{input_path}:{item.source_id}" if ":" not in item.source_id else item.source_id
        try:
            p = normalise(item)
            flags = special_flags(p, item.inputs, item.outputs)
        except Exception as e:  # a record our checks cannot digest is quarantined, never a crash
            quarantined.append(_quarantine_row(where, item.source_id, "schema", f"{type(e).__name__}: {e}"))
            continue
        if item.source_id in seen_ids:
            quarantined.append(
                _quarantine_row(
                    where, item.source_id, "duplicate_id", f"same source_id as record {seen_ids[item.source_id]}"
                )
            )
            continue
        seen_ids[item.source_id] = str(number)
        content = store.stable_hash([p.statement, p.io_mode, p.fn_name, p.inputs, p.outputs])
        if options.dedupe and content in seen_content:
            quarantined.append(
                _quarantine_row(where, p.source_id, "duplicate", f"same statement and tests as {seen_content[content]}")
            )
            continue
        seen_content[content] = p.source_id
        if not p.reference_solution or not p.reference_solution.strip():
            if options.run_reference:
                quarantined.append(_quarantine_row(where, p.source_id, "no_reference", "no reference solution"))
                continue
        if p.ambiguous and not options.run_reference:
            quarantined.append(_quarantine_row(where, p.source_id, "ambiguous_call_output", _ambiguity(p)))
            continue
        kept.append((where, p, flags))

    outcomes: list[RefOutcome | None] = [None] * len(kept)
    n_runs = 0
    if options.run_reference and kept:
        if runner is None:
            from mrgrpo.data.runner import SandboxRunner

            runner = SandboxRunner()
        cache = ReferenceCache(out_dir / "cache" / "reference_runs.jsonl")
        jobs = [RefJob(p.reference_solution, p.inputs, p.outputs, p.fn_name, None,
                       reference_time_s(options.time_s, p.time_s)) for _, p, _ in kept]
        outcomes, n_runs = run_references(jobs, runner, cache, progress, force)
        # Float answers: retry failures with a tolerance; such problems get the needs_float_tol flag.
        retry = [i for i, o in enumerate(outcomes) if o.verdict == "WA" and "float_output" in kept[i][2]]
        if retry:
            tol_jobs = [dataclasses.replace(jobs[i], float_tol=options.float_tol) for i in retry]
            tol_out, n2 = run_references(tol_jobs, runner, cache, progress=False, force=force)
            n_runs += n2
            for i, o in zip(retry, tol_out, strict=True):
                if o.verdict == "AC":
                    outcomes[i] = o
                    kept[i][2].append("needs_float_tol")
        n_runs += _decide_call_outputs(kept, jobs, outcomes, runner, cache, force)

    problems: list[dict] = []
    for (where, p, flags), outcome in zip(kept, outcomes, strict=True):
        if outcome is not None and outcome.verdict != "AC":
            reason = "sandbox_infra" if outcome.verdict == "INFRA" else "reference_failed"
            detail = f"{outcome.verdict}: passed {outcome.passed}/{outcome.total}" + (
                f"; {outcome.detail}" if outcome.detail else ""
            )
            if p.ambiguous and outcome.verdict == "WA":
                detail += f"; neither reading of its ambiguous outputs passes ({_ambiguity(p)})"
            quarantined.append(_quarantine_row(where, p.source_id, reason, detail))
            continue
        p = dataclasses.replace(p, ambiguous=())  # decided: the reference passed with these outputs
        if outcome is None and options.run_reference is False:
            flags = [*flags, "reference_not_run"]
        k = public_count(len(p.inputs), options.public_tests)
        if k == 0:
            flags = [*flags, "no_public_tests"]
        row = problem_to_dict(p)
        # the reward and the agent loop judge such problems with this tolerance (test JSON "float_tol")
        float_tol = options.float_tol if "needs_float_tol" in flags else None
        row.update(
            where=where,
            problem_hash=problem_hash(p),
            special=sorted(set(flags)),
            float_tol=float_tol,
            n_public=k,
            public_tests=public_tests_json(p, k, float_tol),
            reference={
                "verdict": outcome.verdict,
                "passed": outcome.passed,
                "total": outcome.total,
                "time_s": round(outcome.time_s, 4),
            }
            if outcome
            else None,
        )
        problems.append(row)

    return ValidateResult(problems, quarantined, n_runs)
