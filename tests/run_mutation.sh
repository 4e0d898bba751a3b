#!/usr/bin/env bash
# Mutation testing of one signal-critical module with the tests that reach it (mutmut 3; docs/testing.md).
#
#   tests/run_mutation.sh MODULE [--base worktree|HEAD] [--jobs N] [--baseline]
#   tests/run_mutation.sh --list
#
# MODULE is a key of the table below. The run happens in a copy of the tree under $MUTATION_DIR
# (default /tmp/mrgrpo-mutation/MODULE), never in the working tree: mutmut writes its mutants/ folder
# there, and other sessions' pytest runs never import a mutant. --base HEAD copies the last commit plus the
# working tree's mutated module, pyproject.toml, the test_mut_*.py files under tests/ and $MUTATION_OVERLAY (useful while
# others are editing the tree);
# the default copies the working tree (tracked and untracked, not ignored). Base settings come from
# [tool.mutmut] in pyproject.toml; the copy's pyproject gets only_mutate and the test selection for MODULE.
# --baseline leaves out the test_mut_*.py files (the score before they were written).
# Prints the counts and the score (killed + timeout) / (all - skipped), writes MODULE.json next to the copy,
# and lists the surviving mutants (`mutmut show NAME` in the copy shows the diff).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-$ROOT/.venv/bin/python}
MUTMUT=${MUTMUT:-$(dirname "$PY")/mutmut}

# module key -> "source file|test files (missing ones are skipped: the list holds the tests added for it too)".
# The tests that use a module only to build fixtures (tests/test_truth_on_cpu.py and tests/test_dataset_on_cpu.py
# read the sample and build rows) are left out of the apps and data_build rows: each mutant would rebuild their
# fixtures (10-20 s) for no kill that the unit tests do not make.
declare -A TABLE=(
  [code_extract]="mrgrpo/code_extract.py|tests/test_mut_code_extract_on_cpu.py tests/test_reward_score.py tests/test_agent_loop_on_cpu.py experiments/learnability/tests/test_transcripts_on_cpu.py"
  [testset]="mrgrpo/testset.py|tests/test_mut_testset_on_cpu.py tests/test_truth_on_cpu.py tests/test_reward_score.py tests/test_agent_loop_on_cpu.py tests/data/test_data_build.py tests/test_dataset_on_cpu.py"
  [first_turn]="mrgrpo/first_turn.py|tests/test_mut_first_turn_on_cpu.py tests/test_truth_on_cpu.py tests/test_dataset_on_cpu.py tests/test_agent_loop_on_cpu.py experiments/learnability/tests/test_transcripts_on_cpu.py"
  [data_build]="mrgrpo/data/build.py|tests/data/test_mut_data_build_on_cpu.py tests/data/test_data_build.py"
  [apps]="mrgrpo/apps.py|tests/test_mut_apps_on_cpu.py tests/test_apps_reader.py tests/test_apps_reading_on_cpu.py"
  [metrics]="mrgrpo/metrics.py|tests/test_mut_metrics_on_cpu.py tests/test_metrics_on_cpu.py tests/test_sampler_on_cpu.py tests/test_reward_score.py"
  # Not measured yet (their modules were being edited when this was written; docs/testing.md, "Extending"):
  [sandbox_compare]="mrgrpo/sandbox/compare.py|tests/sandbox/test_mut_sandbox_compare_on_cpu.py tests/sandbox/test_sandbox_compare.py tests/sandbox/test_sandbox_verdicts.py tests/sandbox/test_sandbox_honest.py"
  # The runner: the fast sandbox tests (~8 s). Left out: the leak, admission, canonical, isolation and
  # hardening tests (60 s: 90 min for 513 mutants) and tests/sandbox/test_sandbox_unprivileged.py
  # (/usr/bin/python3 there cannot import mutmut: it fails on every mutant).
  [sandbox_runner]="mrgrpo/sandbox/runner.py|tests/sandbox/test_mut_sandbox_runner_on_cpu.py tests/sandbox/test_sandbox_verdicts.py tests/sandbox/test_sandbox_honest.py tests/sandbox/test_sandbox_compare.py tests/sandbox/test_sandbox_degraded.py"
  # The worker's modules run under `python -I -S` (worker.py): a mutated copy cannot import mutmut there; only
  # in-process tests reach them. worker.py itself is only the entry point.
  [sandbox_protocol]="mrgrpo/sandbox/protocol.py|tests/sandbox/test_mut_sandbox_worker_on_cpu.py"
  [sandbox_forkserver]="mrgrpo/sandbox/forkserver.py|tests/sandbox/test_mut_sandbox_worker_on_cpu.py"
  [sandbox_watch]="mrgrpo/sandbox/watch.py|tests/sandbox/test_mut_sandbox_worker_on_cpu.py"
  [sandbox_testproc]="mrgrpo/sandbox/testproc.py|tests/sandbox/test_mut_sandbox_worker_on_cpu.py"
  [reward]="mrgrpo/reward.py|tests/test_mut_reward_on_cpu.py tests/test_reward_score.py tests/test_score_cli.py"
  [agent_loop]="mrgrpo/agent_loop.py|tests/test_mut_agent_loop_on_cpu.py tests/test_agent_loop_on_cpu.py tests/test_agent_loop_budget_on_cpu.py"
  [advantage]="mrgrpo/advantage.py|tests/test_mut_advantage_on_cpu.py tests/test_advantage_on_cpu.py tests/test_attempt_credit_on_cpu.py"
)

