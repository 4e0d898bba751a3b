#!/bin/bash
# gpu19.sh: the open items of issue 11 with the final code (HEAD), on the GPU machine.
# (1) scaling against three 2-slot runs (2-slot runs vary ~11% back to back): 2, 16, 2, 16, 2 alternating;
# (2) the 1% rule at 16 slots: one batch of ~290 s (--repeat 1024);
# (3) three more samples of the per-test overhead line (strict reading against the libc-fork bare runner).
cd "$(dirname "$0")/../.."; R=$PWD
G=/tmp/g19; mkdir -p $G; exec > $G/drive.txt 2>&1
echo "== start $(date +%T)"; python3 --version; nproc; uname -r; git log --oneline -1 2>/dev/null
sus() {  # slots, repeat, tag
  echo "## $1 slots, repeat $2 ($3) $(date +%T)"
  python3 benchmarks/bench_reward.py --workers $1 --processes 8 --max-program-cpu 0.5 --repeat $2 --skip-verl \
    --overhead-tests 400 > $G/sustained_$1_$3.txt 2>&1
  grep -E "^\| mrgrpo|cores;|slots: judging|^note" $G/sustained_$1_$3.txt
}
ovh() {
  echo "## per-test overhead ($1) $(date +%T)"
  python3 benchmarks/bench_reward.py --workers 2 --problems 10 --skip-verl --overhead-tests 2000 > $G/overhead_$1.txt 2>&1
  grep -E "judging process / the sandbox|minus baseline 2|2 slots: judging" $G/overhead_$1.txt
}
ovh a
sus 2 16 a; sus 16 128 a; sus 2 16 b; sus 16 128 b; sus 2 16 c
ovh b
sus 16 1024 long
ovh c
echo "== drive done $(date +%T)"
