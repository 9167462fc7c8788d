#!/bin/bash
set -u
# The 2 x 2 of docs/perf/2026-11-29-sor-on-2-nodes.md: huge_pages of the matmul before x of the sor.
# Usage: B=DIR 2026-11-29-sor-on-2-nodes-cross.sh ROUNDS   (DIR: a build's target/release)
secs() { grep -o "time=[0-9.]*" | head -1 | cut -d= -f2; }
combos=("off off" "off auto" "auto off" "auto auto")
for i in $(seq 1 "$1"); do
  for j in 0 1 2 3; do
    set -- ${combos[$(((i + j) % 4))]}
    m=$(timeout 300 $B/dsmrun -n 2 --set huge_pages=$1 $B/matmul --no-check 4096 2>&1 | secs)
    s=$(timeout 120 $B/dsmrun -n 2 --set huge_pages=$2 $B/sor --no-check 2048 100 2>&1 | secs)
    echo "m$1-s$2 $m $s"
  done
done
