"""The learnability study: does the recipe teach what SFT cannot? Not part of the installed package.

A small Qwen3-architecture model is trained from scratch on synthetic APPS+-style problems: SFT to its plateau (found
by a stated rule), then GRPO with the unchanged recipe (``recipe/mrgrpo/run_qwen3_apps.sh``) against an SFT control
given the same time, for several seeds. ``python experiments/learnability/run.py --help`` runs it, stage by stage
(README.md beside this file).

- `learnability.synth`: seeded synthetic APPS+ problems, split by their ids.
- `learnability.data`: the data stage: problems -> prepared parquet -> splits -> tokenizer -> SFT transcripts.
- `learnability.tokenizer`: a byte-level BPE tokenizer with Qwen's special tokens and a Qwen3-style chat template.
- `learnability.model`: a random small `Qwen3ForCausalLM` saved with that tokenizer.
- `learnability.mutate`: single local edits of a program (the failed attempts of the fix transcripts).
- `learnability.transcripts`: SFT transcripts in the agent loop's exact token format (the real
  `PlanCodeAgentLoop.run()` driven by scripted turns; failed attempts are mutants verified in the sandbox).
- `learnability.sft_dataset`: serves those transcripts to verl's SFT trainer (``data.custom_cls``).
- `learnability.kit`: their commands, ``python -m learnability tokenizer|model|sft-data|data|synth``.
- `learnability.stages`, `learnability.orchestrate`, `learnability.run`: the study's stages and its entry point.
- `learnability.plateau`: the rule that says when SFT has reached its plateau.
- `learnability.sft_run`: verl's SFT trainer in chunks of one run, or for a time budget (the control).
- `learnability.seeds_table`: the table over seeds, with paired confidence intervals, and whether the targets hold.
- `learnability.learning_curves`: verl's step logs and the evaluations -> CSV, PNG and one run's headline table.

It uses mrgrpo through public names only; ``python -m learnability`` needs ``experiments/`` on ``PYTHONPATH``
(the entry point sets it for every stage).
"""

from __future__ import annotations

import os
from pathlib import Path

EXPERIMENTS_DIR = Path(__file__).resolve().parents[1]
REPO_ROOT = EXPERIMENTS_DIR.parent


def python_path(env: dict | None = None) -> str:
    """``PYTHONPATH`` for a child process: this folder's parent (``import learnability``) and the checkout (``import
    mrgrpo`` when it is not installed), then what ``env`` (default: this process's environment) had."""
    env = os.environ if env is None else env
    parts = [str(EXPERIMENTS_DIR), str(REPO_ROOT)]
    return os.pathsep.join(parts + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
