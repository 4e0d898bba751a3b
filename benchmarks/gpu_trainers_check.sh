#!/usr/bin/env bash
# The GPU proof of both trainers: verl 0.9.1's two trainers run the recipe (PROFILE=tiny) with the same seed and
# data and an injected hidden-test INFRA (benchmarks/infra_reward.py, about 1 response in 4), each for STEPS steps with a
# checkpoint every step, then resumed for one more step. Checks, per trainer, from the console log:
#   - every training step logs the mrgrpo dashboard (use_v1=true: mrgrpo/...; false: timing_s/mrgrpo/...), and both
#     trainers log the same key set after that prefix;
#   - the injected INFRA rows are excluded: mrgrpo/infra/hidden_rate > 0 on some step and, on every step,
#     mrgrpo/masked_total == mrgrpo/excluded_total (their masks were zeroed);
#   - the resumed run starts after the last checkpoint (global_step_STEPS) and logs step STEPS+1.
# usage: bash benchmarks/gpu_trainers_check.sh
#   env: STEPS=3 OUT=/tmp/gpu_trainers_check PYTHON=python3; MODEL (default: the tiny profile's model; a directory with
#   a larger model, e.g. benchmarks/random_qwen3.py --arch 0.6B, checks checkpoint and resume at that size);
#   CLEAN=1 deletes each trainer's checkpoints once both of its runs are done (a 0.6B checkpoint is ~7 GB);
#   TRAINERS="true false" (the trainers to run; the check reads the other one's train_v1_*.log and resume_v1_*.log
#   from OUT, e.g. copied there from an earlier run's record).
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-3}
OUT=${OUT:-/tmp/gpu_trainers_check}
PYTHON=${PYTHON:-python3}
mkdir -p "$OUT"

if "$PYTHON" -c "import importlib.metadata as m; m.version('mrgrpo')" 2>/dev/null; then
  "$PYTHON" -m mrgrpo.upstream --quiet
  "$PYTHON" -m mrgrpo.upstream --quiet --override trainer.use_v1=false  # the recipe sets the manager class
else  # on PYTHONPATH only: no verl.plugins entry point, which `mrgrpo upstream` counts as a problem
  echo "gpu_trainers_check: mrgrpo is not pip-installed: skipping the mrgrpo upstream checks" >&2
fi

run() {  # run <use_v1> <steps> <log>
  local v1=$1 steps=$2 log=$3 extra=(trainer.use_v1="$1")
  PROFILE=tiny STEPS="$steps" SAVE_FREQ=1 TEST_FREQ=-1 RESUME=auto EXPERIMENT="gpu_check_v1_$v1" \
    CKPT_DIR="$OUT/ckpt_v1_$v1" PYTHON="$PYTHON" \
    bash recipe/mrgrpo/run_qwen3_apps.sh "${extra[@]}" \
      reward.custom_reward_function.path="$PWD/benchmarks/infra_reward.py" reward.custom_reward_function.name=compute_score \
      data.seed=1 actor_rollout_ref.rollout.seed=1 trainer.val_before_train=false 2>&1 | tee "$log"
}

for v1 in ${TRAINERS:-true false}; do
  rm -rf "$OUT/ckpt_v1_$v1"
  # A launch that fails is reported by the check below (its steps are missing); the other trainer still runs.
  run "$v1" "$STEPS" "$OUT/train_v1_$v1.log" || echo "use_v1=$v1: the training launch failed" >&2
  run "$v1" "$((STEPS + 1))" "$OUT/resume_v1_$v1.log" || echo "use_v1=$v1: the resumed launch failed" >&2
  du -sh "$OUT/ckpt_v1_$v1"/global_step_* 2>/dev/null | tee "$OUT/ckpt_sizes_v1_$v1.txt" || true
  [[ "${CLEAN:-0}" != 1 ]] || rm -rf "$OUT/ckpt_v1_$v1"
done

"$PYTHON" - "$OUT" "$STEPS" <<'PY'
import re, sys
from pathlib import Path
out, steps = Path(sys.argv[1]), int(sys.argv[2])
STEP = re.compile(r"step:(\d+) - (.*)")
def steps_of(log):
    rows = {}
    for line in log.read_text(errors="replace").splitlines():
        m = STEP.search(line)
        if m:
            rows[int(m.group(1))] = dict(re.findall(r"([\w/@.\-]+):([-\d.eE+naninf]+)", m.group(2)))
    return rows
keysets, ok = {}, True
for v1, prefix in (("true", "mrgrpo/"), ("false", "timing_s/mrgrpo/")):
    if not (out / f"train_v1_{v1}.log").is_file() or not (out / f"resume_v1_{v1}.log").is_file():
        print(f"use_v1={v1}: no train_v1_{v1}.log / resume_v1_{v1}.log in {out}"); ok = False; continue
    train, resume = steps_of(out / f"train_v1_{v1}.log"), steps_of(out / f"resume_v1_{v1}.log")
    got = sorted(train)
    print(f"use_v1={v1}: training steps logged {got}; resumed steps {sorted(resume)}")
    ok &= got == list(range(1, steps + 1)) and sorted(resume) == [steps + 1]
    keys = None
    hidden = 0.0
    for s, m in {**train, **resume}.items():
        dash = {k[len(prefix) - len("mrgrpo/"):]: float(v) for k, v in m.items() if k.startswith(prefix)}
        if not dash:
            print(f"  step {s}: NO mrgrpo dashboard"); ok = False; continue
        keys = set(dash) if keys is None else keys
        if set(dash) != keys:
            print(f"  step {s}: key set differs: {sorted(set(dash) ^ keys)}"); ok = False
        hidden = max(hidden, dash.get("mrgrpo/infra/hidden_rate", 0.0))
        if dash.get("mrgrpo/masked_total") != dash.get("mrgrpo/excluded_total"):
            print(f"  step {s}: masked_total {dash.get('mrgrpo/masked_total')} != excluded_total "
                  f"{dash.get('mrgrpo/excluded_total')}"); ok = False
        print(f"  step {s}: excluded_total={dash.get('mrgrpo/excluded_total')} infra/hidden_rate="
              f"{dash.get('mrgrpo/infra/hidden_rate')} masked_total={dash.get('mrgrpo/masked_total')}")
    if hidden <= 0:
        print(f"  use_v1={v1}: the injected INFRA never showed (infra/hidden_rate 0 on every step)"); ok = False
    keysets[v1] = keys or set()
diff = keysets.get("true", set()) ^ keysets.get("false", set())
print("same mrgrpo key set on both trainers" if not diff else f"key sets differ: {sorted(diff)}")
ok &= not diff
print("GPU TRAINERS CHECK:", "PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
PY
