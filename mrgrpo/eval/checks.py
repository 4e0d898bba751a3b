"""What ``mrgrpo eval`` checks before any heavy import (vLLM, torch, transformers): each check is a function that
returns what it found or raises `mrgrpo.cli.UsageError` with one line naming the input and what is wrong. The
command catches it once and exits 2 (``mrgrpo eval: error: <message>``).

- `check_data`: ``--data`` is a readable parquet with the columns the loop and the reward read, and rows; with
  plan source ``teacher`` (``--plan-source`` or a row's ``extra_info.plan_source``) every evaluated row has a plan.
- `model_source`: ``--model`` is an HF model directory, a verl FSDP checkpoint, or a Hugging Face hub id
  (``org/name``) found in the local HF cache; a hub id that is not cached is downloaded later (`fetch_hub_model`),
  after the vLLM check, unless the hub is offline (``HF_HUB_OFFLINE=1``), which is an error here.
- `check_vllm`: vLLM is installed (found without importing it; importing takes seconds).
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from mrgrpo.errors import UsageError

GPU_INSTALL = "pip install -e '.[gpu]'"
VLLM_MISSING = (
    "vLLM is not installed in this Python ({python}); mrgrpo eval runs the model on it: install the GPU extra, "
    f"`{GPU_INSTALL}` in the mrgrpo checkout (it pins the vLLM and torch that verl 0.9.1 runs)"
)

# Columns of a `mrgrpo data prepare` parquet that the eval reads: verl's dataset (prompt, data_source), the reward
# (reward_model.ground_truth) and the agent loop's first turn and public tests (extra_info.*).
REQUIRED_COLUMNS = ("prompt", "data_source", "reward_model", "extra_info")
REQUIRED_FIELDS = {"reward_model": ("ground_truth",), "extra_info": ("statement", "io_mode", "public_tests")}

# A Hugging Face hub model id: org/name (the hub's own rules: word characters, '.', '-'; no '--' or '..').
HUB_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9_][A-Za-z0-9_.-]{0,95}")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
MODEL_FORMS = ("an HF model directory (with config.json), a verl FSDP checkpoint (global_step_N or its actor/), or "
               "a Hugging Face hub id such as Qwen/Qwen3-0.6B")


# ------------------------------------------------------------------------------------------------ vLLM


def check_vllm(find_spec=importlib.util.find_spec) -> None:
    """vLLM is importable from this Python (found, not imported), else UsageError naming the install line."""
    if find_spec("vllm") is None:
        raise UsageError(VLLM_MISSING.format(python=sys.executable))


def vllm_import_error(exc: ImportError) -> UsageError:
    """vLLM is there but does not import (a torch it was not built for, a missing library): one line, the fix."""
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return UsageError(f"vLLM is installed but does not import ({type(exc).__name__}: {first}): reinstall the GPU "
                      f"extra, `{GPU_INSTALL}` in the mrgrpo checkout (it pins the vLLM and torch that verl 0.9.1 "
                      "runs)")


# ------------------------------------------------------------------------------------------------ --data


@dataclass(frozen=True)
class DataInfo:
    path: Path
    num_rows: int  # rows in the file
    num_evaluated: int  # rows --limit keeps (before the prompt-length filter)


def _missing_columns(schema) -> list[str]:
    import pyarrow as pa

    missing = []
    for col in REQUIRED_COLUMNS:
        idx = schema.get_field_index(col)
        if idx < 0:
            missing.append(col)
            continue
        fields = REQUIRED_FIELDS.get(col, ())
        typ = schema.field(idx).type
        if fields and not pa.types.is_struct(typ):
            missing.append(f"{col} (a struct with {', '.join(fields)}; here {typ})")
            continue
        have = {typ.field(i).name for i in range(typ.num_fields)} if fields else set()
        missing += [f"{col}.{f}" for f in fields if f not in have]
    return missing


def check_data(path: str | Path, plan_source: str, limit: int = -1) -> DataInfo:
    """``path`` is a parquet that ``mrgrpo eval`` can evaluate with ``plan_source`` (see the module docstring)."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise UsageError(f"--data {path} is a directory: pass one parquet file from `mrgrpo data prepare` "
                         f"(e.g. {path / 'val.parquet'})")
    if not path.exists():
        raise UsageError(f"--data {path}: no such file")
    if not os.access(path, os.R_OK):
        raise UsageError(f"--data {path} is not readable (permissions)")
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mrgrpo.data.build import AGENT_NAME
    from mrgrpo.first_turn import plan_source_of

    try:
        pf = pq.ParquetFile(path)
    except (pa.ArrowInvalid, OSError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"--data {path} is not a parquet file ({reason}): pass a parquet from "
                         "`mrgrpo data prepare` (e.g. val.parquet)") from None
    missing = _missing_columns(pf.schema_arrow)
    if missing:
        raise UsageError(f"--data {path} lacks what mrgrpo eval reads: {', '.join(missing)}; build it with "
                         "`mrgrpo data prepare`")
    total = pf.metadata.num_rows
    if total == 0:
        raise UsageError(f"--data {path} has no rows")
    count = min(limit, total) if limit > 0 else total  # verl's max_samples: the first rows (no shuffle in eval)
    if "agent_name" in pf.schema_arrow.names:
        agents = pf.read(columns=["agent_name"]).column("agent_name").to_pylist()[:count]
        other = sorted({a for a in agents if a and a != AGENT_NAME})
        if other:
            raise UsageError(f"--data {path}: rows for agent loop(s) {', '.join(other)} (agent_name); mrgrpo eval "
                             f"runs the {AGENT_NAME!r} loop only")
    infos = pf.read(columns=["extra_info"]).column("extra_info").to_pylist()[:count]
    no_plan = []
    for i, info in enumerate(infos):
        info = info or {}
        try:
            source = plan_source_of(info, plan_source)
        except ValueError as exc:
            raise UsageError(f"--data {path} row {i} ({info.get('source_id', '?')}): extra_info.{exc}") from None
        if source == "teacher" and not (info.get("plan") or "").strip():
            no_plan.append(str(info.get("source_id") or f"row {i}"))
    if no_plan:
        shown = ", ".join(no_plan[:5]) + (f", ... ({len(no_plan)} in all)" if len(no_plan) > 5 else "")
        why = ("--plan-source teacher" if plan_source == "teacher"
               else f"extra_info.plan_source teacher (--plan-source is {plan_source})")
        raise UsageError(f"--data {path}: {len(no_plan)} of {count} rows have no plan (extra_info.plan) for {why}: "
                         f"{shown}; build the data with plans (`mrgrpo data prepare --plans batch|sync|vllm "
                         "--require-plans`) or evaluate with --plan-source self or none")
    return DataInfo(path=path, num_rows=total, num_evaluated=count)


