"""learnability.sft_run without verl's engine: the options, the held schedule, the budget, and the trainer class on
a stand-in with verl 0.9.1's loop (a step, then stop and save where ``total_training_steps`` is reached)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from learnability.sft_run import Budget, Options, held_after, split_argv, trainer_class


class _Verl:
    """What ChunkedSFTTrainer relies on in verl's SFTTrainer, nothing more."""

    def __init__(self, horizon: int, resume: int = 0, clock=None):
        self.horizon, self.resume_global_step, self.rank = horizon, resume, 0
        self.clock = clock
        self._build_dataloader()
        self._init_engine()

    def _build_dataloader(self):
        self.train_sampler = SimpleNamespace(seed=0)

    def _init_engine(self):
        self.total_training_steps = self.horizon
        self.engine = SimpleNamespace(lr_scheduler=SimpleNamespace(lr_lambdas=[lambda step: 1 - step / 100]))
        self.trained = []
        self.training_client = SimpleNamespace(train_batch=self._train)

    def _train(self, data):
        self.trained.append(data)
        if self.clock is not None:
            self.clock.now += 1.0

    def fit(self):
        step = self.resume_global_step
        while True:
            step += 1
            self.training_client.train_batch(data=step)
            if step >= self.total_training_steps:
                self.saved = step
                return


def test_options_are_split_from_verls_overrides():
    opts, rest = split_argv(["--stop-at-step", "1000", "--data-seed", "3", "optim.lr=1e-3",
                             "trainer.total_training_steps=6000"])
    assert opts == Options(stop_at_step=1000, data_seed=3) and rest == ["optim.lr=1e-3",
                                                                        "trainer.total_training_steps=6000"]
    for bad in (["--stop-at-step", "5", "--stop-after-s", "9"], ["--stop-at-step", "0"], ["--stop-after-s", "-1"]):
        with pytest.raises(SystemExit):
            split_argv(bad)


def test_the_schedule_is_held_at_its_horizon():
    f = held_after(lambda step: 1 - step / 100, 60)
    assert f(30) == pytest.approx(0.7) and f(60) == f(61) == f(10_000) == pytest.approx(0.4)


def test_the_budget_starts_with_the_first_step():
    clock = SimpleNamespace(now=5.0)
    b = Budget(2.0, lambda: clock.now)
    clock.now = 50.0  # start-up is not counted
    assert not b.spent() and b.elapsed() == 0
    b.start()
    clock.now = 51.0
    assert not b.spent()
    clock.now = 52.0
    assert b.spent() and b.elapsed() == 2.0
    assert not Budget(None).spent()


def test_a_chunk_continues_the_run_and_stops_at_its_step():
    cls = trainer_class(_Verl, Options(stop_at_step=1000, data_seed=7))
    t = cls(horizon=6000, resume=500)
    assert t.train_sampler.seed == 7
    t.fit()
    assert t.saved == 1000 and t.trained[0] == 501 and len(t.trained) == 500
    (f,) = t.engine.lr_scheduler.lr_lambdas
    assert f(6000) == f(9000)  # the schedule is over the horizon, held after it


def test_a_chunk_already_trained_does_nothing():
    t = trainer_class(_Verl, Options(stop_at_step=1000))(horizon=6000, resume=1000)
    t.fit()
    assert t.trained == [] and not hasattr(t, "saved")


def test_a_time_budget_stops_at_the_step_it_is_spent_and_records_it(tmp_path):
    clock = SimpleNamespace(now=0.0)
    record = tmp_path / "control.json"
    cls = trainer_class(_Verl, Options(stop_after_s=10, record=record), clock=lambda: clock.now)
    t = cls(horizon=6000, resume=2000, clock=clock)
    t.fit()
    assert t.saved == 2010 and len(t.trained) == 10  # one fake second a step
    assert json.loads(record.read_text()) == {"start_step": 2000, "end_step": 2010, "steps": 10, "train_s": 10.0,
                                              "budget_s": 10}


def test_verls_trainer_has_what_the_chunks_rely_on():
    """A verl that renames these breaks here, not on the GPU: the stop is where ``total_training_steps`` is reached
    (read after each step's train_batch), the schedule is built in _init_engine, the sampler in _build_dataloader,
    and run_sft builds the trainer by its module name."""
    import inspect

    from verl.trainer import sft_trainer

    source = inspect.getsource(sft_trainer.SFTTrainer)
    for needle in ("def _build_dataloader(self)", "self.train_sampler = DistributedSampler(",
                   "def _init_engine(self)", "self.optimizer_config.total_training_steps = self.total_training_steps",
                   "self.resume_global_step = self.ckpt_handler.load_checkpoint()",
                   "output = self.training_client.train_batch(data=data)",
                   "is_last_step = global_step >= self.total_training_steps"):
        assert needle in source, needle
    assert "trainer = SFTTrainer(config=config)" in inspect.getsource(sft_trainer.run_sft)


def test_the_overrides_reach_verls_config_through_the_wrapper(repo_root):
    """hydra composes verl's config from the overrides left after this module's options (--cfg job prints it and
    trains nothing)."""
    import subprocess
    import sys

    from learnability import python_path

    proc = subprocess.run([sys.executable, "-m", "learnability.sft_run", "--stop-at-step", "5", "--data-seed", "2",
                           "--cfg", "job", "trainer.total_training_steps=10", "optim.lr_scheduler_type=cosine",
                           "optim.min_lr_ratio=0.1"], cwd=repo_root, capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": python_path({})})
    assert proc.returncode == 0, proc.stderr
    assert "lr_scheduler_type: cosine" in proc.stdout and "min_lr_ratio: 0.1" in proc.stdout
    assert "total_training_steps: 10" in proc.stdout
