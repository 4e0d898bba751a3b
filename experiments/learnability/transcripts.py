"""SFT transcripts in the agent loop's exact token format, made by running the real `PlanCodeAgentLoop`.

Exact by construction: a transcript is what `PlanCodeAgentLoop.run()` returns when its rollout server is a script
(`ScriptedServer`: each turn is the tokenizer's encoding of a scripted assistant text plus ``<|im_end|>``) and its
judge (`PlanCodeAgentLoop.judge`, set on that one loop) replays results the REAL sandbox produced beforehand for
exactly the jobs the loop submits (`ReplaySandbox`). So the first prompt, the injected turns (plan -> code request,
feedback messages), the Continuous Token boundaries (``<|im_end|>\\n``, generation prompts with the empty think
block under ``enable_thinking=False``) and the masks are the loop's own, and any change the loop makes to them
flows into the transcripts without a change here. ``input_ids = prompt_ids + response_ids`` and ``loss_mask =
[0] * len(prompt_ids) + response_mask``: only the model's own turns are trained (with their closing
``<|im_end|>``); the prompt and every injected token are not.

Kinds (`KINDS`):

- ``plan_code``: (plan turn, with ``plan_source=self``) -> the reference solution, which passes the public tests;
- ``fix``: (plan turn) -> a mutant of the reference (`learnability.mutate`) that the sandbox saw FAIL the public
  tests -> the feedback turn the loop builds from that real result -> the reference, which passes.

The plan text is the row's ``extra_info.plan`` when it has one (teacher or family plan), else `generic_plan`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mrgrpo.code_extract import extract_code
from mrgrpo.first_turn import PLAN_SOURCES

logger = logging.getLogger(__name__)

KINDS = ("plan_code", "fix")
# Verdicts of a mutant that count as a real failure (INFRA is the sandbox's fault, not the program's).
FAILING_VERDICTS = frozenset({"WA", "RE", "TLE", "MLE", "OLE", "SE"})


# ------------------------------------------------------------------ rows and scripted texts
def row_from_problem(problem, public_tests: int = 1, index: int = 0, split: str = "train", plan: str = "") -> dict:
    """A verl parquet row for a `mrgrpo.apps.Problem`, built by `mrgrpo.data.build.make_row` (the same rows
    `mrgrpo data prepare` writes; the first ``min(public_tests, n - 1)`` tests are public)."""
    from mrgrpo.data.build import make_row
    from mrgrpo.data.validate import public_count

    k = public_count(len(problem.inputs), public_tests)
    return make_row(problem, {"n_public": k, "special": []}, plan, "given" if plan else "", split, index)


def rows_from_problems(problems: Iterable, public_tests: int = 1) -> list[dict]:
    """`row_from_problem` for each `mrgrpo.apps.Problem` (index = position)."""
    return [row_from_problem(p, public_tests=public_tests, index=i) for i, p in enumerate(problems)]


def read_rows(path) -> list[dict]:
    """Rows of a prepared parquet (``train.parquet`` / ``val.parquet``) as plain Python objects."""
    import pyarrow.parquet as pq

    return pq.read_table(str(path)).to_pylist()


def answer_text(code: str) -> str:
    """The scripted code turn: the program in one python fence, nothing else."""
    return "```python\n" + code.strip("\n") + "\n```"


def generic_plan(extra_info: dict) -> str:
    """A plan for a row without one: the contract of the task in words (content-free, but in the plan format)."""
    if extra_info.get("io_mode") == "call":
        entry = extra_info.get("fn_name") or "the function"
        if extra_info.get("class_name"):
            entry = f"{extra_info['class_name']}.{entry}"
        return (f"Implement {entry}. Take the arguments as given, compute the value the statement asks for, "
                "handle the edge cases it mentions, and return the value without printing anything.")
    return ("Read the input from standard input in the format the statement describes. Compute the answer the "
            "statement asks for, handle the edge cases it mentions, and print the answer in the required format.")


def plan_for_row(extra_info: dict) -> str:
    return (extra_info.get("plan") or "").strip() or generic_plan(extra_info)


# ------------------------------------------------------------------ the loop's two seams
class ScriptedServer:
    """Stands in for verl's server manager: each `generate` returns the next scripted assistant text, encoded by the
    tokenizer, plus ``<|im_end|>``, with (constant) logprobs. Records every prompt it was sent."""

    def __init__(self, tokenizer, turns: Sequence[str], logprob: float = -0.001):
        self.tokenizer = tokenizer
        self.turns = list(turns)
        self.logprob = logprob
        self.prompts: list[list[int]] = []
        self.outputs: list[list[int]] = []
        self.im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        if not self.turns:
            raise RuntimeError("the agent loop asked for more turns than scripted")
        self.prompts.append(list(prompt_ids))
        ids = self.tokenizer.encode(self.turns.pop(0), add_special_tokens=False) + [self.im_end]
        ids = ids[: int(sampling_params["max_tokens"])]
        self.outputs.append(ids)
        await asyncio.sleep(0)
        return TokenOutput(token_ids=ids, log_probs=[self.logprob] * len(ids), num_preempted=0, extra_fields={})


class ReplaySandbox:
    """The loop's judge (`PlanCodeAgentLoop.judge`) for a transcript: returns the real sandbox's result for each
    program, and raises for a job it was not given a result for (or one that differs from the job that produced it)."""

    def __init__(self, results: dict[str, tuple[Any, Any]]):
        self.results = dict(results)  # program -> (the Job that was run, its ExecResult)
        self.jobs: list[Any] = []

    async def run_async(self, job):
        self.jobs.append(job)
        if job.code not in self.results:
            raise KeyError("ReplaySandbox: no recorded result for a program the loop submitted")
        recorded_job, result = self.results[job.code]
        if recorded_job != job:
            raise ValueError("ReplaySandbox: the loop submitted a different job than the one that was run")
        return result


# ------------------------------------------------------------------ one transcript
_LOOP_KEYS = ("plan_source", "rounds", "min_turn_tokens", "feedback_max_chars", "feedback_stderr_chars")
# The plan sources transcripts are made for: the loop's table (`mrgrpo.first_turn.PLAN_SOURCES`) but teacher, whose
# plan is in the prompt, so a transcript would train no plan turn and no plan-following of its own.
TRANSCRIPT_PLAN_SOURCES = tuple(s for s in PLAN_SOURCES if s != "teacher")


@dataclass(frozen=True)
class LoopSettings:
    """The agent-loop settings transcripts are made with: use the GRPO run's values. The loop's own keys left at
    None take the recipe's defaults (the trainer yaml's ``mrgrpo.agent_loop`` section, their one home)."""

    plan_source: str | None = None
    rounds: int | None = None
    enable_thinking: bool = False
    max_prompt_length: int = 2048
    max_response_length: int = 4096
    min_turn_tokens: int | None = None
    feedback_max_chars: int | None = None
    feedback_stderr_chars: int | None = None
    hf_model_type: str = "qwen3"

    def __post_init__(self):
        from mrgrpo.config import recipe_settings

        recipe = recipe_settings()
        for key in _LOOP_KEYS:
            if getattr(self, key) is None:
                object.__setattr__(self, key, recipe[key])

    def loop_config(self):
        """The trainer config the loop reads: the recipe's ``mrgrpo.agent_loop`` section with these settings."""
        from omegaconf import OmegaConf

        from mrgrpo.config import recipe_settings

        ours = {key: getattr(self, key) for key in _LOOP_KEYS}
        return OmegaConf.create({
            # the prompt is measured (and rows over max_prompt_length dropped) here, never cut by verl
            "actor_rollout_ref": {"rollout": {"prompt_length": 1 << 30, "response_length": self.max_response_length,
                                              "full_determinism": False}},
            "data": {"apply_chat_template_kwargs": {"enable_thinking": self.enable_thinking}},
            "mrgrpo": {"agent_loop": {**recipe_settings(), **ours}},
        })


