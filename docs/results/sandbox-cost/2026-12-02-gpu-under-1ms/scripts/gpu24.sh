#!/bin/bash
# gpu24.sh: why a test process's first steps cost what they cost on this host: THP, a bare child's start, pinning.
cd "$(dirname "$0")/../.."; O=${OUT:-/tmp/g24}; mkdir -p $O
exec > >(tee $O/drive.txt) 2>&1
echo "== start $(date +%T)"; export PYTHONPATH=$PWD
A=.devkit/scripts/ab; S=mrgrpo/sandbox
cat /sys/kernel/mm/transparent_hugepage/enabled /sys/kernel/mm/transparent_hugepage/defrag; grep -i huge /proc/meminfo
cat /sys/kernel/mm/transparent_hugepage/khugepaged/defrag 2>/dev/null
echo "== bare child start (thread CPU, faults), 3 runs"
for i in 1 2 3; do python3 -I -S -B .devkit/scripts/forkstart.py "$(cat .devkit/scripts/preload.json)"; done
mkdir -p $A/cur; cp $S/worker.py $S/isolation.py $S/pool.py $A/cur/
steps() {  # tag, variant dir, prefix command
  cp $A/$2/worker.py $A/$2/isolation.py $A/$2/pool.py $S/
  python3 .devkit/scripts/instrument.py $S/worker.py /tmp/ws.py && cp /tmp/ws.py $S/worker.py
  $3 python3 .devkit/scripts/steps.py 2000 2>&1 | grep -v "^mrgrpo.sandbox" > $O/steps_$1.txt
  echo "== steps $1"; grep -v "^|---" $O/steps_$1.txt | tr '\n' ' '; echo
}
for i in 1 2; do
  steps cur$i cur ""
  steps pinned$i cur "taskset -c 3"
  steps thp$i thp ""
done
cp $A/cur/*.py $S/
python3 - <<'PY'
import os, sys, time
sys.path.insert(0, os.getcwd())
from mrgrpo.sandbox import Job, run
run(Job(code="print(input())", inputs=["x"] * 20, outputs=["x"] * 20))
me = os.getpid()
launcher = int(open(f"/proc/{me}/task/{me}/children").read().split()[0])
zyg = int(open(f"/proc/{launcher}/task/{launcher}/children").read().split()[0])
tot = {}
for line in open(f"/proc/{zyg}/smaps_rollup"):
    print("zygote", line.strip())
PY
echo "== ablate cur vs thp, 3 pairs"
for i in 1 2 3; do for v in cur thp; do cp $A/$v/worker.py $A/$v/isolation.py $A/$v/pool.py $S/
  python3 .devkit/scripts/ablate.py 2000 1 "" 2>&1 | grep "^round" | sed "s/^/$v /" | tee -a $O/ab.txt; done; done
cp $A/cur/*.py $S/
python3 .devkit/scripts/ab_summary.py $O/ab.txt
echo "== done $(date +%T)"
