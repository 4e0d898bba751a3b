"""Runs the study's stages (`learnability.stages`) in order, each skipped when its outputs exist, and records them.

Every stage writes OUT_DIR/<stage>.log (a GRPO run OUT_DIR/<run>.log and, through verl's ``file`` logger,
OUT_DIR/<run>.jsonl: every metric of every step) and appends its start and end to OUT_DIR/stages.txt. The data and
SFT stages stop the study when they fail; the others let the rest run and make the exit status 1.

Two tracks follow the SFT stage; they share nothing but the GPU, one after the other or, with ``parallel``, at
once: the RL track (the GRPO runs, one after the other or, with ``rl_parallel``, side by side: each starts once the
run before it on its GPU has trained a step, and a run that fails before its first step is started once more) and
the SFT track (the control, then the evaluations of the SFT checkpoints; with ``parallel`` what failed to start next
to GRPO is evaluated again after the RL track). The table comes last.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from pathlib import Path

from learnability import stages as st


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

    # ------------------------------------------------------------------ the whole study
    def main(self) -> int:
        s = self.s
        s.out_dir.mkdir(parents=True, exist_ok=True)
        if s.has("data") and not self.data():
            return 1
        if s.has("sft") and not self.sft():
            return 1
        ok = self.tracks()
        if s.has("table"):
            ok = self.table() and ok
        rc = 0 if ok else 1
        self.stamp(f"all done (rc={rc})")
        return rc

    def tracks(self) -> bool:
        s = self.s
        if not s.parallel:
            ok = self.rl_track()
            if s.has("sft_more"):
                ok = self.sft_more() == 0 and ok
            if s.has("sft_eval"):
                ok = self.sft_eval() and ok
            return ok
        rl_ok: list[bool] = []
        rl = threading.Thread(target=lambda: rl_ok.append(self.rl_track()), name="rl-track")
        rl.start()
        more = self.sft_more() if s.has("sft_more") else 0
        if s.has("sft_eval"):
            self.sft_eval()  # what fails to start next to GRPO runs again below
        rl.join()
        if more == 2 and self.evaluate_control():  # trained, but its evaluation failed next to GRPO: again, alone
            more = 0
            self.stamp("sft_more done")
        ok = bool(rl_ok and rl_ok[0]) and more == 0
        if s.has("sft_eval"):
            ok = self.sft_eval() and ok
        return ok

    # ------------------------------------------------------------------ data and SFT
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

    def train_sft(self, name: str, steps: int, save_freq: int, model_dir: Path) -> bool:
        """SFT to ``steps`` (resuming its checkpoints), then that step's checkpoint (the newest at or before it) and
        the tokenizer copied to ``model_dir``."""
        s = self.s
        log = s.out_dir / f"{name}.log"
        if not self.run(st.sft_commands(s, steps, save_freq), log):
            return False
        done = [step for step in st.ckpt_steps(s) if step <= steps]
        if not done:
            with log.open("a") as f:
                f.write(f"no checkpoint at or before step {steps} in {s.exp_dir / 'sft_ckpt'}\n")
            return False
        shutil.rmtree(model_dir, ignore_errors=True)
        shutil.copytree(st.ckpt(s, done[-1]), model_dir)
        copy_tokenizer(s.exp_dir / "tokenizer", model_dir)
        with log.open("a") as f:
            f.write(f"wrote the SFT model of step {done[-1]} ({st.ckpt(s, done[-1])}) to {model_dir}\n")
        return True

    def sft(self) -> bool:
        s = self.s
        model = s.exp_dir / "sft_model"
        if st.sft_done(s, s.sft_steps, model):
            self.stamp(f"sft: done before (step {s.sft_steps}, {model}), skipped")
            return True
        self.stamp("sft start")
        if not self.train_sft("sft", s.sft_steps, s.save_freq, model):
            self.stamp(f"sft FAILED (see {s.out_dir / 'sft.log'})")
            return False
        self.stamp("sft done")
        return True

    # ------------------------------------------------------------------ the RL track
    def trained(self, run: st.RLRun) -> bool:
        """verl's console logger printed step 1."""
        log = self.s.out_dir / f"{run.name}.log"
        return log.is_file() and "step:1 " in log.read_text(errors="replace")

    def grpo(self, run: st.RLRun, share: str | None, gpu: str | None) -> bool:
        s = self.s
        log = s.out_dir / f"{run.name}.log"
        for attempt in (1, 2):
            where = (f" (vLLM share {share})" if share else "") + (f" on GPU {gpu}" if gpu is not None else "")
            self.stamp(f"{run.name} start{where}")
            if self.run([st.grpo_command(s, run, share, gpu)], log):
                (s.out_dir / f"{run.name}.done").write_text(time.strftime("%Y-%m-%d %H:%M:%S\n"))
                self.stamp(f"{run.name} done")
                return True
            if attempt == 2 or self.trained(run):
                break
            # failed before its first step (e.g. its vLLM engine next to another one): once more, the log kept aside
            aside = s.out_dir / f"{run.name}.failed_start.log"
            log.replace(aside)
            self.stamp(f"{run.name} failed before its first step (see {aside}): starting it again")
            time.sleep(self.retry_wait_s)
        self.stamp(f"{run.name} FAILED")
        return False

    def rl_track(self) -> bool:
        s = self.s
        runs = []
        for run in st.rl_runs(s):
            if st.grpo_done(s, run):
                self.stamp(f"{run.name}: done before ({s.out_dir / (run.name + '.done')}), skipped")
            else:
                runs.append(run)
        if not self.shares.side_by_side:
            return all([self.grpo(run, self.shares.rl[i], None) for i, run in enumerate(runs)])
        # side by side: run i goes to GPU i mod n and, when one runs there already, starts once the one before it on
        # that GPU has trained a step (or has ended)
        n_gpu = max(1, len(s.rl_gpus))
        results: dict[int, bool] = {}
        threads: list[threading.Thread] = []
        for i, run in enumerate(runs):
            if i >= n_gpu:
                before, thread = runs[i - n_gpu], threads[i - n_gpu]
                while not self.trained(before) and thread.is_alive():
                    time.sleep(self.gate_poll_s)
            thread = threading.Thread(target=self._record, args=(results, i, run), name=run.name)
            thread.start()
            threads.append(thread)
        for thread in threads:
            thread.join()
        return all(results.get(i, False) for i in range(len(runs)))

    def _record(self, results: dict[int, bool], i: int, run: st.RLRun) -> None:
        results[i] = self.grpo(run, self.shares.rl[i], self.shares.gpus[i])

    # ------------------------------------------------------------------ the SFT track
    def evaluate(self, model: Path, out: Path) -> bool:
        """Greedy pass@1 per split; an evaluation with its summary is not run again."""
        if st.evaluated(out):
            return True
        copy_tokenizer(self.s.exp_dir / "tokenizer", model)
        log = out.parent / f"{out.name}.log"
        if not self.run([st.eval_command(self.s, model, out, self.shares.eval)], log):
            self.stamp(f"eval of {model} FAILED (see {log})")
            return False
        return True

    def evaluate_control(self) -> bool:
        """The control's pass@1, and its SFT step and GRPO's start (learning_curves puts it on the SFT curve)."""
        s = self.s
        out = s.out_dir / "sft_more_eval"
        if not self.evaluate(s.exp_dir / "sft_more_model", out):
            return False
        (out / "step").write_text(f"{st.control_steps(s)}\n")
        (out / "start").write_text(f"{s.sft_steps}\n")
        return True

    def sft_more(self) -> int:
        """The control: 0 done, 1 its training failed, 2 only its evaluation did."""
        s = self.s
        model = s.exp_dir / "sft_more_model"
        if st.sft_done(s, st.control_steps(s), model) and st.evaluated(s.out_dir / "sft_more_eval"):
            self.stamp(f"sft_more: done before (step {st.control_steps(s)}, {model}), skipped")
            return 0
        self.stamp("sft_more start")
        if not st.sft_done(s, st.control_steps(s), model) and not self.train_sft(
                "sft_more", st.control_steps(s), s.sft_more_save_freq, model):
            self.stamp(f"sft_more FAILED (see {s.out_dir / 'sft_more.log'})")
            return 1
        if not self.evaluate_control():
            return 2
        self.stamp("sft_more done")
        return 0

    def sft_eval(self) -> bool:
        s = self.s
        self.stamp("sft_eval start")
        (s.out_dir / "sft_eval").mkdir(parents=True, exist_ok=True)
        ok = True
        for step in st.sft_eval_steps(s):
            if not st.ckpt(s, step).is_dir():
                self.stamp(f"sft_eval: no checkpoint {st.ckpt(s, step)}")
                continue
            ok = self.evaluate(st.ckpt(s, step), s.out_dir / "sft_eval" / f"step_{step}") and ok
        self.stamp("sft_eval done")
        return ok

    # ------------------------------------------------------------------ the table
    def table(self) -> bool:
        s = self.s
        if st.table_done(s):
            self.stamp(f"table: done before ({s.out_dir / st.TABLE} is newer than its inputs), skipped")
            return True
        self.stamp("table start")
        command = st.table_command(s)
        with (s.out_dir / "table.log").open("w") as log:
            proc = subprocess.run(command.argv, env=dict(command.env), stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True)
            log.write(proc.stderr)
        if proc.returncode:
            self.stamp(f"table FAILED (see {s.out_dir / 'table.log'})")
            return False
        (s.out_dir / st.TABLE).write_text(proc.stdout)
        self.stamp(f"table done ({s.out_dir / st.TABLE})")
        return True


def copy_tokenizer(tokenizer: Path, model: Path) -> None:
    """The tokenizer's files beside the weights (those already there are kept)."""
    if not tokenizer.is_dir() or not model.is_dir():
        return
    for f in tokenizer.iterdir():
        if f.is_file() and not (model / f.name).exists():
            shutil.copy2(f, model / f.name)
