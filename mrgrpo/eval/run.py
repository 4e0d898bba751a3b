"""Rollouts and judging for ``mrgrpo eval``: verl's validation path, one process, no trainer.

What is the same as training / verl validation, and how:

- Rows: `mrgrpo.dataset.MrGRPODataset` loads the parquet, i.e. verl's ``RLHFDataset`` with mrgrpo's first-turn
  rewrite (`mrgrpo.first_turn.first_turn_messages` for the plan source) and verl's overlong-prompt filter;
  ``--limit`` is verl's ``max_samples`` (the first rows). Each row's ``__getitem__`` dict is what the
  AgentLoopWorker passes to the loop (``raw_prompt``, ``extra_info``, ``index``, ...).
- Conversation: `mrgrpo.agent_loop.PlanCodeAgentLoop`, instantiated per trajectory with ``hydra.utils.instantiate``
  from the recipe's agent-loop yaml entry, with the keyword arguments verl's ``AgentLoopWorker._run_agent_loop``
  gives it, and run with the worker's sampling dict (``temperature, top_p, top_k, repetition_penalty=1.0,
  logprobs``).
- Judge: `mrgrpo.reward.compute_score` on the row's hidden-test ground truth, with ``extra_info`` = the row's
  extra_info updated with the loop's ``extra_fields`` (plus ``num_turns``, ``rollout_reward_scores``) and
  ``solution_str`` = the response decoded without special tokens, as verl's naive reward manager calls it.

Added for evaluation only: the first code attempt's program. A per-trajectory recorder between the loop and the
server keeps each generation's tokens; the code turns are the last ``attempts`` generations, and the program of
one is `mrgrpo.code_extract.extract_code` of its text (as the loop reads it). It is scored by the same
``compute_score`` on the hidden tests (``acc`` at attempt 1). The recorder's reading is checked against the
loop's own ``final_code`` for every sample (``final_code_mismatches`` in the summary must be 0).
"""

from __future__ import annotations

import asyncio
import copy
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from mrgrpo.code_extract import extract_code
from mrgrpo.config import AGENT_LOOP_YAML, recipe_settings
from mrgrpo.data.build import AGENT_NAME
from mrgrpo.first_turn import PLAN_SOURCES
from mrgrpo.reward import RETIRED_KWARGS
from mrgrpo.testset import LimitsOverride

DEFAULT_AGENT_LOOP_YAML = AGENT_LOOP_YAML


@dataclass(frozen=True)
class EvalSettings:
    n: int = 10
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    plan_source: str | None = None  # None: the recipe trainer yaml's mrgrpo.agent_loop.plan_source
    rounds: int | None = None  # None: the recipe trainer yaml's mrgrpo.agent_loop.rounds
    max_prompt_length: int = 2048
    max_response_length: int = 4096
    limit: int = -1
    concurrency: int = 256
    enable_thinking: bool = False
    logprobs: bool = False
    agent_loop_config: str | None = None  # the agent-loop yaml (names the class); None: the recipe's
    # reward.custom_reward_function.reward_kwargs of the run (weights, ...), without the limits:
    reward_kwargs: dict = field(default_factory=dict)
    # the run's per-test limits override (the recipe's mrgrpo.limits): public and hidden tests alike
    limits: LimitsOverride = field(default_factory=LimitsOverride)

    def __post_init__(self):
        if self.plan_source is None:
            object.__setattr__(self, "plan_source", recipe_settings()["plan_source"])
        if self.plan_source not in PLAN_SOURCES:
            raise ValueError(f"--plan-source must be one of {PLAN_SOURCES}, got {self.plan_source!r}")
        if self.n < 1:
            raise ValueError(f"--n must be >= 1, got {self.n}")
        if self.concurrency < 1:
            raise ValueError(f"--concurrency must be >= 1, got {self.concurrency}")
        limit_keys = sorted(set(self.reward_kwargs) & {*RETIRED_KWARGS, "limits"})
        if limit_keys:
            raise ValueError(f"reward_kwargs {limit_keys}: the per-test limits are EvalSettings.limits (--time-s, "
                             "--wall-s, --memory-mb), one override for the public and the hidden tests")

    def score_kwargs(self) -> dict:
        """The keyword arguments of `mrgrpo.reward.compute_score` for this run: ``reward_kwargs`` plus ``limits``,
        as the trainer yaml passes them."""
        return {**self.reward_kwargs, "limits": asdict(self.limits)}


@dataclass
class SampleRecord:
    problem_id: str
    index: int
    data_source: str
    difficulty: str
    plan_source: str
    sample: int
    verdict: str
    acc: float
    attempt1_verdict: str
    attempt1_acc: float
    attempts: int
    stop_reason: str
    model_tokens: int
    injected_tokens: int
    public_pass: list = field(default_factory=list)
    public_verdicts: list = field(default_factory=list)
    num_tests: int = 0
    error: str = ""
    final_code_mismatch: bool = False
    plan_tokens: int = 0


