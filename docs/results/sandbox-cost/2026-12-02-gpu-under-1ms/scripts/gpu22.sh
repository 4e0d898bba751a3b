#!/bin/bash
# gpu22.sh: per-test overhead, old (HEAD) against new (working tree) sandbox worker, alternating; faults per step.
cd "$(dirname "$0")/../.."; O=${OUT:-/tmp/g22}; mkdir -p $O
exec > >(tee $O/drive.txt) 2>&1
echo "== start $(date +%T)"; python3 --version; nproc; uname -r
export PYTHONPATH=$PWD
A=.devkit/scripts/ab; S=mrgrpo/sandbox
use() { cp $A/$1/worker.py $A/$1/isolation.py $S/; }
for i in 1 2 3 4 5; do
  for v in old new; do
    use $v
    echo "-- $v $i $(date +%T)"
    python3 .devkit/scripts/ablate.py 2000 1 "" 2>&1 | grep -v "^mrgrpo.sandbox" | grep "^round" | sed "s/^/$v /" | tee -a $O/ab.txt
  done
done
for v in old new; do
  use $v; cp $A/${v}_steps.py $S/worker.py
  python3 .devkit/scripts/steps.py 2000 2>&1 | grep -v "^mrgrpo.sandbox" > $O/steps_$v.txt; echo "== steps $v"; cat $O/steps_$v.txt
done
for v in old new; do
  use $v
  echo "== overhead line, $v $(date +%T)"
  python3 benchmarks/bench_reward.py --workers 2 --problems 10 --skip-verl --overhead-tests 2000 > $O/overhead_$v.txt 2>&1
  grep -A12 "^per-test overhead" $O/overhead_$v.txt
done
use new
python3 .devkit/scripts/ab_summary.py $O/ab.txt
echo "== done $(date +%T)"
