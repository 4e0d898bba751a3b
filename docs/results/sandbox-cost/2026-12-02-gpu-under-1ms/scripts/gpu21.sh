#!/bin/bash
# gpu21.sh: where the per-test overhead goes on the GPU machine: faults and CPU per step of the test process,
# one layer left out at a time, and (if perf exists) a system-wide profile of serial trivial tests.
cd "$(dirname "$0")/../.."; O=${OUT:-/tmp/g21}; mkdir -p $O
exec > >(tee $O/drive.txt) 2>&1
echo "== start $(date +%T)"; python3 --version; nproc; uname -r; which perf && perf --version
export PYTHONPATH=$PWD
cp mrgrpo/sandbox/worker.py /tmp/worker_orig.py; cp .devkit/scripts/worker_steps.py mrgrpo/sandbox/worker.py
python3 .devkit/scripts/steps.py 2000 2>&1 | grep -v "^mrgrpo.sandbox" > $O/steps.txt
cp /tmp/worker_orig.py mrgrpo/sandbox/worker.py; cat $O/steps.txt
echo "== ablation $(date +%T)"
python3 .devkit/scripts/ablate.py 2000 3 2>&1 | grep -v "^mrgrpo.sandbox" > $O/ablation.txt; cat $O/ablation.txt | tail -12
if which perf >/dev/null; then
  echo "== perf $(date +%T)"
  perf record -a -g -o /tmp/perf.data -- python3 .devkit/scripts/ablate.py 3000 1 "" > $O/perf_run.txt 2>&1
  perf report -i /tmp/perf.data --stdio --no-children --sort comm,sym 2>/dev/null | grep -v "^$" | grep -E "^ +[0-9]" | head -120 > $O/perf_sym.txt
  perf report -i /tmp/perf.data --stdio --no-children --sort comm 2>/dev/null | grep -E "^ +[0-9]" | head -30 > $O/perf_comm.txt
  head -40 $O/perf_sym.txt; cat $O/perf_comm.txt
fi
echo "== done $(date +%T)"
