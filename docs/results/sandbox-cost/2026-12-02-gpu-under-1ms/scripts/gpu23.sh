#!/bin/bash
# gpu23.sh: the per-test overhead table (3 alternating rounds each), old (HEAD: worker, isolation, pool) against new
# (working tree), two pairs; faults per step of the new test process; sustained 2 and 16 slots with the new code.
cd "$(dirname "$0")/../.."; O=${OUT:-/tmp/g23}; mkdir -p $O
exec > >(tee $O/drive.txt) 2>&1
echo "== start $(date +%T)"; python3 --version; nproc; uname -r
export PYTHONPATH=$PWD
A=.devkit/scripts/ab; S=mrgrpo/sandbox
mkdir -p $A/new; cp $S/worker.py $S/isolation.py $S/pool.py $A/new/
use() { cp $A/$1/worker.py $A/$1/isolation.py $A/$1/pool.py $S/; }
for i in 1 2; do
  for v in old new; do
    use $v
    echo "== overhead, $v $i $(date +%T)"
    python3 benchmarks/bench_reward.py --workers 2 --problems 10 --skip-verl --overhead-tests 2000 > $O/overhead_$v$i.txt 2>&1
    grep -A10 "^per-test overhead" $O/overhead_$v$i.txt | grep -E "serial: wall|all processes /|judging process /|baseline 2"
  done
done
use new
python3 .devkit/scripts/instrument.py $S/worker.py /tmp/worker_steps.py && cp /tmp/worker_steps.py $S/worker.py
python3 .devkit/scripts/steps.py 2000 2>&1 | grep -v "^mrgrpo.sandbox" > $O/steps_new.txt; cat $O/steps_new.txt
use new
sus() {  # slots, repeat, tag
  echo "== $1 slots, repeat $2 ($3) $(date +%T)"
  python3 benchmarks/bench_reward.py --workers $1 --processes 8 --max-program-cpu 0.5 --repeat $2 --skip-verl \
    --overhead-tests 200 --overhead-rounds 1 > $O/sustained_$1_$3.txt 2>&1
  grep -E "^\| mrgrpo|cores;|slots: judging|^note" $O/sustained_$1_$3.txt
}
sus 2 16 new; sus 16 128 new
echo "== done $(date +%T)"