@dataclass
class Transcript:
    source_id: str
    kind: str
    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    stop_reason: str
    public_verdicts: list[str]
    mutation: str = ""  # "<kind>@line<n>" of the failed attempt (fix transcripts)
    extra: dict = field(default_factory=dict)

    @property
    def input_ids(self) -> list[int]:
        return list(self.prompt_ids) + list(self.response_ids)

    @property
    def loss_mask(self) -> list[int]:
        return [0] * len(self.prompt_ids) + list(self.response_mask)

    def to_row(self) -> dict:
        return {
            "source_id": self.source_id,
            "kind": self.kind,
            "mutation": self.mutation,
            "input_ids": self.input_ids,
            "loss_mask": self.loss_mask,
            "prompt_len": len(self.prompt_ids),
            "n_tokens": len(self.prompt_ids) + len(self.response_ids),
            "n_trained": int(sum(self.response_mask)),
            "stop_reason": self.stop_reason,
            "public_verdicts": list(self.public_verdicts),
        }


def run_loop(tokenizer, raw_prompt: list[dict], extra_info: dict, turns: Sequence[str], sandbox: ReplaySandbox,
             settings: LoopSettings = LoopSettings(), cfg=None):
    """Drive the real `PlanCodeAgentLoop.run()` once with scripted ``turns``; return (AgentLoopOutput, server).
    ``cfg``: ``settings.loop_config()`` made once by a caller that runs many loops (made here when None)."""
    from mrgrpo.agent_loop import build_loop

    if cfg is None:
        cfg = settings.loop_config()
    server = ScriptedServer(tokenizer, turns)
    loop = build_loop(cfg, server, tokenizer, settings.hf_model_type)
    loop.judge = sandbox  # this loop's judge only: the class keeps the real sandbox
    params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True}
    out = loop.loop.run_until_complete(loop.run(params, raw_prompt=raw_prompt, extra_info=extra_info))
    return out, server