if [[ ${1:-} == --list || -z ${1:-} ]]; then
  for k in "${!TABLE[@]}"; do echo "$k: ${TABLE[$k]%%|*} <- ${TABLE[$k]#*|}"; done | sort
  [[ -n ${1:-} ]] && exit 0
  echo "usage: $0 MODULE [--base worktree|HEAD] [--jobs N] [--baseline]" >&2
  exit 2
fi
MODULE=$1
shift
BASE=worktree
JOBS=2
BASELINE=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --base) BASE=$2; shift 2 ;;
    --jobs) JOBS=$2; shift 2 ;;
    --baseline) BASELINE=1; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -n ${TABLE[$MODULE]:-} ]] || { echo "unknown module $MODULE (--list)" >&2; exit 2; }
SOURCE=${TABLE[$MODULE]%%|*}
TESTS=()
for t in ${TABLE[$MODULE]#*|}; do
  [[ $BASELINE == 1 && ${t##*/} == test_mut_* ]] && continue
  [[ -f $ROOT/$t ]] && TESTS+=("$t")
done

WORK=${MUTATION_DIR:-/tmp/mrgrpo-mutation/$MODULE}
rm -rf "$WORK"
mkdir -p "$WORK"
cd "$ROOT"
if [[ $BASE == HEAD ]]; then
  git archive HEAD | tar -x -C "$WORK"
  # plus, from the working tree: the mutated module, pyproject.toml, the test_mut_* files under tests/ and
  # $MUTATION_OVERLAY (space-separated paths)
  overlay=("$SOURCE" pyproject.toml ${MUTATION_OVERLAY:-})
  [[ $BASELINE == 1 ]] || mapfile -t -O ${#overlay[@]} overlay < <(find tests -name 'test_mut_*.py' | sort)
  for f in "${overlay[@]}"; do
    [[ -f $f ]] && mkdir -p "$WORK/$(dirname "$f")" && cp "$f" "$WORK/$f"
  done
else
  git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
    [[ -e $f ]] && printf '%s\0' "$f"
  done | tar --null -T - -cf - | tar -x -C "$WORK"
fi

# The copy's [tool.mutmut]: the base settings from pyproject.toml plus this module's scope.
"$PY" - "$WORK/pyproject.toml" "$SOURCE" "${TESTS[@]}" <<'EOF'
import json, re, sys, tomllib
path, source, tests = sys.argv[1], sys.argv[2], sys.argv[3:]
text = open(path).read()
cfg = tomllib.loads(text).get("tool", {}).get("mutmut", {})
cfg["only_mutate"] = [source]
cfg["pytest_add_cli_args_test_selection"] = tests
text = re.sub(r"(?ms)^\[tool\.mutmut\]\n.*?(?=^\[|\Z)", "", text)
lines = ["[tool.mutmut]"] + [f"{k} = {json.dumps(v)}" for k, v in cfg.items()]
open(path, "w").write(text.rstrip("\n") + "\n\n" + "\n".join(lines) + "\n")
EOF

echo "mutation: $SOURCE with ${TESTS[*]} in $WORK (base $BASE, $JOBS jobs)"
cd "$WORK"
start=$(date +%s)
nice -n 10 "$MUTMUT" run --max-children "$JOBS" >"$WORK.log" 2>&1 || { tail -40 "$WORK.log"; exit 1; }
elapsed=$(($(date +%s) - start))
"$MUTMUT" results --all true >"$WORK.results" 2>&1 || true
"$PY" - "$WORK.results" "$MODULE" "$elapsed" "$WORK.json" <<'EOF'
import collections, json, sys
results, module, elapsed, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
status = {}
for line in open(results):
    name, sep, verdict = line.strip().rpartition(": ")
    if sep and "__mutmut_" in name:
        status[name] = verdict
counts = collections.Counter(status.values())
detected = counts["killed"] + counts["timeout"] + counts["segfault"]
scored = len(status) - counts["skipped"]
score = detected / scored if scored else 0.0
survivors = sorted(n for n, v in status.items() if v not in ("killed", "timeout", "segfault", "skipped"))
json.dump({"module": module, "counts": dict(counts), "score": score, "seconds": elapsed,
           "not_killed": {n: status[n] for n in survivors}}, open(out, "w"), indent=1)
print(f"{module}: {detected}/{scored} killed = {100 * score:.1f}% in {elapsed} s; {dict(counts)}")
for n in survivors:
    print(f"  {status[n]}: {n}")
EOF