def trainer_config(settings: EvalSettings):
    """The part of verl's trainer config that the loop and the dataset read, as the recipe sets it (the loop's
    settings: the recipe trainer yaml's ``mrgrpo.agent_loop``, with this run's plan source and rounds; and
    ``mrgrpo.limits``, this run's limits override, which `score_kwargs` gives the reward too)."""
    from omegaconf import OmegaConf

    chat_kwargs = {"enable_thinking": bool(settings.enable_thinking)}
    return OmegaConf.create(
        {
            "actor_rollout_ref": {
                "rollout": {
                    "prompt_length": settings.max_prompt_length,
                    "response_length": settings.max_response_length,
                    "full_determinism": False,
                    "temperature": settings.temperature,
                    "top_p": settings.top_p,
                    "top_k": settings.top_k,
                }
            },
            "data": {
                "prompt_key": "prompt",
                "max_prompt_length": settings.max_prompt_length,
                "max_response_length": settings.max_response_length,
                "return_raw_chat": True,
                "filter_overlong_prompts": True,
                "filter_overlong_prompts_workers": 1,
                "apply_chat_template_kwargs": chat_kwargs,
                "adjust_sys_prompt": None,
                "plan_source": settings.plan_source,
                "shuffle": False,
            },
            "mrgrpo": {"agent_loop": {**recipe_settings(), "plan_source": settings.plan_source,
                                      **({} if settings.rounds is None else {"rounds": settings.rounds})},
                       "limits": asdict(settings.limits)},
        }
    )


def problem_id(extra_info: dict | None) -> str:
    """A row's problem id in the outputs: ``extra_info.source_id``, else its ``index``."""
    info = extra_info or {}
    return str(info.get("source_id") or info.get("index", "?"))


@dataclass
class LoadedRows:
    """The rows to evaluate, and what verl's prompt-length filter dropped of the ``num_read`` rows it was given
    (the file's first ``--limit`` rows)."""

    rows: list[dict]
    num_read: int
    dropped: list[str]  # problem ids, in file order

    def prompt_filter(self, max_prompt_length: int) -> dict:
        return {"max_prompt_length": int(max_prompt_length), "problems_read": self.num_read,
                "dropped": len(self.dropped), "dropped_ids": list(self.dropped)}


def dropped_ids(read: list[dict | None], kept: list[dict | None]) -> list[str]:
    """Problem ids of ``read`` (extra_info dicts, file order) that are not in ``kept`` (a sub-multiset of them)."""
    left = Counter(problem_id(info) for info in kept)
    out = []
    for info in read:
        pid = problem_id(info)
        if left[pid] > 0:
            left[pid] -= 1
        else:
            out.append(pid)
    return out


def load_rows(data_file: str | Path, tokenizer, settings: EvalSettings) -> LoadedRows:
    """The rows as verl's dataset gives them to the agent loop (see the module docstring), and the ids of the
    problems its overlong-prompt filter dropped."""
    import pyarrow.parquet as pq

    from mrgrpo.dataset import MrGRPODataset

    cfg = trainer_config(settings)
    ds = MrGRPODataset(str(data_file), tokenizer, cfg.data, max_samples=settings.limit)
    rows = []
    for i in range(len(ds)):
        row = ds[i]
        row.pop("dummy_tensor", None)
        agent = row.get("agent_name") or AGENT_NAME
        if agent != AGENT_NAME:
            raise ValueError(f"row {i}: agent_name {agent!r}; mrgrpo eval runs the {AGENT_NAME!r} loop only")
        rows.append(row)
    infos = pq.read_table(str(data_file), columns=["extra_info"]).column("extra_info").to_pylist()
    read = infos[:settings.limit] if settings.limit > 0 else infos  # verl's max_samples without shuffle
    return LoadedRows(rows=rows, num_read=len(read), dropped=dropped_ids(read, [r.get("extra_info") for r in rows]))


def agent_loop_entry(path: str | None):
    """The ``plan_code`` entry of the agent-loop yaml (what verl's AgentLoopWorker registers)."""
    from omegaconf import OmegaConf

    if path is None:
        path = str(DEFAULT_AGENT_LOOP_YAML)  # shipped in the package (mrgrpo.config): there in every install
    for entry in OmegaConf.load(path):
        if entry.name == AGENT_NAME:
            return entry
    raise ValueError(f"{path}: no agent loop named {AGENT_NAME!r}")


class _Recorder:
    """Between one trajectory's loop and the shared server: keeps every generation's token ids."""

    def __init__(self, server):
        self.server = server
        self.generations: list[list[int]] = []

    async def generate(self, request_id, **kwargs):
        out = await self.server.generate(request_id, **kwargs)
        self.generations.append(list(out.token_ids))
        return out


def attempt_programs(generations: list[list[int]], attempts: int, tokenizer, eos_ids) -> list[str | None]:
    """The program of each code attempt (None: no closed python block), read as the loop reads it: the text
    of the generation without its end-of-turn token, decoded with special tokens kept."""
    code_turns = generations[len(generations) - attempts:] if attempts else []
    programs = []
    for ids in code_turns:
        visible = ids[:-1] if ids and ids[-1] in eos_ids else ids
        programs.append(extract_code(tokenizer.decode(visible, skip_special_tokens=False)))
    return programs