def _row_parts(row: dict, settings: LoopSettings, sys_prompt: str | None) -> tuple[list[dict], dict]:
    raw_prompt = [{"role": m["role"], "content": m["content"]} for m in row["prompt"]]
    if sys_prompt:
        from mrgrpo.dataset import replace_system_message

        raw_prompt = replace_system_message(raw_prompt, sys_prompt)
    extra_info = dict(row.get("extra_info") or {})
    extra_info["plan_source"] = settings.plan_source  # transcripts follow the run's plan source, whatever the row says
    return raw_prompt, extra_info


def scripted_turns(kind: str, plan: str | None, reference: str, mutant: str | None = None) -> list[str]:
    turns = [plan] if plan is not None else []
    if kind == "fix":
        if mutant is None:
            raise ValueError("a fix transcript needs the failed attempt")
        turns.append(answer_text(mutant))
    turns.append(answer_text(reference))
    return turns


def transcript_from_loop(tokenizer, row: dict, kind: str, sandbox: ReplaySandbox, reference: str,
                         mutant: str | None = None, settings: LoopSettings = LoopSettings(),
                         sys_prompt: str | None = None, plan_fn: Callable[[dict], str] = plan_for_row,
                         cfg=None) -> Transcript:
    """One transcript of ``kind`` for ``row``; raises `TranscriptRejected` if the loop did not end as scripted.
    ``cfg``: as for `run_loop`."""
    raw_prompt, extra_info = _row_parts(row, settings, sys_prompt)
    plan = plan_fn(extra_info) if settings.plan_source == "self" else None
    turns = scripted_turns(kind, plan, reference, mutant)
    out, server = run_loop(tokenizer, raw_prompt, extra_info, turns, sandbox, settings, cfg)
    ef = out.extra_fields
    source_id = str(extra_info.get("source_id", "?"))
    if ef["stop_reason"] == "error":
        raise TranscriptRejected("loop_error", f"{source_id}: {ef['error']}")
    if server.turns:
        raise TranscriptRejected(f"stopped_{ef['stop_reason']}", f"{source_id}: {len(server.turns)} turns unused")
    expected = ["AC"] if kind == "plan_code" else [None, "AC"]
    verdicts = list(ef["public_verdicts"])
    ok = ef["stop_reason"] == "passed" and len(verdicts) == len(expected) and verdicts[-1] == "AC"
    if kind == "plan_code" and ef["stop_reason"] == "no_public_tests":
        ok = True
    if kind == "fix" and ok and verdicts[0] not in FAILING_VERDICTS:
        ok = False
    if not ok:
        raise TranscriptRejected(f"stopped_{ef['stop_reason']}", f"{source_id}: verdicts {verdicts}")
    if len(out.prompt_ids) > settings.max_prompt_length:
        raise TranscriptRejected("prompt_too_long", f"{source_id}: {len(out.prompt_ids)} prompt tokens")
    # The loop's own accounting, checked once more: mask 1 is exactly what the script generated.
    trained = [t for t, m in zip(out.response_ids, out.response_mask, strict=True) if m]
    if trained != [t for turn in server.outputs for t in turn]:
        raise RuntimeError(f"{source_id}: the loop's mask-1 tokens differ from the generated ones")
    return Transcript(source_id, kind, list(out.prompt_ids), list(out.response_ids), list(out.response_mask),
                      ef["stop_reason"], verdicts, extra={"num_turns": out.num_turns})


