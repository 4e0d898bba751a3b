#!/bin/bash
# gpu20.sh: admission's busy hints (new) against the admission before them (old), 16 slots, 3 alternating pairs;
# then one long 16-slot batch with the new code (the 1% rule).
cd "$(dirname "$0")/../.."; R=$PWD
G=/tmp/g20; mkdir -p $G; exec > $G/drive.txt 2>&1
echo "== start $(date +%T)"; python3 --version; nproc; uname -r
cp mrgrpo/sandbox/admission.py $G/admission_new.py
sus() {  # slots, repeat, tag
  echo "## $1 slots, repeat $2 ($3) $(date +%T)"
  python3 benchmarks/bench_reward.py --workers $1 --processes 8 --max-program-cpu 0.5 --repeat $2 --skip-verl \
    --overhead-tests 200 > $G/sustained_$1_$3.txt 2>&1
  grep -E "^\| mrgrpo|cores;|slots: judging|^note" $G/sustained_$1_$3.txt
}
for i in 1 2 3; do
  cp .devkit/scripts/admission_orig.py mrgrpo/sandbox/admission.py; sus 16 128 old$i
  cp $G/admission_new.py mrgrpo/sandbox/admission.py; sus 16 128 new$i
done
cp $G/admission_new.py mrgrpo/sandbox/admission.py
sus 16 1024 long_new
echo "== drive done $(date +%T)"