def _score(row: dict, extra_info: dict, solution_str: str, reward_kwargs: dict) -> dict:
    from mrgrpo.reward import compute_score

    return compute_score(data_source=row["data_source"], solution_str=solution_str,
                         ground_truth=row["reward_model"]["ground_truth"], extra_info=extra_info, **reward_kwargs)


async def run_sample(row: dict, sample: int, server, tokenizer, settings: EvalSettings, cfg, entry,
                     hf_model_type: str | None) -> SampleRecord:
    import hydra
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap

    from mrgrpo.dataset import MrGRPODataset

    recorder = _Recorder(server)
    loop = hydra.utils.instantiate(
        config=entry,
        trainer_config=DictConfigWrap(config=cfg),
        server_manager=recorder,
        tokenizer=tokenizer,
        processor=None,
        hf_model_type=hf_model_type,
        dataset_cls=MrGRPODataset,
        data_config=DictConfigWrap(cfg.data),
        tools=ToolListWrap([]),
    )
    sampling = dict(temperature=settings.temperature, top_p=settings.top_p, top_k=settings.top_k,
                    repetition_penalty=1.0, logprobs=settings.logprobs)
    kwargs = {k: copy.deepcopy(v) for k, v in row.items() if k != "agent_name"}
    output = await loop.run(sampling, **kwargs)
    ef = dict(output.extra_fields)
    ef["raw_prompt"] = kwargs["raw_prompt"]  # as AgentLoopWorker._agent_loop_postprocess

    # verl's naive reward manager: the row's extra_info updated with the loop's extra fields.
    extra_info = copy.deepcopy(row.get("extra_info") or {})
    extra_info.update(ef.items())
    extra_info["num_turns"] = output.num_turns
    extra_info["rollout_reward_scores"] = {}
    solution_str = tokenizer.decode(output.response_ids, skip_special_tokens=True)
    aio = asyncio.get_running_loop()
    final = await aio.run_in_executor(None, lambda: _score(row, extra_info, solution_str, settings.score_kwargs()))

    attempts = int(ef.get("attempts") or 0)
    programs = attempt_programs(recorder.generations, attempts, tokenizer, loop.eos_ids)
    last_program = next((p for p in reversed(programs) if p), "")
    mismatch = ef.get("stop_reason") != "error" and last_program != (ef.get("final_code") or "")
    first = programs[0] if programs else None
    if attempts == 1 and (first or "") == (ef.get("final_code") or ""):
        first_score = final  # the same program on the same tests: the final verdict is attempt 1's
    elif attempts == 0:
        first_score = {"verdict": "NO_CODE", "acc": 0.0}
    else:
        info1 = {**extra_info, "final_code": first or ""}
        first_score = await aio.run_in_executor(None, lambda: _score(row, info1, solution_str,
                                                                     settings.score_kwargs()))
    info = row.get("extra_info") or {}
    return SampleRecord(
        problem_id=problem_id(info),
        index=int(row.get("index", info.get("index", 0)) or 0),
        data_source=str(row.get("data_source", "")),
        difficulty=str(info.get("difficulty") or "unknown"),
        plan_source=str(ef.get("plan_source", "")),
        sample=sample,
        verdict=str(final["verdict"]),
        acc=float(final["acc"]),
        attempt1_verdict=str(first_score["verdict"]),
        attempt1_acc=float(first_score["acc"]),
        attempts=attempts,
        stop_reason=str(ef.get("stop_reason", "")),
        model_tokens=int(ef.get("model_tokens") or 0),
        injected_tokens=int(ef.get("injected_tokens") or 0),
        public_pass=[bool(x) for x in ef.get("public_pass") or []],
        public_verdicts=[str(x) for x in ef.get("public_verdicts") or []],
        num_tests=int(final.get("num_tests", 0)),
        error=str(ef.get("error") or ""),
        final_code_mismatch=bool(mismatch),
        plan_tokens=int(ef.get("plan_tokens") or 0),
    )


async def evaluate(rows: list[dict], server, tokenizer, settings: EvalSettings, hf_model_type: str | None = None,
                   progress: bool = True) -> list[SampleRecord]:
    """Every row ``settings.n`` times, all in flight at once up to ``settings.concurrency`` trajectories."""
    from tqdm import tqdm

    cfg = trainer_config(settings)
    entry = agent_loop_entry(settings.agent_loop_config)
    gate = asyncio.Semaphore(settings.concurrency)
    bar = tqdm(total=len(rows) * settings.n, desc="mrgrpo eval", unit="sample", disable=not progress)

    done, correct = 0, 0.0

    async def one(row, sample):
        nonlocal done, correct
        async with gate:
            record = await run_sample(row, sample, server, tokenizer, settings, cfg, entry, hf_model_type)
        done, correct = done + 1, correct + record.acc
        bar.set_postfix(acc=f"{correct / done:.3f}", refresh=False)
        bar.update(1)
        return record

    try:
        return list(await asyncio.gather(*(one(row, s) for row in rows for s in range(settings.n))))
    finally:
        bar.close()