class TranscriptRejected(Exception):
    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


# ------------------------------------------------------------------ many transcripts
@dataclass
class BuildReport:
    transcripts: list[Transcript]
    skipped: Counter = field(default_factory=Counter)  # reason -> rows
    mutations: Counter = field(default_factory=Counter)  # mutation kind -> fix transcripts
    failed_verdicts: Counter = field(default_factory=Counter)  # verdict of the failed attempt -> fix transcripts
    sandbox_runs: int = 0

    def summary(self) -> dict:
        kinds = Counter(t.kind for t in self.transcripts)
        return {
            "transcripts": len(self.transcripts),
            "by_kind": dict(sorted(kinds.items())),
            "tokens": sum(len(t.prompt_ids) + len(t.response_ids) for t in self.transcripts),
            "trained_tokens": sum(sum(t.response_mask) for t in self.transcripts),
            "max_tokens": max((len(t.prompt_ids) + len(t.response_ids) for t in self.transcripts), default=0),
            "skipped": dict(sorted(self.skipped.items())),
            "mutations": dict(sorted(self.mutations.items())),
            "failed_verdicts": dict(sorted(self.failed_verdicts.items())),
            "sandbox_runs": self.sandbox_runs,
        }


def _run_jobs(jobs: list, workers: int | None, progress: bool, runner: Callable | None) -> list:
    if not jobs:
        return []
    if runner is not None:
        return list(runner(jobs))
    from mrgrpo.sandbox import run_batch

    return run_batch(jobs, workers=workers, progress=progress)


