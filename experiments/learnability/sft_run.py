"""verl 0.9.1's SFT trainer, in chunks of one run or for a time budget: the study's SFT launches run this.

    torchrun --standalone --nnodes=1 --nproc_per_node=1 -m learnability.sft_run \\
        [--stop-at-step N | --stop-after-s S] [--data-seed N] [--record FILE] HYDRA_OVERRIDES...

The overrides go to verl's trainer (`verl.trainer.sft_trainer`, hydra config ``sft_trainer_engine``) unchanged, and
it resumes as it does alone: from the newest checkpoint in ``trainer.default_local_dir``, or from
``trainer.resume_from_path`` (model, optimizer, learning-rate schedule and data-loader position). What this adds:

- ``--stop-at-step N``: the launch trains to step N and saves its checkpoint there. The learning-rate schedule stays
  the one over ``trainer.total_training_steps`` (its horizon): launches that stop at 500, 1000, ... are one run, with
  the schedule, optimizer state and data order of a single launch to the horizon.
- ``--stop-after-s S``: the launch trains until its training steps have taken S seconds (from the start of its first
  step: start-up, loading and saving are not counted), then saves a checkpoint at the step it reached.
- Past the horizon the learning rate stays at its value there (verl's cosine schedule would rise again).
- ``--data-seed N``: the seed of the training sampler's shuffle. verl 0.9.1's DistributedSampler shuffles with seed 0
  whatever ``trainer.seed`` says, so without this every seed would see the transcripts in the same order.
- ``--record FILE``: JSON ``{"start_step", "end_step", "steps", "train_s", "budget_s"}`` once the launch has saved.

One process (``--nproc_per_node=1``): the time budget is read by that process alone.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

PROG = "python -m learnability.sft_run"


@dataclass(frozen=True)
class Options:
    stop_at_step: int | None = None
    stop_after_s: float | None = None
    data_seed: int | None = None
    record: Path | None = None


def split_argv(argv: list[str]) -> tuple[Options, list[str]]:
    """(this module's options, verl's hydra overrides); SystemExit(2) for a mistake."""
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    stop = p.add_mutually_exclusive_group()
    stop.add_argument("--stop-at-step", type=int, default=None, help="train to this step, save it, end")
    stop.add_argument("--stop-after-s", type=float, default=None, help="train for this many seconds of steps, save")
    p.add_argument("--data-seed", type=int, default=None, help="the training sampler's shuffle seed")
    p.add_argument("--record", type=Path, default=None, help="JSON of the steps and seconds trained, at the end")
    opts, rest = p.parse_known_args(argv)
    if opts.stop_at_step is not None and opts.stop_at_step < 1:
        p.error(f"--stop-at-step must be >= 1, got {opts.stop_at_step}")
    if opts.stop_after_s is not None and opts.stop_after_s <= 0:
        p.error(f"--stop-after-s must be > 0, got {opts.stop_after_s}")
    return Options(opts.stop_at_step, opts.stop_after_s, opts.data_seed, opts.record), rest


def held_after(schedule: Callable[[int], float], horizon: int) -> Callable[[int], float]:
    """A LambdaLR factor that keeps its value at ``horizon`` for every later step."""
    return lambda step: schedule(min(step, horizon))


class Budget:
    """Seconds of training steps: started by the first step, spent once ``seconds`` have passed (None: never)."""

    def __init__(self, seconds: float | None, clock: Callable[[], float] = time.monotonic):
        self.seconds = seconds
        self.clock = clock
        self.t0: float | None = None

    def start(self) -> None:
        if self.t0 is None:
            self.t0 = self.clock()

    def elapsed(self) -> float:
        return 0.0 if self.t0 is None else self.clock() - self.t0

    def spent(self) -> bool:
        return self.seconds is not None and self.t0 is not None and self.elapsed() >= self.seconds


def trainer_class(base: type, opts: Options, clock: Callable[[], float] = time.monotonic) -> type:
    """verl's SFTTrainer (``base``) with the options above. It relies on what verl 0.9.1's trainer does: its loop
    ends at the step where ``self.total_training_steps`` is reached (and saves it), ``_init_engine`` builds the
    schedule over ``trainer.total_training_steps``, ``_build_dataloader`` makes ``self.train_sampler``."""

    class ChunkedSFTTrainer(base):
        def _build_dataloader(self):
            super()._build_dataloader()
            if opts.data_seed is not None:
                self.train_sampler.seed = opts.data_seed

        def _init_engine(self):
            super()._init_engine()
            horizon = self.total_training_steps
            scheduler = self.engine.lr_scheduler
            scheduler.lr_lambdas = [held_after(f, horizon) for f in scheduler.lr_lambdas]
            if opts.stop_at_step is not None:
                self.total_training_steps = opts.stop_at_step
            elif opts.stop_after_s is not None:
                self.total_training_steps = sys.maxsize  # the budget ends it

        def fit(self):
            start = step = self.resume_global_step
            if opts.stop_at_step is not None and start >= opts.stop_at_step:
                print(f"{PROG}: resumed at step {start}, at or past --stop-at-step {opts.stop_at_step}: nothing to do")
                return
            budget = Budget(opts.stop_after_s, clock)
            train_batch = self.training_client.train_batch

            def counted(*args, **kwargs):
                nonlocal step
                budget.start()
                out = train_batch(*args, **kwargs)
                step += 1
                if budget.spent():
                    self.total_training_steps = step  # the loop saves this step and ends
                return out

            self.training_client.train_batch = counted
            super().fit()
            if opts.record is not None and self.rank == 0:
                opts.record.parent.mkdir(parents=True, exist_ok=True)
                opts.record.write_text(json.dumps({"start_step": start, "end_step": step, "steps": step - start,
                                                   "train_s": round(budget.elapsed(), 3),
                                                   "budget_s": opts.stop_after_s}) + "\n")

    return ChunkedSFTTrainer


def main(argv: list[str] | None = None) -> None:
    opts, overrides = split_argv(sys.argv[1:] if argv is None else argv)
    from verl.trainer import sft_trainer

    sft_trainer.SFTTrainer = trainer_class(sft_trainer.SFTTrainer, opts)  # run_sft builds the trainer by this name
    sys.argv = [sys.argv[0], *overrides]
    sft_trainer.main()


if __name__ == "__main__":
    main()