# ------------------------------------------------------------------------------------------------ --model


@dataclass(frozen=True)
class ModelSource:
    """Where ``--model`` points: ``kind`` hf (``path`` is the model directory), checkpoint (``path`` is the FSDP
    actor directory) or hub (``repo_id``; ``path`` is the cached snapshot, or None when it is to be downloaded)."""

    kind: str
    path: Path | None
    repo_id: str | None = None


def is_hf_dir(path: Path) -> bool:
    return (path / "config.json").is_file()


def checkpoint_actor_dir(path: Path) -> Path | None:
    """The FSDP actor directory of a verl checkpoint (``global_step_N`` or ``global_step_N/actor``), else None."""
    for cand in (path / "actor", path):
        if (cand / "fsdp_config.json").is_file() or any(cand.glob("model_world_size_*_rank_*.pt")):
            return cand
    return None


def is_hub_id(model: str) -> bool:
    return bool(HUB_ID.fullmatch(model)) and ".." not in model and "--" not in model and not model.endswith(".git")


def hub_cache_dir(cache_dir: str | Path | None = None) -> str:
    if cache_dir is not None:
        return str(cache_dir)
    from huggingface_hub import constants

    return constants.HF_HUB_CACHE


def hub_offline() -> bool:
    """``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) as huggingface_hub reads it."""
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def cached_hub_model(repo_id: str, cache_dir: str | Path | None = None) -> Path | None:
    """The snapshot of ``repo_id``'s main revision in the HF cache (``models--org--name/refs/main`` ->
    ``snapshots/<rev>/``) with a config.json, else None; huggingface_hub's own lookup, no network."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        found = Path(snapshot_download(repo_id, cache_dir=cache_dir, local_files_only=True))
    except LocalEntryNotFoundError:  # also an incomplete snapshot (its subclass IncompleteSnapshotError)
        return None
    return found if is_hf_dir(found) else None


def model_source(model: str, *, offline: bool | None = None, cache_dir: str | Path | None = None) -> ModelSource:
    """Classifies ``--model`` without loading anything; a hub id is looked up in the HF cache only."""
    path = Path(model).expanduser()
    if path.exists():
        if is_hf_dir(path):
            if not any((path / f).is_file() for f in TOKENIZER_FILES):
                raise UsageError(f"--model {model} has config.json but no tokenizer ({', '.join(TOKENIZER_FILES)}): "
                                 "save the tokenizer next to the model (tokenizer.save_pretrained)")
            return ModelSource("hf", path)
        actor = checkpoint_actor_dir(path) if path.is_dir() else None
        if actor is not None:
            return ModelSource("checkpoint", actor)
        what = "a file" if path.is_file() else "a directory without config.json or an FSDP checkpoint"
        raise UsageError(f"--model {model} is {what}: pass {MODEL_FORMS}")
    if not is_hub_id(model):
        raise UsageError(f"--model {model}: no such directory; pass {MODEL_FORMS}")
    cached = cached_hub_model(model, cache_dir)
    if cached is None and (hub_offline() if offline is None else offline):
        raise UsageError(f"--model {model} is no directory here and not in the Hugging Face cache "
                         f"({hub_cache_dir(cache_dir)}), and HF_HUB_OFFLINE is set: download it where the hub is "
                         f"reachable (`hf download {model}`, the same HF_HUB_CACHE) or pass a model directory")
    return ModelSource("hub", cached, repo_id=model)


def fetch_hub_model(repo_id: str, cache_dir: str | Path | None = None) -> Path:
    """``repo_id`` from the hub into the HF cache (only what is new; huggingface_hub falls back to the cached
    snapshot when the hub is unreachable) -> its snapshot directory; one-line UsageError when it cannot be had."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, LocalEntryNotFoundError, RepositoryNotFoundError

    try:
        found = Path(snapshot_download(repo_id, cache_dir=cache_dir))
    except GatedRepoError:
        raise UsageError(f"--model {repo_id}: the model is gated on the Hugging Face hub: accept its terms on "
                         "huggingface.co and log in (`hf auth login`, or HF_TOKEN)") from None
    except RepositoryNotFoundError:
        raise UsageError(f"--model {repo_id} is no directory here and no model on the Hugging Face hub (a private "
                         "one needs `hf auth login` or HF_TOKEN)") from None
    except LocalEntryNotFoundError:
        raise UsageError(f"--model {repo_id} is no directory here, not in the Hugging Face cache "
                         f"({hub_cache_dir(cache_dir)}), and the hub cannot be reached to download it") from None
    except HfHubHTTPError as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise UsageError(f"--model {repo_id}: the Hugging Face hub refused the download ({first})") from None
    if not is_hf_dir(found):
        raise UsageError(f"--model {repo_id}: the hub's snapshot {found} has no config.json (not a transformers "
                         "model)")
    return found


# ------------------------------------------------------------------------------------------------ other files


def check_file_option(value: str | None, option: str) -> None:
    """An optional file option (``--agent-loop-config``) names a readable file."""
    if value is None:
        return
    path = Path(value).expanduser()
    if not path.is_file():
        raise UsageError(f"{option} {value}: no such file")