def build_transcripts(
    rows: Iterable[dict],
    tokenizer,
    kinds: Sequence[str] = KINDS,
    settings: LoopSettings = LoopSettings(),
    fixes_per_problem: int = 1,
    max_mutants: int = 12,
    seed: int = 0,
    workers: int | None = None,
    progress: bool = False,
    sys_prompt: str | None = None,
    plan_fn: Callable[[dict], str] = plan_for_row,
    runner: Callable[[list], list] | None = None,
    loop_workers: int | None = None,
) -> BuildReport:
    """Transcripts of ``kinds`` for every usable row.

    Every program the loop will test is run first in the sandbox (``runner``: a function jobs -> results, default
    `mrgrpo.sandbox.run_batch`) on exactly the job the loop submits (`mrgrpo.agent_loop.parse_public_tests`,
    ``TestSet.job``): the reference must pass; mutants are tried in a seeded order, at most ``max_mutants`` per
    problem, until ``fixes_per_problem`` of them fail. Then the loop is run with those results replayed, on
    ``loop_workers`` forked processes (default `default_loop_workers`; the transcripts do not depend on it).
    """
    from tqdm import tqdm

    from mrgrpo.agent_loop import parse_public_tests

    from learnability.mutate import shuffled_mutants

    unknown = set(kinds) - set(KINDS)
    if unknown:
        raise ValueError(f"unknown transcript kinds {sorted(unknown)}; known: {KINDS}")
    report = BuildReport([])
    usable: list[tuple[dict, str, Any]] = []  # (row, reference program, public TestSet)
    for row in rows:
        info = row.get("extra_info") or {}
        ref = (info.get("reference_solution") or "").strip("\n")
        code = extract_code(answer_text(ref)) if ref.strip() else None
        if not code or "```" in ref:
            report.skipped["no_usable_reference"] += 1
            continue
        try:
            tests = parse_public_tests(info)
        except Exception as exc:  # a malformed row: skip it, say why
            logger.warning("learnability: row %s: bad public tests: %s", info.get("source_id"), exc)
            report.skipped["bad_public_tests"] += 1
            continue
        usable.append((row, code, tests))

    # 1. the reference on the public tests
    ref_idx = [i for i, (_, _, tests) in enumerate(usable) if len(tests)]
    ref_jobs = [usable[i][2].job(usable[i][1], stop_on_first_failure=True) for i in ref_idx]
    ref_results = _run_jobs(ref_jobs, workers, progress, runner)
    report.sandbox_runs += len(ref_jobs)
    recorded: list[dict[str, tuple[Any, Any]]] = [{} for _ in usable]
    ref_ok = [True] * len(usable)
    for i, job, res in zip(ref_idx, ref_jobs, ref_results, strict=True):
        recorded[i][job.code] = (job, res)
        if str(getattr(res.verdict, "value", res.verdict)) != "AC":
            ref_ok[i] = False
            report.skipped[f"reference_{getattr(res.verdict, 'value', res.verdict)}"] += 1

    # 2. failing mutants
    chosen: list[list[tuple[str, str]]] = [[] for _ in usable]  # (program, mutation label)
    if "fix" in kinds and fixes_per_problem > 0:
        candidates: dict[int, list] = {}
        for i, (row, code, tests) in enumerate(usable):
            if not ref_ok[i]:
                continue
            if not len(tests):
                report.skipped["fix_no_public_tests"] += 1
                continue
            sid = str((row.get("extra_info") or {}).get("source_id", i))
            found = []
            for m in shuffled_mutants(code, f"{seed}:{sid}"):
                program = extract_code(answer_text(m.code))
                if program and program != code and "```" not in m.code:
                    found.append((program, f"{m.kind}@line{m.line}"))
                if len(found) >= max_mutants:
                    break
            candidates[i] = found
        for attempt in range(max_mutants):
            todo = [i for i, c in candidates.items() if len(chosen[i]) < fixes_per_problem and attempt < len(c)]
            if not todo:
                break
            jobs = [usable[i][2].job(candidates[i][attempt][0], stop_on_first_failure=True) for i in todo]
            results = _run_jobs(jobs, workers, progress, runner)
            report.sandbox_runs += len(jobs)
            for i, job, res in zip(todo, jobs, results, strict=True):
                verdict = str(getattr(res.verdict, "value", res.verdict))
                if verdict in FAILING_VERDICTS:
                    recorded[i][job.code] = (job, res)
                    chosen[i].append(candidates[i][attempt])
        for i in candidates:
            if not chosen[i]:
                report.skipped["fix_no_failing_mutant"] += 1

    # 3. the loop, with every result replayed (its config made once: the same for every transcript)
    cfg = settings.loop_config()
    todo = [(row, code, recorded[i], chosen[i]) for i, (row, code, _) in enumerate(usable) if ref_ok[i]]
    common = (tokenizer, kinds, settings, sys_prompt, plan_fn, cfg)
    bar = tqdm(total=len(usable), desc="transcripts", unit="row", disable=not progress)
    bar.update(len(usable) - len(todo))
    for outcomes in _loop_rows(todo, common, loop_workers):
        bar.update(1)
        for kind, t, note in outcomes:
            if t is None:
                report.skipped[f"{kind}_{note}"] += 1
                continue
            if kind == "fix":
                report.mutations[note.split("@")[0]] += 1
                report.failed_verdicts[t.public_verdicts[0]] += 1
            report.transcripts.append(t)
    bar.close()
    return report


