"""Runs the study's stages (`learnability.stages`) phase by phase for every seed, each piece skipped when its outputs
exist, and records them.

Phases, each for every seed before the next begins (with ``parallel`` the seeds side by side, else one after the
other): ``data`` (once), ``plateau``, the RL runs, ``control``, ``eval``; then ``table``. So evaluations never start
next to a GRPO run, and the GRPO runs of the seeds train at once (each starting once the one before it on its GPU has
trained a step; one that fails before its first step is started once more).

Within the plateau stage the next chunk trains while the last one is evaluated (at most one chunk ahead), and the
rule of `learnability.plateau` decides on the evaluated ones. A failed evaluation is tried once more.

The data stage failing stops the study; a seed whose plateau or ``grpo`` run fails leaves the phases that need them,
the other seeds go on, and the exit status is 1. Records: OUT_DIR/stages.txt (every start and end), OUT_DIR/data.log,
OUT_DIR/table.log; per seed in OUT_DIR/seed_N/: sft.log (its random model and every chunk), <run>.log and
<run>.jsonl (verl's file logger: every metric of every step), control.log, and each evaluation's log beside its
folder.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from learnability import learning_curves as lc
from learnability import stages as st
from learnability.plateau import decide


class Study:
    def __init__(self, s: st.Settings, shares: st.Shares, retry_wait_s: float = 20, gate_poll_s: float = 10):
        self.s = s
        self.shares = shares
        self.retry_wait_s = retry_wait_s
        self.gate_poll_s = gate_poll_s
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ records
    def stamp(self, message: str) -> None:
        line = f"== {message} {time.strftime('%H:%M:%S')}"
        with self._lock:
            print(line, flush=True)
            with (self.s.out_dir / "stages.txt").open("a") as f:
                f.write(line + "\n")

    @staticmethod
    def run(commands: list[st.Command], log: Path, mode: str = "w") -> bool:
        """The commands one after the other, their output into ``log``; False at the first that fails."""
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open(mode) as out:
            for command in commands:
                out.write(f"+ {command.shown()}\n")
                out.flush()
                rc = subprocess.run(command.argv, env=dict(command.env), stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT).returncode
                if rc:
                    out.write(f"exit status {rc}\n")
                    return False
        return True

    def each(self, seeds: list[int], work: Callable[[int], bool]) -> dict[int, bool]:
        """``work`` for every seed: side by side with ``parallel``, else one after the other."""
        results: dict[int, bool] = {}
        if not self.s.parallel or len(seeds) < 2:
            for seed in seeds:
                results[seed] = work(seed)
            return results
        threads = [threading.Thread(target=lambda x=seed: results.__setitem__(x, work(x)), name=f"seed-{seed}")
                   for seed in seeds]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return {seed: results.get(seed, False) for seed in seeds}

    # ------------------------------------------------------------------ the whole study
    def main(self) -> int:
        s = self.s
        s.out_dir.mkdir(parents=True, exist_ok=True)
        if s.has("data") and not self.data():
            return 1
        seeds, ok = list(s.seeds), True
        if s.has("plateau"):
            done = self.each(seeds, self.plateau)
            ok = all(done.values())
            seeds = [seed for seed in seeds if done[seed]]
        runs = st.rl_runs(s, seeds)
        if runs:
            trained = self.rl_track(runs)
            ok = all(trained.values()) and ok
            seeds = [seed for seed in seeds if trained.get(st.headline(s, seed), True)]
        if s.has("control"):
            ok = all(self.each(seeds, self.control).values()) and ok
        if s.has("eval"):
            ok = all(self.each(seeds, self.evaluate_seed).values()) and ok
        if s.has("table"):
            ok = self.table() and ok
        rc = 0 if ok else 1
        self.stamp(f"all done (rc={rc})")
        return rc

    # ------------------------------------------------------------------ data
    def data(self) -> bool:
        s = self.s
        if st.data_done(s):
            self.stamp(f"data: done before ({s.exp_dir / 'experiment.json'}), skipped")
            return True
        self.stamp("data start")
        if not self.run([st.data_command(s)], s.out_dir / "data.log"):
            self.stamp(f"data FAILED (see {s.out_dir / 'data.log'})")
            return False
        self.stamp("data done")
        return True

    # ------------------------------------------------------------------ evaluations
    def evaluate(self, seed: int, model: Path, heldout: str, out: Path, merged_dir: Path | None = None) -> bool:
        """Greedy pass@1 per split; an evaluation with its summary is not run again, a failed one is tried once
        more (an engine can fail to start next to another one starting)."""
        if st.evaluated(out):
            return True
        if (model / "config.json").is_file():  # an HF folder (not GRPO's verl checkpoint)
            copy_tokenizer(self.s.exp_dir / "tokenizer", model)
        log = out.parent / f"{out.name}.log"
        for attempt in (1, 2):
            if self.run([st.eval_command(self.s, seed, model, heldout, out, self.shares.eval, merged_dir)], log):
                return True
            if attempt == 1:
                self.stamp(f"seed {seed}: eval {out.name} failed (see {log}), once more")
                time.sleep(self.retry_wait_s)
        self.stamp(f"seed {seed}: eval of {model} on {heldout} FAILED (see {log})")
        return False

    # ------------------------------------------------------------------ plateau
    def train_chunk(self, seed: int, step: int) -> bool:
        d = self.s.seed_dir(seed)
        self.stamp(f"seed {seed}: SFT to step {step}")
        if self.run([st.chunk_command(self.s, seed, step)], d.log("sft"), "a") and step in st.trained_steps(d):
            return True
        self.stamp(f"seed {seed}: SFT to step {step} FAILED (no complete checkpoint; see {d.log('sft')})")
        return False

    def plateau(self, seed: int) -> bool:
        """SFT chunk by chunk, each checkpoint evaluated on val.parquet, until the rule stops it; then the plateau
        checkpoint to plateau_model/ and the decision to plateau.json (last: the stage is done once it is there)."""
        s, d = self.s, self.s.seed_dir(seed)
        if st.plateau_done(d):
            self.stamp(f"seed {seed}: plateau done before ({d.plateau_json}), skipped")
            return True
        d.root.mkdir(parents=True, exist_ok=True)
        self.stamp(f"seed {seed}: plateau start")
        if not (d.model_init / "config.json").is_file() and not self.run([st.model_init_command(s, seed)],
                                                                         d.log("sft"), "a"):
            self.stamp(f"seed {seed}: plateau FAILED: its random model (see {d.log('sft')})")
            return False
        grid, rule = st.candidate_steps(s), s.rule()
        while True:
            points = [(k, st.nodemo_score(d.chunk_eval(k))) for k in grid if st.evaluated(d.chunk_eval(k))]
            decision = decide(points, rule)
            if decision.final:
                break
            trained = [k for k in st.trained_steps(d) if k in grid]
            to_eval = next((k for k in trained if not st.evaluated(d.chunk_eval(k))), None)
            last = max(trained, default=0)
            later = [k for k in grid if k > last]
            to_train = later[0] if later and to_eval in (None, last) else None  # at most one chunk ahead
            if to_eval is None and to_train is None:
                self.stamp(f"seed {seed}: plateau FAILED: every chunk to {s.sft_max_steps} trained and evaluated, "
                           f"and the rule did not decide ({decision.why})")
                return False
            result: list[bool] = []
            trainer = threading.Thread(target=lambda k=to_train, r=result: r.append(self.train_chunk(seed, k)))
            if to_train is not None:
                trainer.start()
            good = to_eval is None or self.evaluate(seed, d.ckpt(to_eval), "val", d.chunk_eval(to_eval))
            if to_train is not None:
                trainer.join()
                good = good and result == [True]
            if not good:
                self.stamp(f"seed {seed}: plateau FAILED")
                return False
        tmp = d.root / "plateau_model.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(d.ckpt(decision.step), tmp)
        copy_tokenizer(s.exp_dir / "tokenizer", tmp)
        shutil.rmtree(d.plateau_model, ignore_errors=True)
        tmp.rename(d.plateau_model)
        d.plateau_json.write_text(json.dumps({**asdict(decision), "rule": asdict(rule), "chunk": s.sft_chunk,
                                              "points": points}, indent=1) + "\n")
        what = "plateau" if decision.status == "plateau" else "NOT AT PLATEAU (the cap)"
        self.stamp(f"seed {seed}: plateau done: {what}; start = step {decision.step} (no-demo "
                   f"{100 * decision.score:.1f}%), decided at step {decision.decided_at}")
        return True

    # ------------------------------------------------------------------ the RL runs
    def trained(self, run: st.RLRun) -> bool:
        """verl's console logger printed step 1."""
        log = self.s.seed_dir(run.seed).root / f"{run.name}.log"
        return log.is_file() and "step:1 " in log.read_text(errors="replace")

    def grpo(self, run: st.RLRun) -> bool:
        s, d = self.s, self.s.seed_dir(run.seed)
        share = self.shares.rl.get(run)
        log = d.root / f"{run.name}.log"
        if not st.plateau_done(d):
            self.stamp(f"seed {run.seed}: {run.name} FAILED: no plateau model yet ({d.plateau_json})")
            return False
        shutil.rmtree(d.grpo_ckpt(run), ignore_errors=True)  # so that its last step's checkpoint is this run's
        if run == st.headline(s, run.seed):  # an earlier run's evaluations, and the control it timed, are stale
            shutil.rmtree(d.grpo_model, ignore_errors=True)
            shutil.rmtree(d.control_ckpt, ignore_errors=True)
            d.control_json.unlink(missing_ok=True)
            for model in ("grpo", "control"):
                for heldout in st.HELDOUT:
                    shutil.rmtree(d.evaluation(model, heldout), ignore_errors=True)
        for attempt in (1, 2):
            where = (f" (vLLM share {share})" if share else "") + (
                f" on GPU {s.gpu(run.seed)}" if s.gpu(run.seed) is not None else "")
            self.stamp(f"seed {run.seed}: {run.name} start{where}")
            if self.run([st.grpo_command(s, run, share)], log):
                if not (st.grpo_final(s, d, run) / "actor").is_dir():
                    self.stamp(f"seed {run.seed}: {run.name} FAILED: no checkpoint {st.grpo_final(s, d, run)}")
                    return False
                (d.root / f"{run.name}.done").write_text(time.strftime("%Y-%m-%d %H:%M:%S\n"))
                self.stamp(f"seed {run.seed}: {run.name} done")
                return True
            if attempt == 2 or self.trained(run):
                break
            # failed before its first step (e.g. its vLLM engine next to another one): once more, the log kept aside
            aside = d.root / f"{run.name}.failed_start.log"
            log.replace(aside)
            self.stamp(f"seed {run.seed}: {run.name} failed before its first step (see {aside}): starting it again")
            time.sleep(self.retry_wait_s)
        self.stamp(f"seed {run.seed}: {run.name} FAILED")
        return False

    def rl_track(self, runs: list[st.RLRun]) -> dict[st.RLRun, bool]:
        """The runs one after the other or, with ``parallel``, at once: each started once the one before it on its GPU
        has trained a step (or has ended)."""
        s = self.s
        results: dict[st.RLRun, bool] = {}
        todo = []
        for run in runs:
            if st.grpo_done(s.seed_dir(run.seed), run):
                self.stamp(f"seed {run.seed}: {run.name} done before, skipped")
                results[run] = True
            else:
                todo.append(run)
        if not s.parallel:
            for run in todo:
                results[run] = self.grpo(run)
            return results
        before: dict[str | None, tuple[st.RLRun, threading.Thread]] = {}
        threads = []
        for run in todo:
            gpu = s.gpu(run.seed)
            if gpu in before:
                previous, thread = before[gpu]
                while not self.trained(previous) and thread.is_alive():
                    time.sleep(self.gate_poll_s)
            thread = threading.Thread(target=lambda r=run: results.__setitem__(r, self.grpo(r)), name=run.experiment)
            thread.start()
            before[gpu] = (run, thread)
            threads.append(thread)
        for thread in threads:
            thread.join()
        return {run: results.get(run, False) for run in runs}

    # ------------------------------------------------------------------ the control
    def control(self, seed: int) -> bool:
        """SFT continued from the plateau checkpoint for the grpo run's training time (its steps' seconds)."""
        s, d = self.s, self.s.seed_dir(seed)
        if st.control_end(d) is not None:
            self.stamp(f"seed {seed}: control done before ({d.control_json}), skipped")
            return True
        run = st.headline(s, seed)
        jsonl = d.root / f"{run.name}.jsonl"
        start = st.plateau_step(d)
        if start is None or not st.grpo_done(d, run) or not jsonl.is_file():
            self.stamp(f"seed {seed}: control FAILED: it needs the plateau ({d.plateau_json}) and the {run.name} "
                       f"run's step times ({jsonl})")
            return False
        budget = sum(row["step_time_s"] for row in lc.read_run(jsonl) if "step_time_s" in row)
        shutil.rmtree(d.control_ckpt, ignore_errors=True)  # an interrupted control starts again from the plateau
        d.control_json.unlink(missing_ok=True)
        for heldout in st.HELDOUT:
            shutil.rmtree(d.evaluation("control", heldout), ignore_errors=True)
        self.stamp(f"seed {seed}: control start: SFT from step {start} for {budget:.1f} s of steps ({run.name}'s)")
        if not self.run([st.control_command(s, seed, budget, start)], d.log("control")) or st.control_end(d) is None:
            self.stamp(f"seed {seed}: control FAILED (see {d.log('control')})")
            return False
        record = json.loads(d.control_json.read_text())
        self.stamp(f"seed {seed}: control done: steps {record['start_step']} -> {record['end_step']} in "
                   f"{record['train_s']:.1f} s")
        return True

    # ------------------------------------------------------------------ the evaluations of the three models
    def evaluate_seed(self, seed: int) -> bool:
        s, d = self.s, self.s.seed_dir(seed)
        jobs = [job for job in st.eval_jobs(s, d) if not st.evaluated(job.out)]
        if not jobs:
            self.stamp(f"seed {seed}: eval done before, skipped")
            return True
        self.stamp(f"seed {seed}: eval start")
        ok = True
        for job in jobs:
            if not job.source.exists():
                self.stamp(f"seed {seed}: eval of {job.model} on {job.heldout} FAILED: no model {job.source}")
                ok = False
                continue
            ok = self.evaluate(seed, job.source, job.heldout, job.out, job.merged_dir) and ok
        self.stamp(f"seed {seed}: eval done" if ok else f"seed {seed}: eval FAILED")
        return ok

    # ------------------------------------------------------------------ the table
    def table(self) -> bool:
        s = self.s
        if st.table_done(s):
            self.stamp(f"table: done before ({s.out_dir / st.TABLE} is newer than its inputs), skipped")
            return True
        self.stamp("table start")
        if not self.run([st.table_command(s)], s.out_dir / "table.log"):
            self.stamp(f"table FAILED (see {s.out_dir / 'table.log'})")
            return False
        self.stamp(f"table done ({s.out_dir / st.TABLE})")
        return True


def copy_tokenizer(tokenizer: Path, model: Path) -> None:
    """The tokenizer's files beside the weights (those already there are kept)."""
    if not tokenizer.is_dir() or not model.is_dir():
        return
    for f in tokenizer.iterdir():
        if f.is_file() and not (model / f.name).exists():
            shutil.copy2(f, model / f.name)