LOOP_PARALLEL_MIN = 400  # rows from which build_transcripts runs the loop in worker processes by default
_LOOP_CHUNK = 100  # rows per worker task
_loop_state: dict[str, Any] = {}  # what forked loop workers read (set only while their pool lives)


def _row_transcripts(item: tuple, common: tuple) -> list[tuple[str, Transcript | None, str]]:
    """The transcripts of one row: ``(kind, transcript, mutation label)``, or ``(kind, None, reason)`` for one the
    loop rejected."""
    row, code, recorded, chosen = item
    tokenizer, kinds, settings, sys_prompt, plan_fn, cfg = common
    sandbox = ReplaySandbox(recorded)
    jobs_to_make: list[tuple[str, str | None, str]] = []
    if "plan_code" in kinds:
        jobs_to_make.append(("plan_code", None, ""))
    jobs_to_make += [("fix", program, label) for program, label in chosen]
    outcomes: list[tuple[str, Transcript | None, str]] = []
    for kind, mutant, label in jobs_to_make:
        try:
            t = transcript_from_loop(tokenizer, row, kind, sandbox, code, mutant, settings, sys_prompt, plan_fn, cfg)
        except TranscriptRejected as exc:
            outcomes.append((kind, None, exc.reason))
            continue
        if kind == "fix":
            t.mutation = label
        outcomes.append((kind, t, label))
    return outcomes


def _worker_event_loop() -> None:
    """A forked loop worker's own event loop: one this process inherited shares its epoll instance and wake-up
    pipe with the parent and the other workers (it is left as it is, never closed here: closing it would
    unregister those in the parent's epoll instance too)."""
    asyncio.set_event_loop(asyncio.new_event_loop())


def _loop_chunk(bounds: tuple[int, int]) -> list[list]:
    lo, hi = bounds
    return [_row_transcripts(item, _loop_state["common"]) for item in _loop_state["todo"][lo:hi]]


def default_loop_workers(n_rows: int) -> int:
    """Loop processes for ``n_rows`` rows: one per usable CPU from `LOOP_PARALLEL_MIN` rows on, else none."""
    if n_rows < LOOP_PARALLEL_MIN:
        return 1
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _loop_rows(todo: list[tuple], common: tuple, workers: int | None):
    """`_row_transcripts` of every item of ``todo``, in order. With more than one worker the rows are shared out
    in chunks to forked processes (each runs its own loops; results come back in order), so the transcripts are
    the same for any number of workers."""
    workers = default_loop_workers(len(todo)) if workers is None else workers
    if workers <= 1 or len(todo) <= _LOOP_CHUNK:
        for item in todo:
            yield _row_transcripts(item, common)
        return
    import multiprocessing

    bounds = [(lo, min(len(todo), lo + _LOOP_CHUNK)) for lo in range(0, len(todo), _LOOP_CHUNK)]
    _loop_state.update(todo=todo, common=common)
    try:
        # fork: the workers share the rows, the sandbox's results and the tokenizer with this process as they are
        with multiprocessing.get_context("fork").Pool(workers, initializer=_worker_event_loop) as pool:
            for part in pool.imap(_loop_chunk, bounds):
                yield from part
    finally:
        _loop_state.clear()


def write_parquet(transcripts: Sequence[Transcript], path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([
        ("source_id", pa.string()), ("kind", pa.string()), ("mutation", pa.string()),
        ("input_ids", pa.list_(pa.int32())), ("loss_mask", pa.list_(pa.int8())),
        ("prompt_len", pa.int32()), ("n_tokens", pa.int32()), ("n_trained", pa.int32()),
        ("stop_reason", pa.string()), ("public_verdicts", pa.list_(pa.string())),
    ])
    table = pa.Table.from_pylist([t.to_row() for t in transcripts], schema=schema)
    pq.write_table(table, str(path), compression="zstd")


def settings_json(settings: LoopSettings) -> str:
    from dataclasses import asdict

    return json.dumps(asdict(settings), sort_keys=True)
